"""Trigger requests: how the coordinator asks the source planner for a checkpoint.

Requests travel in the coordinator's control record (:mod:`barriered.control.record`)
and carry the checkpoint id the coordinator allocated; the planner starts each id at
most once (ids at or below the offset's ``last_id`` are stale) and reports what it did
in the offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from barriered.barrier import Mode

#: The reason of the trigger request of an ``availableNow`` run's final checkpoint.
FINAL_REASON = "final checkpoint of an availableNow run"


@dataclass(frozen=True)
class TriggerRequest:
    """A checkpoint the source is to start: a savepoint the coordinator
    triggered (in its control record), or the periodic one of its schedule.

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
