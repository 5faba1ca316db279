"""Exactly-once Kafka output: the ``barriered-kafka`` sink across a driver crash and a
restore, on the real broker.

Each crash is real: a driver process (``kafka_sink_driver.py``) runs the query until a
blocking fault holds it at the chosen point, then the test SIGKILLs it by pid. The
restore runs here (``restoreFrom=latest``, a new checkpoint location, 3 shuffle
partitions instead of 2) into the same topic, which must then hold, for a
``read_committed`` consumer, exactly what one uninterrupted run publishes: every record
once (append), the final total as each key's last value (update). A driver held in the
middle of publishing while a restore takes over (a zombie), then released, publishes
nothing.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from barriered.sink.kafka import publisher
from barriered.statestore.layout import SnapshotLayout
from barriered.testing import faults
from kafka_sink_runs import FORMAT, as_records, kafka_query, published
from runs import (
    MODES,
    SOURCE,
    commit_metadata,
    expected_output,
    kill_driver,
    kill_driver_when,
    launch_driver,
    start,
    upstream,
    wait_driver_until,
    wait_final_checkpoint,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
FULL = pytest.mark.full
DRIVER = Path(__file__).with_name("kafka_sink_driver.py")

#: "Before the cut" as in test_sink_recovery: aligned modes crash while aligning,
#: unaligned in the cut batch before the in-flight writer acknowledged.
BEFORE_CUT = {
    "aligned": faults.ALIGNING,
    "aligned_with_timeout": faults.ALIGNING,
    "unaligned": faults.INFLIGHT_CAPTURE,
}
#: All behind ``full`` (make test under 20 min: ~50 s a case); the default suite's crash
#: with a sink is the Delta sink's (test_sink_recovery), its Kafka sink test_kafka_sink.py.
CASES = [
    pytest.param(kind, mode, point, marks=(FULL,))
    for kind in ("append", "update")
    for mode in ("aligned", "unaligned", "aligned_with_timeout")
    for point in (
        BEFORE_CUT[mode],  # before the cut
        faults.BEFORE_COMMIT,  # after the cut, before the completion
        faults.AFTER_COMMIT,  # completed, not published
        faults.MID_PUBLISH,  # half its records in the open transaction
        faults.AFTER_SINK_COMMIT,  # published
    )
]


@pytest.fixture(autouse=True)
def _close_clients() -> Any:
    yield
    publisher.close()


def crash_driver(tmp_path: Path, bootstrap: str, topic: str, kind: str, mode: str, point: str):
    """Run the query in a driver process until the fault at ``point`` holds it (from
    checkpoint 2 on), SIGKILL the driver; return the fault's record."""
    snap = str(tmp_path / "snap")
    faults.inject(snap, point, checkpoint_id=2, action=faults.BLOCK)
    args = [snap, str(tmp_path), bootstrap, topic, kind, mode]
    return kill_driver_when(
        DRIVER, args, tmp_path / "driver.out", lambda: faults.fired(snap, point)
    )


def restore_latest(
    session: Any, tmp_path: Path, bootstrap: str, topic: str, kind: str, mode: str
) -> Any:
    """Restore the latest checkpoint (3 shuffle partitions) and run it to its end."""
    processor, sink = kafka_query(kind, bootstrap, topic)
    session.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        source = {**SOURCE, "restoreFrom": "latest"}
        restored = start(
            session,
            tmp_path,
            MODES[mode],
            source,
            None,
            "ck-restored",
            processor,
            sink,
            sink_format=FORMAT,
            output=as_records,
        )
        restored.awaitTermination()
    finally:
        session.conf.set("spark.sql.shuffle.partitions", "2")
    return restored


@pytest.mark.parametrize(("kind", "mode", "point"), CASES)
def test_published_output_after_a_crash_and_restore_is_exactly_one_runs(
    session: Any, kafka_broker: Any, tmp_path: Path, kind: str, mode: str, point: str
) -> None:
    topic = f"out-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 2)
    crashed_at = crash_driver(tmp_path, kafka_broker.bootstrap, topic, kind, mode, point)[
        "checkpoint_id"
    ]
    layout = SnapshotLayout.configured(str(tmp_path / "snap"))
    committed = commit_metadata(layout)
    settings = publisher.saved_settings(layout, topic)
    assert settings is not None
    done = publisher.published(settings)
    last = -1 if done is None else done.checkpoint_id
    if point in (faults.AFTER_COMMIT, faults.MID_PUBLISH):  # completed, not published
        assert crashed_at in committed and last < crashed_at
    if point == faults.MID_PUBLISH:  # records in the log, in the open transaction
        uncommitted = kafka_broker.end_offsets(topic, read_committed=False)
        assert uncommitted != kafka_broker.end_offsets(topic)
    if point == faults.AFTER_SINK_COMMIT:
        assert crashed_at in committed and last == crashed_at
    if point in (faults.BEFORE_COMMIT, BEFORE_CUT[mode]):
        assert crashed_at not in committed and last < crashed_at

    restored = restore_latest(session, tmp_path, kafka_broker.bootstrap, topic, kind, mode)
    wait_final_checkpoint(layout, tuple(upstream().available()), restored, after_id=crashed_at)
    everything = dict(enumerate(upstream().available()))
    assert published(kafka_broker, topic, kind) == expected_output(kind, everything)


@FULL
def test_a_zombie_driver_released_mid_publish_after_a_restore_publishes_nothing(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    """A driver held in the middle of publishing checkpoint 2 (half its records in the
    open transaction) while a restore takes the path over and runs to its end, then
    released: its transaction was aborted by the restored run's ``init_transactions``,
    its commit is fenced, and the topic holds exactly one run's output."""
    topic = f"out-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 2)
    snap = str(tmp_path / "snap")
    faults.inject(snap, faults.MID_PUBLISH, checkpoint_id=2, action=faults.BLOCK)
    log = tmp_path / "zombie.out"
    args = [snap, str(tmp_path), kafka_broker.bootstrap, topic, "append", "aligned"]
    zombie = launch_driver(DRIVER, args, log)
    try:
        wait_driver_until(zombie, log, lambda: faults.fired(snap, faults.MID_PUBLISH), 240)
        uncommitted = kafka_broker.end_offsets(topic, read_committed=False)
        assert uncommitted != kafka_broker.end_offsets(topic)  # in the open transaction
        layout = SnapshotLayout.configured(snap)
        restored = restore_latest(
            session, tmp_path, kafka_broker.bootstrap, topic, "append", "aligned"
        )
        wait_final_checkpoint(layout, tuple(upstream().available()), restored, after_id=2)
        faults.release(snap, faults.MID_PUBLISH)
        zombie.wait(timeout=120)
    finally:
        kill_driver(zombie)
    assert "fenced" in log.read_text().lower(), log.read_text()[-4000:]
    everything = dict(enumerate(upstream().available()))
    assert published(kafka_broker, topic, "append") == expected_output("append", everything)
