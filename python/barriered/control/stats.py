"""Per-checkpoint statistics (Flink's ``AbstractCheckpointStats``), one row of ``_checkpoints``.

Durations, all in milliseconds on the coordinator clock:

- **start delay**: trigger -> the source fixed the barrier positions ``B_n(c)``;
- **alignment duration**: the first barrier delivered to Spark -> the cut (the batch
  boundary where the snapshot is taken);
- **end-to-end duration**: trigger -> completion (last acknowledgement and commit) or
  abort.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from barriered.barrier.modes import Mode
from barriered.control.model import CheckpointKind, CheckpointStatus
from barriered.errors import CheckpointError

__all__ = ["STATS_COLUMNS", "CheckpointStats", "CheckpointStatsTracker"]

STATS_COLUMNS: dict[str, str] = {
    "checkpoint_id": "bigint",
    "kind": "string",
    "mode": "string",
    "mode_reason": "string",
    "effective_mode": "string",
    "status": "string",
    "failure_reason": "string",
    "savepoint_target": "string",
    "trigger_timestamp_ms": "bigint",
    "end_timestamp_ms": "bigint",
    "start_delay_ms": "bigint",
    "alignment_duration_ms": "bigint",
    "end_to_end_duration_ms": "bigint",
    "state_bytes": "bigint",
    "state_rows": "bigint",
    "inflight_rows": "bigint",
    "inflight_bytes": "bigint",
    "state_write_ms": "bigint",
    "num_acknowledged": "int",
    "num_expected": "int",
    "trigger_batch_id": "bigint",
    "cut_batch_id": "bigint",
    "barrier_positions": "string",
    "state_table_version": "bigint",
}
"""Columns of :meth:`CheckpointStats.to_row`, in order, with their Spark SQL types.
``barrier_positions`` is a JSON object ``{"<channel>": position}``."""


@dataclass(frozen=True)
class CheckpointStats:
    """Statistics of one checkpoint, pending or finished.

    Attributes
    ----------
    checkpoint_id : int
    kind : {"checkpoint", "savepoint"}
    mode : Mode
        Mode decided at the trigger.
    mode_reason : str
        Why (a sentence with the numbers).
    status : {"pending", "completed", "aborted"}
    failure_reason : str or None
        Why it was aborted (``"expired"``, ``"subsumed"``, ``"declined by ..."``,
        ``"commit failed: ..."``, or the reason given to ``abort``).
    trigger_timestamp_ms : int
        Trigger time, coordinator clock (epoch ms with :class:`SystemClock`).
    end_timestamp_ms : int or None
        Completion or abort time.
    start_delay_ms, alignment_duration_ms, end_to_end_duration_ms : int or None
        See the module docstring; ``None`` while unknown.
    state_bytes, state_rows, inflight_rows, inflight_bytes : int
        Summed over the acknowledgements received.
    state_write_ms : int
        The longest a task took to write its keyed state at the cut (0: nothing written).
    num_acknowledged, num_expected : int
        Acknowledgements received / participants expected (``n/N``).
    trigger_batch_id, cut_batch_id : int or None
        Last micro-batch seen at the trigger; the batch that is the cut.
    barrier_positions : dict of int to int
        ``B_n(c)`` per channel.
    savepoint_target : str or None
    effective_mode : Mode or None
        Mode the cut was really taken in, as reported by the source.
    state_table_version : int or None
        Delta version of the state table returned by the committer.
    """

    checkpoint_id: int
    kind: CheckpointKind
    mode: Mode
    mode_reason: str
    status: CheckpointStatus
    trigger_timestamp_ms: int
    failure_reason: str | None = None
    end_timestamp_ms: int | None = None
    start_delay_ms: int | None = None
    alignment_duration_ms: int | None = None
    end_to_end_duration_ms: int | None = None
    state_bytes: int = 0
    state_rows: int = 0
    inflight_rows: int = 0
    inflight_bytes: int = 0
    state_write_ms: int = 0
    num_acknowledged: int = 0
    num_expected: int = 0
    trigger_batch_id: int | None = None
    cut_batch_id: int | None = None
    barrier_positions: Mapping[int, int] = field(default_factory=dict)
    savepoint_target: str | None = None
    effective_mode: Mode | None = None
    state_table_version: int | None = None

    @property
    def is_finished(self) -> bool:
        """Whether the checkpoint is completed or aborted."""
        return self.status != "pending"

    def to_row(self) -> dict[str, Any]:
        """Return the stats as one ``_checkpoints`` row of JSON-able primitives.

        Returns
        -------
        dict
            Keys are :data:`STATS_COLUMNS` in order; values are ``int``, ``str`` or
            ``None``; ``barrier_positions`` is a JSON string.
        """
        row: dict[str, Any] = {}
        for name in STATS_COLUMNS:
            value = getattr(self, name)
            if name == "barrier_positions":
                value = json.dumps({str(c): int(p) for c, p in sorted(value.items())})
            elif isinstance(value, Mode):
                value = value.value
            row[name] = value
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CheckpointStats:
        """Rebuild stats from a row written by :meth:`to_row`.

        Tolerates what table readers return: numpy integers, ``NaN`` for nulls, a
        positions mapping instead of its JSON string, missing optional columns.

        Raises
        ------
        barriered.errors.CheckpointError
            If a required column is missing or malformed.
        """
        try:
            positions_raw = _none(row.get("barrier_positions"))
            if positions_raw is None:
                positions: dict[int, int] = {}
            else:
                mapping = (
                    json.loads(positions_raw) if isinstance(positions_raw, str) else positions_raw
                )
                positions = {int(c): int(p) for c, p in dict(mapping).items()}
            return cls(
                checkpoint_id=int(row["checkpoint_id"]),
                kind=str(row["kind"]),  # type: ignore[arg-type]
                mode=Mode(row["mode"]),
                mode_reason=str(_none(row.get("mode_reason")) or ""),
                status=str(row["status"]),  # type: ignore[arg-type]
                trigger_timestamp_ms=int(row["trigger_timestamp_ms"]),
                failure_reason=_opt_str(row.get("failure_reason")),
                end_timestamp_ms=_opt_int(row.get("end_timestamp_ms")),
                start_delay_ms=_opt_int(row.get("start_delay_ms")),
                alignment_duration_ms=_opt_int(row.get("alignment_duration_ms")),
                end_to_end_duration_ms=_opt_int(row.get("end_to_end_duration_ms")),
                state_bytes=_opt_int(row.get("state_bytes")) or 0,
                state_rows=_opt_int(row.get("state_rows")) or 0,
                inflight_rows=_opt_int(row.get("inflight_rows")) or 0,
                inflight_bytes=_opt_int(row.get("inflight_bytes")) or 0,
                state_write_ms=_opt_int(row.get("state_write_ms")) or 0,
                num_acknowledged=_opt_int(row.get("num_acknowledged")) or 0,
                num_expected=_opt_int(row.get("num_expected")) or 0,
                trigger_batch_id=_opt_int(row.get("trigger_batch_id")),
                cut_batch_id=_opt_int(row.get("cut_batch_id")),
                barrier_positions=positions,
                savepoint_target=_opt_str(row.get("savepoint_target")),
                effective_mode=_opt_mode(row.get("effective_mode")),
                state_table_version=_opt_int(row.get("state_table_version")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"malformed _checkpoints row {dict(row)!r}: {type(exc).__name__}: {exc}"
            ) from exc


def _none(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _opt_int(value: Any) -> int | None:
    value = _none(value)
    return None if value is None else int(value)


def _opt_str(value: Any) -> str | None:
    value = _none(value)
    return None if value is None else str(value)


def _opt_mode(value: Any) -> Mode | None:
    value = _none(value)
    return None if value is None else Mode(value)


class CheckpointStatsTracker:
    """Keeps the statistics of finished checkpoints (the pending ones live elsewhere).

    Parameters
    ----------
    history_size : int
        Finished checkpoints kept; the oldest are dropped first.
    """

    def __init__(self, history_size: int) -> None:
        self._size = history_size
        self._finished: dict[int, CheckpointStats] = {}

    def record(self, stats: CheckpointStats) -> None:
        """Store the final statistics of a finished checkpoint."""
        if not stats.is_finished:
            raise CheckpointError(f"checkpoint {stats.checkpoint_id} is not finished")
        self._finished[stats.checkpoint_id] = stats
        if len(self._finished) > self._size:
            for cid in sorted(self._finished)[: len(self._finished) - self._size]:
                del self._finished[cid]

    def get(self, checkpoint_id: int) -> CheckpointStats | None:
        """Return the stats of a finished checkpoint still kept, else ``None``."""
        return self._finished.get(checkpoint_id)

    def finished(self) -> list[CheckpointStats]:
        """Return the finished checkpoints kept, in id order."""
        return [self._finished[cid] for cid in sorted(self._finished)]

    def latest_completed(self) -> CheckpointStats | None:
        """Return the completed checkpoint with the highest id, if any is kept."""
        for cid in sorted(self._finished, reverse=True):
            if self._finished[cid].status == "completed":
                return self._finished[cid]
        return None

    def recent_alignment_durations(self, last: int) -> list[int]:
        """Alignment durations among the last ``last`` completed checkpoints, oldest first.

        Only checkpoints that tried to align (mode ``"aligned"`` or
        ``"aligned_with_timeout"``) and measured an alignment are used, so a run of
        unaligned checkpoints empties the sample and the policy probes alignment again.
        """
        completed = [s for s in self.finished() if s.status == "completed"][-last:]
        return [
            s.alignment_duration_ms
            for s in completed
            if s.mode in (Mode.ALIGNED, Mode.ALIGNED_WITH_TIMEOUT)
            and s.alignment_duration_ms is not None
        ]
