"""Recovery from a real Kafka topic: a driver killed by pid, a restore at another
parallelism, the state exact against a recount of the topic.

The topic has 4 partitions of uneven size (partition 0 holds four times the records of
each other one, and every partition is admitted at most 20 offsets per micro-batch, so
partition 0 lags), committed and aborted transactions and plain records. A driver
process keeps running totals per user until 2 checkpoints completed, then the test
SIGKILLs it; more records arrive, and the test restores the latest checkpoint into a new
checkpoint location with 3 shuffle partitions instead of 2 and runs to the end of the
topic: the state must equal a recount of every committed record, each counted once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import barriered
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from kafka_queries import KAFKA_MODES, kafka_totals, records, recount, state_totals
from runs import PREFIX, kill_driver_when

pytestmark = [pytest.mark.spark, pytest.mark.kafka]
FULL = pytest.mark.full
DRIVER = Path(__file__).with_name("kafka_driver.py")


def fill(broker: Any, topic: str, start: int) -> Counter[str]:
    """Uneven partitions: a committed transaction of 160 records into partition 0, an
    aborted one into partition 1, 40 plain records into each of partitions 1-3. Returns
    each user's total over the committed records."""
    broker.produce(topic, records(160, start), partition=0, transactional=True)
    broker.produce(topic, [(b"user-0", b"1000")] * 5, partition=1, transactional="abort")
    committed = records(160, start)
    for partition in (1, 2, 3):
        batch = records(40, start + 1000 * partition)
        broker.produce(topic, batch, partition=partition)
        committed += batch
    totals: Counter[str] = Counter()
    for key, value in committed:
        totals[key.decode()] += int(value.decode())
    return totals


def completed(snap: str) -> int:
    layout = SnapshotLayout.at(snap)
    return sum(1 for r in checkpoints_table.read_rows(layout) if r["status"] == "completed")


def crash_driver(
    tmp_path: Path, bootstrap: str, topic: str, mode: str, query: str = "keyed"
) -> None:
    """Run query ``query`` of ``kafka_queries.QUERIES`` in a driver process until 2
    checkpoints completed, then SIGKILL it."""
    snap = str(tmp_path / "snap")
    args = [snap, str(tmp_path / "ck-crashed"), bootstrap, topic, mode, query]
    kill_driver_when(DRIVER, args, tmp_path / "driver.out", lambda: completed(snap) >= 2 or None)


@pytest.mark.parametrize(
    "mode",
    [
        "unaligned",
        pytest.param("aligned", marks=FULL),
        pytest.param("aligned_with_timeout", marks=FULL),
        pytest.param("unaligned_by_reference", marks=FULL),
    ],
)
def test_kafka_state_after_a_kill_and_a_restore_is_exact(
    session: Any, kafka_broker: Any, tmp_path: Path, mode: str
) -> None:
    topic = f"events-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 4)
    produced = fill(kafka_broker, topic, 0)
    crash_driver(tmp_path, kafka_broker.bootstrap, topic, mode)
    produced += fill(kafka_broker, topic, 10_000)  # what arrives while the query is down

    snap = str(tmp_path / "snap")
    for key, value in {"snapshotPath": snap, **KAFKA_MODES[mode]}.items():
        session.conf.set(PREFIX + key, value)
    session.conf.set("spark.sql.shuffle.partitions", "3")
    query = (
        kafka_totals(session, kafka_broker.bootstrap, topic, restoreFrom="latest")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck-restored"))
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query, timeout=300)
    assert recount(kafka_broker, topic) == produced  # aborted records are not in it
    assert state_totals(session, snap) == produced
