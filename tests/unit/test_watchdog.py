"""The source's watch on the checkpoint coordinator (heartbeat in its control record)."""

from __future__ import annotations

from pathlib import Path

import pytest

from barriered.control.record import ControlRecord
from barriered.datasource.watchdog import MIN_BATCHES, CoordinatorWatchdog
from barriered.errors import CheckpointError, CoordinatorLostError
from barriered.statestore.layout import SnapshotLayout


def test_batches_without_a_heartbeat_fail_the_query_after_the_timeout() -> None:
    dog = CoordinatorWatchdog("/snap", 1000, None, now_ms=0)
    for _ in range(MIN_BATCHES):
        dog.batch_committed()
    dog.check(None, now_ms=999)  # not yet: the timeout has not passed
    with pytest.raises(CoordinatorLostError, match=r"'/snap'.*barriered.install\(spark\)") as info:
        dog.check(None, now_ms=1000)
    assert isinstance(info.value, CheckpointError)
    assert "3 micro-batches ran in 1.0 s since it started" in str(info.value)


def test_a_new_heartbeat_resets_the_watch() -> None:
    dog = CoordinatorWatchdog("/snap", 1000, (4, 50), now_ms=0)
    for _ in range(10):
        dog.batch_committed()
    dog.check((7, 60), now_ms=5000)  # the coordinator handled batch 7: alive
    for _ in range(MIN_BATCHES - 1):
        dog.batch_committed()
    dog.check((7, 60), now_ms=9000)  # long silence, but too few batches since
    dog.batch_committed()
    with pytest.raises(CoordinatorLostError, match="since it handled batch 7"):
        dog.check((7, 60), now_ms=9000)


def test_a_previous_runs_heartbeat_is_not_a_sign_of_life() -> None:
    dog = CoordinatorWatchdog("/snap", 1000, (9, 123), now_ms=0)
    for _ in range(MIN_BATCHES):
        dog.batch_committed()
    with pytest.raises(CoordinatorLostError):
        dog.check((9, 123), now_ms=2000)


def test_an_idle_query_is_not_failed() -> None:
    dog = CoordinatorWatchdog("/snap", 1000, None, now_ms=0)
    dog.check(None, now_ms=10**9)  # no batch ran: nothing to checkpoint


def test_the_heartbeat_round_trips_through_the_control_record(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    assert ControlRecord.read(layout).heartbeat is None  # nothing written yet
    ControlRecord().with_completed(3).with_heartbeat(12, 1_700_000).write(layout.control_file)
    back = ControlRecord.read(layout)
    assert back.heartbeat == (12, 1_700_000)
    assert back.last_completed == 3
