"""The end of an availableNow run: the source waits for the id of its final checkpoint
from the coordinator's schedule, for its last checkpoint, or for the coordinator to see
it (no Spark: the coordinator's files are written by hand)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from barriered.barrier import Mode
from barriered.control.record import ControlRecord
from barriered.control.schedule import Schedule
from barriered.datasource.available_now import (
    await_checkpoint,
    await_first_progress,
    await_schedule,
)
from barriered.errors import CheckpointError, CheckpointFailureLimitExceeded, CoordinatorLostError
from barriered.statestore.layout import SnapshotLayout


def _layout(tmp_path: Path) -> SnapshotLayout:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    (tmp_path / "snap" / "_coordinator").mkdir(parents=True)
    return layout


def test_the_final_checkpoint_takes_the_id_of_a_schedule_the_coordinator_publishes_later(
    tmp_path: Path,
) -> None:
    layout = _layout(tmp_path)
    other_run = ControlRecord(epoch=2, schedule=Schedule(9, due_ms=0, mode=Mode.ALIGNED))
    other_run.write(layout.control_file)
    fresh = Schedule(8, due_ms=1 << 62, mode=Mode.UNALIGNED, paused="busy")
    timer = threading.Timer(
        0.3, ControlRecord(epoch=3, schedule=fresh).write, [layout.control_file]
    )
    timer.start()
    started = time.monotonic()
    try:
        assert await_schedule(layout, 3, 7, timeout_ms=10_000) == fresh
    finally:
        timer.join()
    assert time.monotonic() - started >= 0.3


def test_without_a_fresh_schedule_the_run_fails_naming_the_coordinator(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    ControlRecord(epoch=3, schedule=Schedule(7, due_ms=0, mode=Mode.ALIGNED)).write(
        layout.control_file
    )
    with pytest.raises(CoordinatorLostError, match=r"above checkpoint 7.*coordinatorTimeout"):
        await_schedule(layout, 3, 7, timeout_ms=200)


def test_a_coordinators_refusal_fails_the_wait_with_its_error(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    refusal = CheckpointFailureLimitExceeded("tolerable failures exceeded")
    ControlRecord(epoch=3).with_fatal(refusal).write(layout.control_file)
    with pytest.raises(CheckpointFailureLimitExceeded, match="tolerable failures"):
        await_schedule(layout, 3, 7, timeout_ms=10_000)
    # another run's refusal is not this run's: it times out instead
    with pytest.raises(CoordinatorLostError):
        await_schedule(layout, 4, 7, timeout_ms=200)


def test_the_run_ends_once_its_last_checkpoint_completed(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    ControlRecord().with_completed(4).write(layout.control_file)
    await_checkpoint(layout, None, 4, timeout_ms=10_000)  # returns at once
    with pytest.raises(CheckpointError, match=r"checkpoint 5, the last .* is still pending"):
        await_checkpoint(layout, None, 5, timeout_ms=200)
    ControlRecord().with_completed(4).with_cancelled([5]).write(layout.control_file)
    with pytest.raises(CheckpointError, match=r"checkpoint 5, .* was aborted.*checkpoint 4's"):
        await_checkpoint(layout, None, 5, timeout_ms=10_000)


def test_a_run_that_started_no_checkpoint_waits_for_the_coordinators_heartbeat(
    tmp_path: Path,
) -> None:
    layout = _layout(tmp_path)
    ControlRecord().with_heartbeat(3, 100).write(layout.control_file)
    with pytest.raises(CoordinatorLostError, match="no checkpoint coordinator saw"):
        await_first_progress(layout, None, (3, 100), timeout_ms=200)
    ControlRecord().with_heartbeat(4, 200).write(layout.control_file)
    await_first_progress(layout, None, (3, 100), timeout_ms=10_000)
