"""The checkpoint figures of one snapshot path, folded from its ``_checkpoints`` rows.

Every figure the metrics, the traces and the page show comes from the rows the driver
appends to ``_checkpoints`` (one per finished checkpoint, :mod:`barriered.control.stats`):
counts by status and failure reason, the latest completed and failed checkpoint, what the
run was restored from, a histogram of end-to-end durations and the newest rows (the
history). A :class:`Tally` takes the rows one by one (the driver's hook) or all at once
(:meth:`Tally.of`, the page of a snapshot path on disk); :meth:`Tally.figures` is a
consistent copy to read from another thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DURATION_BUCKETS_S",
    "REASONS",
    "Figures",
    "Tally",
    "reason_label",
]

#: The failure reasons a failed checkpoint is counted under, as ``(label, prefix of
#: _checkpoints.failure_reason)``; a reason matching none is ``"other"``. A bounded set,
#: so that the reason can be a metric label.
REASONS: tuple[tuple[str, str], ...] = (
    ("expired", "expired"),
    ("declined", "declined by"),
    ("commit_failed", "commit failed"),
    ("subsumed", "subsumed"),
    ("aborted_by_source", "aborted by the source"),
    ("interrupted", "interrupted"),
    ("shutdown", "coordinator shut down"),
    ("coordinator_failed", "coordinator failed"),
)

#: Upper bounds (seconds) of the buckets of the end-to-end duration histogram.
DURATION_BUCKETS_S: tuple[float, ...] = (
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

#: Rows kept as the history (Flink's ``web.checkpoints.history`` is 10).
HISTORY_SIZE = 100


def reason_label(reason: str | None) -> str:
    """The label of a failure reason (one of :data:`REASONS`, else ``"other"``)."""
    text = (reason or "").strip().lower()
    return next((label for label, prefix in REASONS if text.startswith(prefix)), "other")


@dataclass(frozen=True)
class Figures:
    """The checkpoint figures of one snapshot path at one moment.

    Attributes
    ----------
    snapshot_path : str
        The snapshot path the rows belong to.
    completed : int
        Completed checkpoints and savepoints (Flink's ``numberOfCompletedCheckpoints``).
    failed_by_reason : dict of str to int
        Aborted ones by :func:`reason_label` (their sum is Flink's
        ``numberOfFailedCheckpoints``; ``subsumed`` ones are included, as in Flink).
    latest_completed, latest_failed : dict or None
        The ``_checkpoints`` row of the newest completed / aborted checkpoint.
    restored : dict or None
        What the run was restored from (``from``, ``checkpoint_id``), when known.
    duration_buckets : tuple of int
        Completed checkpoints whose end-to-end duration is at most each bound of
        :data:`DURATION_BUCKETS_S` (cumulative, as Prometheus' ``le``).
    duration_sum_s : float
        The sum of those durations, seconds.
    history : tuple of dict
        The newest rows (at most :data:`HISTORY_SIZE`), oldest first.
    """

    snapshot_path: str
    completed: int = 0
    failed_by_reason: Mapping[str, int] = field(default_factory=dict)
    latest_completed: Mapping[str, Any] | None = None
    latest_failed: Mapping[str, Any] | None = None
    restored: Mapping[str, Any] | None = None
    duration_buckets: tuple[int, ...] = (0,) * len(DURATION_BUCKETS_S)
    duration_sum_s: float = 0.0
    history: tuple[Mapping[str, Any], ...] = ()

    @property
    def failed(self) -> int:
        """Every aborted checkpoint (Flink's ``numberOfFailedCheckpoints``)."""
        return sum(self.failed_by_reason.values())

    @property
    def total(self) -> int:
        """Every finished checkpoint (Flink's ``totalNumberOfCheckpoints`` without the ones
        in progress)."""
        return self.completed + self.failed

    def to_json(self) -> dict[str, Any]:
        """The figures as one JSON-able object (the page's ``/checkpoints.json``).

        Returns
        -------
        dict
            ``snapshot_path``, ``counts`` (``completed``, ``failed``, ``total``,
            ``failed_by_reason``), ``latest_completed``, ``latest_failed``,
            ``restored`` and ``history`` (rows, newest first).
        """
        return {
            "snapshot_path": self.snapshot_path,
            "counts": {
                "completed": self.completed,
                "failed": self.failed,
                "total": self.total,
                "failed_by_reason": dict(sorted(self.failed_by_reason.items())),
            },
            "latest_completed": _plain(self.latest_completed),
            "latest_failed": _plain(self.latest_failed),
            "restored": _plain(self.restored),
            "history": [_plain(r) for r in reversed(self.history)],
        }


class Tally:
    """The figures of one snapshot path, updated one finished checkpoint at a time.

    Parameters
    ----------
    snapshot_path : str
        The snapshot path.
    restored : mapping, optional
        What the run was restored from (``from``, ``checkpoint_id``).

    Notes
    -----
    Thread-safe: the driver's listener adds rows while the endpoint reads figures.
    """

    def __init__(self, snapshot_path: str, restored: Mapping[str, Any] | None = None) -> None:
        self.snapshot_path = snapshot_path
        self._lock = threading.Lock()
        self._completed = 0
        self._failed: dict[str, int] = {}
        self._latest_completed: dict[str, Any] | None = None
        self._latest_failed: dict[str, Any] | None = None
        self._restored = dict(restored) if restored else None
        self._buckets = [0] * len(DURATION_BUCKETS_S)
        self._sum_s = 0.0
        self._history: deque[dict[str, Any]] = deque(maxlen=HISTORY_SIZE)

    @classmethod
    def of(
        cls,
        snapshot_path: str,
        rows: Iterable[Mapping[str, Any]],
        restored: Mapping[str, Any] | None = None,
    ) -> Tally:
        """A tally of ``rows`` (``_checkpoints`` rows, oldest first)."""
        tally = cls(snapshot_path, restored)
        for row in rows:
            tally.add(row)
        return tally

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one finished checkpoint's ``_checkpoints`` row (pending rows are ignored)."""
        status = row.get("status")
        if status not in ("completed", "aborted"):
            return
        kept = {**row, "snapshot_path": self.snapshot_path}
        with self._lock:
            self._history.append(kept)
            if status == "completed":
                self._completed += 1
                if _newer(kept, self._latest_completed):
                    self._latest_completed = kept
                duration = row.get("end_to_end_duration_ms")
                if duration is not None:
                    seconds = int(duration) / 1000.0
                    self._sum_s += seconds
                    for i, bound in enumerate(DURATION_BUCKETS_S):
                        if seconds <= bound:
                            self._buckets[i] += 1
            else:
                label = reason_label(row.get("failure_reason"))
                self._failed[label] = self._failed.get(label, 0) + 1
                if _newer(kept, self._latest_failed):
                    self._latest_failed = kept

    def restored_from(self, restored: Mapping[str, Any] | None) -> None:
        """Record what the run was restored from (None: a fresh start)."""
        with self._lock:
            self._restored = dict(restored) if restored else None

    def figures(self) -> Figures:
        """A consistent copy of the figures."""
        with self._lock:
            return Figures(
                snapshot_path=self.snapshot_path,
                completed=self._completed,
                failed_by_reason=dict(self._failed),
                latest_completed=self._latest_completed,
                latest_failed=self._latest_failed,
                restored=self._restored,
                duration_buckets=tuple(self._buckets),
                duration_sum_s=self._sum_s,
                history=tuple(self._history),
            )


def _newer(row: Mapping[str, Any], than: Mapping[str, Any] | None) -> bool:
    if than is None:
        return True
    return (int(row["checkpoint_id"]), int(row.get("end_timestamp_ms") or 0)) >= (
        int(than["checkpoint_id"]),
        int(than.get("end_timestamp_ms") or 0),
    )


def _plain(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A row with JSON-able values (numpy scalars and the like as Python's)."""
    if row is None:
        return None
    out: dict[str, Any] = {}
    for key, value in row.items():
        if value is None or isinstance(value, (bool, int, float, str)):
            out[key] = value
        elif hasattr(value, "item"):
            out[key] = value.item()
        else:
            out[key] = str(value)
    return out
