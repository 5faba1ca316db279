"""The coordinator's schedule: the next periodic checkpoint, started by the source planner.

The coordinator runs in a ``StreamingQueryListener``: it hears of batch ``k`` only once
Spark already planned batch ``k + 1``, so a checkpoint it requested through the trigger
log after batch ``k`` would start no sooner than batch ``k + 2``. Instead it publishes,
after every batch and whenever its state changes, *when* the next periodic checkpoint is
due and how it is to be taken, in its control record
(:mod:`barriered.control.record`), which the planner reads before every batch and acts
on itself, in the first batch planned once the checkpoint is due. The coordinator keeps
every decision:

* ``checkpoint_id``: the id it reserved for the checkpoint (savepoints take
  other ids, so the two never collide); the final checkpoint of an availableNow run
  takes it too (:func:`final_checkpoint`), so that every id comes from the coordinator's
  one allocator;
* ``due_ms``: the earliest start, from ``checkpointInterval`` and
  ``minPauseBetweenCheckpoints``;
* ``mode`` and ``reason``: the aligned/unaligned decision from its measured signals;
* ``paused``: why nothing may start now (``maxConcurrentCheckpoints`` reached), or None.

The record names the run that published it; the planner of another run ignores it.

The planner starts the reserved id at most once (ids at or below its offset's
``last_id`` are stale) and records the start in the offset (``started``), from which the
coordinator adopts the checkpoint like one it requested itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from barriered.barrier import Mode
from barriered.control.triggers import FINAL_REASON, TriggerRequest

__all__ = ["Schedule", "final_checkpoint"]


@dataclass(frozen=True)
class Schedule:
    """The next periodic checkpoint, as the coordinator published it.

    Attributes
    ----------
    checkpoint_id : int
        The id reserved for it.
    due_ms : int
        Wall-clock time (ms) from which on it may start.
    mode : Mode
        The mode it is to be taken in.
    reason : str
        Why that mode (recorded in ``_checkpoints``).
    paused : str or None
        Why it may not start now, even when due (None: it may).
    """

    checkpoint_id: int
    due_ms: int
    mode: Mode
    reason: str = ""
    paused: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode(self.mode))  # a mode name is accepted too

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "checkpoint_id": self.checkpoint_id,
            "due_ms": self.due_ms,
            "mode": self.mode.value,
            "reason": self.reason,
            "paused": self.paused,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schedule:
        """Parse the JSON form."""
        return cls(
            checkpoint_id=int(d["checkpoint_id"]),
            due_ms=int(d["due_ms"]),
            mode=Mode(d["mode"]),
            reason=str(d.get("reason", "")),
            paused=None if d.get("paused") is None else str(d["paused"]),
        )

    def request(self, now_ms: int, last_id: int) -> TriggerRequest | None:
        """The checkpoint to start now, or None: not yet due, paused, or already started
        (its id is at or below ``last_id``, the highest id the source started)."""
        if self.paused is not None or now_ms < self.due_ms or self.checkpoint_id <= last_id:
            return None
        return TriggerRequest(
            checkpoint_id=self.checkpoint_id,
            kind="checkpoint",
            mode=self.mode,
            reason=self.reason,
            requested_ms=self.due_ms,
        )


def final_checkpoint(schedule: Schedule | None, now_ms: int, last_id: int) -> TriggerRequest | None:
    """The final checkpoint of an availableNow run, aligned, under an id of the
    coordinator's allocator, or None while the source must wait for one.

    With a schedule of the run, the id it reserved (due or not, paused or not: the run
    ends with it); None when the source already started or passed that id (the
    coordinator reserves a newer one once it hears of the batch that did). Without one,
    no coordinator has seen the run, so none gave out an id for it: the id is the first
    its allocator gives once it does, one above the offset's ``last_id`` (the listener
    starts it there).

    Parameters
    ----------
    schedule : Schedule or None
        The run's schedule (:meth:`barriered.control.record.ControlRecord.schedule_of`).
    now_ms : int
        When it is requested.
    last_id : int
        The highest id the source started.
    """
    if schedule is None:
        return TriggerRequest(last_id + 1, reason=FINAL_REASON, requested_ms=now_ms)
    if schedule.checkpoint_id <= last_id:
        return None
    return TriggerRequest(schedule.checkpoint_id, reason=FINAL_REASON, requested_ms=now_ms)
