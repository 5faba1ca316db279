"""The end of a Trigger.AvailableNow run: what the source waits for before it ends.

An availableNow run ends once its planning call has nothing more to plan. Before the
source says so, it waits for the coordinator (the session's listener, which hears of a
batch only after Spark planned the next): for the id of the run's final checkpoint
(:func:`await_schedule`), for the last checkpoint the run started to finish
(:func:`await_checkpoint`), or, in a run that started none, for the coordinator to see
the run at all (:func:`await_first_progress`). Each fails the query, naming why, when
the coordinator refused it (its control record's ``fatal``) or did not answer in time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from barriered import wall_time
from barriered.config import CHECKPOINT_TIMEOUT
from barriered.control.record import ControlRecord
from barriered.control.schedule import Schedule
from barriered.errors import BarrieredError, CheckpointError, CoordinatorLostError
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout

__all__ = ["await_checkpoint", "await_first_progress", "await_schedule"]

log = logging.getLogger(__name__)

#: How often the end of an availableNow run looks at the coordinator's files.
_POLL_S = 0.05

_NOT_INSTALLED = (
    "call barriered.install(spark) on the session that starts the query, then restart it"
)

_T = TypeVar("_T")


def _poll(
    layout: SnapshotLayout,
    epoch: int | None,
    timeout_ms: int,
    answer: Callable[[ControlRecord], _T | None],
    timed_out: Callable[[], BarrieredError],
) -> _T:
    """Read the control record until ``answer`` gives something (it may raise), raising
    its fatal error for run ``epoch`` first, or ``timed_out()`` once ``timeout_ms``
    passed."""
    deadline = wall_time.now_ms() + timeout_ms
    while True:
        control = ControlRecord.read(layout)
        control.raise_fatal(epoch)
        found = answer(control)
        if found is not None:
            return found
        if wall_time.now_ms() >= deadline:
            raise timed_out()
        time.sleep(_POLL_S)


def await_schedule(
    layout: SnapshotLayout, epoch: int | None, last_id: int, timeout_ms: int
) -> Schedule:
    """Wait until the coordinator publishes a schedule of run ``epoch`` whose reserved id
    is above ``last_id``: the id of the run's final checkpoint.

    Raises
    ------
    CoordinatorLostError
        After ``timeout_ms`` (``coordinatorTimeout``) without one.
    """

    def fresh(control: ControlRecord) -> Schedule | None:
        schedule = control.schedule_of(epoch)
        return schedule if schedule is not None and schedule.checkpoint_id > last_id else None

    schedule = _poll(
        layout,
        epoch,
        timeout_ms,
        fresh,
        lambda: CoordinatorLostError(
            f"no checkpoint coordinator gave this availableNow run on snapshot path "
            f"{layout.root!r} an id for its final checkpoint (a schedule above checkpoint "
            f"{last_id}) within {timeout_ms} ms (coordinatorTimeout): " + _NOT_INSTALLED
        ),
    )
    log.info(
        "checkpoint %d: the id of the availableNow run's final checkpoint",
        schedule.checkpoint_id,
    )
    return schedule


def await_checkpoint(layout: SnapshotLayout, epoch: int | None, last: int, timeout_ms: int) -> None:
    """Wait until checkpoint ``last``, the last run ``epoch`` started, is finished, so
    that the run never ends with it pending.

    Raises
    ------
    CheckpointError
        When it was aborted (its reason from ``_checkpoints``) or is still pending after
        ``timeout_ms`` (``checkpointTimeout``); a coordinator's refusal (the control
        record's ``fatal``) with its own type.
    """

    def finished(control: ControlRecord) -> bool | None:
        if (control.last_completed or 0) >= last:
            return True
        if last in control.cancelled:
            done = control.last_completed
            committed = "none" if done is None else f"checkpoint {done}'s"
            row = checkpoints_table.row_of(checkpoints_table.read_rows(layout), last)
            reason = None if row is None else row["failure_reason"]
            raise CheckpointError(
                f"checkpoint {last}, the last of this availableNow run on snapshot path "
                f"{layout.root!r}, was aborted: {reason or 'no reason recorded'}. "
                f"What the run read after {committed} positions is not committed, so "
                "the run fails instead of ending: fix the cause, then restart the "
                "query on its checkpointLocation (it takes the checkpoint again) or "
                "restore it (restoreFrom=latest)"
            )
        return None

    _poll(
        layout,
        epoch,
        timeout_ms,
        finished,
        lambda: CheckpointError(
            f"checkpoint {last}, the last of this availableNow run on snapshot path "
            f"{layout.root!r}, is still pending {timeout_ms} ms after the run's "
            f"last batch ({CHECKPOINT_TIMEOUT.key}): its coordinator, the session's "
            "listener, neither completed nor aborted it. Check that "
            "barriered.install(spark) was called on the session that started the "
            "query and that it still runs, then restart the query"
        ),
    )


def await_first_progress(
    layout: SnapshotLayout,
    epoch: int | None,
    heartbeat_at_start: tuple[int, int] | None,
    timeout_ms: int,
) -> None:
    """Wait until the coordinator handled a batch of run ``epoch`` (its heartbeat changed
    since ``heartbeat_at_start``, when the run started) or refused it (``fatal``).

    Raises
    ------
    CoordinatorLostError
        After ``timeout_ms`` (``coordinatorTimeout``) without either.
    """
    _poll(
        layout,
        epoch,
        timeout_ms,
        lambda control: True if control.heartbeat != heartbeat_at_start else None,
        lambda: CoordinatorLostError(
            f"no checkpoint coordinator saw this availableNow run on snapshot path "
            f"{layout.root!r} within {timeout_ms} ms (coordinatorTimeout) of its last "
            "batch: " + _NOT_INSTALLED
        ),
    )
