"""Trigger requests: how the coordinator asks the source planner for a checkpoint.

The coordinator (in the driver process, fed by the query listener) writes one small JSON
file, ``_coordinator/triggers.json``, atomically; the source planner reads it before
planning every micro-batch. Requests carry the checkpoint id the coordinator allocated;
the planner starts each id at most once (ids at or below the offset's ``last_id`` are
stale) and reports what it did in the offset. The file also carries the ids to cancel
(expired or aborted by the coordinator), the id of the latest completed checkpoint,
which the keyed operator uses as the base of incremental snapshots, and per channel the
position before which no retained checkpoint needs the upstream's records (the source
releases them, see ``archiveTo``), and the coordinator's heartbeat (the last batch it
handled and when), by which the source notices a lost coordinator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from barriered.barrier import Mode
from barriered.files.fileio import read_json, write_json

#: The reason of the trigger request of an ``availableNow`` run's final checkpoint.
FINAL_REASON = "final checkpoint of an availableNow run"

#: How many recent requests/cancellations the file keeps.
_KEEP = 32


@dataclass(frozen=True)
class TriggerRequest:
    """A checkpoint the source is to start: a savepoint the coordinator
    triggered (written to the trigger log), or the periodic one of its schedule.

    Attributes
    ----------
    checkpoint_id : int
        The id the coordinator allocated (JSON key ``id``).
    kind : {"checkpoint", "savepoint"}
        Savepoints are always aligned and never subsumed.
    mode : Mode
        The mode the coordinator decided.
    reason : str
        Why that mode (recorded in ``_checkpoints``).
    requested_ms : int
        When it was requested (a schedule's due time).
    """

    checkpoint_id: int
    kind: str = "checkpoint"
    mode: Mode = Mode.ALIGNED
    reason: str = ""
    requested_ms: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode(self.mode))  # a mode name is accepted too

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "id": self.checkpoint_id,
            "kind": self.kind,
            "mode": self.mode.value,
            "reason": self.reason,
            "requested_ms": self.requested_ms,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TriggerRequest:
        """Parse the JSON form."""
        return cls(
            checkpoint_id=int(d["id"]),
            kind=str(d.get("kind", "checkpoint")),
            mode=Mode(d.get("mode", Mode.ALIGNED.value)),
            reason=str(d.get("reason", "")),
            requested_ms=int(d.get("requested_ms", 0)),
        )


@dataclass(frozen=True)
class TriggerLog:
    """The content of ``triggers.json``."""

    requests: tuple[TriggerRequest, ...] = ()
    cancelled: frozenset[int] = field(default_factory=frozenset)
    last_completed: int | None = None
    fatal: str | None = None
    release: tuple[int, ...] | None = None
    heartbeat: tuple[int, int] | None = None
    #: The barrier positions of ``last_completed``, per channel.
    completed_positions: tuple[int, ...] | None = None

    @classmethod
    def read(cls, uri: str) -> TriggerLog:
        """Read the log at ``uri``; an absent file is an empty log."""
        raw = read_json(uri, default=None)
        if not raw:
            return cls()
        completed = raw.get("completed_positions")
        return cls(
            requests=tuple(TriggerRequest.from_dict(r) for r in raw.get("requests", [])),
            cancelled=frozenset(int(x) for x in raw.get("cancelled", [])),
            last_completed=raw.get("last_completed"),
            fatal=raw.get("fatal"),
            release=None if raw.get("release") is None else tuple(raw["release"]),
            heartbeat=None if raw.get("heartbeat") is None else tuple(raw["heartbeat"]),
            completed_positions=None if completed is None else tuple(completed),
        )

    def write(self, uri: str) -> None:
        """Write the log to ``uri`` atomically, keeping only recent entries."""
        write_json(
            uri,
            {
                "requests": [
                    r.to_dict() for r in sorted(self.requests, key=lambda r: r.checkpoint_id)
                ][-_KEEP:],
                "cancelled": sorted(self.cancelled)[-_KEEP:],
                "last_completed": self.last_completed,
                "fatal": self.fatal,
                "release": None if self.release is None else list(self.release),
                "heartbeat": None if self.heartbeat is None else list(self.heartbeat),
                "completed_positions": (
                    None if self.completed_positions is None else list(self.completed_positions)
                ),
            },
        )

    def with_request(self, request: TriggerRequest) -> TriggerLog:
        """Return the log with ``request`` added."""
        return replace(self, requests=(*self.requests, request))

    def with_cancelled(self, ids: Sequence[int]) -> TriggerLog:
        """Return the log with ``ids`` marked cancelled."""
        return replace(self, cancelled=self.cancelled | set(ids))

    def with_completed(
        self,
        checkpoint_id: int,
        release: Sequence[int] | None = None,
        positions: Sequence[int] | None = None,
    ) -> TriggerLog:
        """Return the log with ``checkpoint_id`` as the latest completed checkpoint, with
        its barrier ``positions``, and, if given, the positions before which the upstream
        may be released."""
        last = self.last_completed
        newest = last is None or checkpoint_id >= last
        return replace(
            self,
            last_completed=checkpoint_id if newest else last,
            release=self.release if release is None else tuple(release),
            completed_positions=(
                tuple(positions) if newest and positions is not None else self.completed_positions
            ),
        )

    def with_heartbeat(self, batch_id: int, now_ms: int) -> TriggerLog:
        """Return the log with the coordinator's sign of life: it handled ``batch_id``."""
        return replace(self, heartbeat=(batch_id, now_ms))

    def with_fatal(self, message: str | None) -> TriggerLog:
        """Return the log with a fatal error the source must fail the query with (or none)."""
        return replace(self, fatal=message)
