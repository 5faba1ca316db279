"""A running query on the standalone cluster rescaled 2 -> 4 -> 3 partitions while
records keep arriving in its Kafka topic (issue 38).

A producer thread writes ``(user, amount)`` records to a 4-partition topic every 0.2 s
for the whole run; the query numbers each user's records with ``barriered.keyed``
(``RecordNumbers``) into the ``barriered-delta`` sink or the ``barriered-kafka`` sink,
started through ``barriered.managed`` on the cluster session, and is rescaled twice while
the producer runs. Once the producer stopped and the query caught up, the output holds
``(user, 1) .. (user, N)`` for every user's N committed input records (read
``read_committed``), each exactly once, and the state of the last checkpoint counts N.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

import barriered
from barriered.managed_query import Run
from barriered.statestore import checkpoints_table, rescales_table
from barriered.statestore.layout import SnapshotLayout
from kafka_queries import reader, records
from rescale_runs import DeltaOutput, KafkaOutput, numbered, numbering, wait_for
from runs import PREFIX, state_counts

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.kafka, pytest.mark.full]

#: Records per production step, and the pause between steps.
STEP, PAUSE_S = 10, 0.2


class Producer:
    """Writes :data:`STEP` records every :data:`PAUSE_S` seconds until stopped."""

    def __init__(self, broker: Any, topic: str) -> None:
        self.broker, self.topic = broker, topic
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(PAUSE_S):
            self.broker.produce(self.topic, records(STEP, self.written))
            self.written += STEP

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def _start(spark: Any, broker: Any, topic: str, tmp: Path, output: Any) -> Any:
    def events(run: Run) -> Any:
        return (
            reader(spark, broker.bootstrap, topic, maxRowsPerChannel="100", **run.source_options)
            .option("snapshotPath", str(tmp / "snap"))
            .load()
            .withColumn("user_id", F.col("key").cast("string"))
        )

    return numbering(events, tmp / "snap", output)


def _last_state(layout: SnapshotLayout) -> dict[str, int]:
    """``RecordNumbers``' count per user in the latest completed checkpoint."""
    last = checkpoints_table.completed(layout)[-1]
    return state_counts(layout, last["state_table_version"])


@pytest.mark.parametrize("sink", ["delta", "kafka"])
def test_a_query_on_the_cluster_rescales_2_4_3_while_kafka_records_flow(
    cluster_session: Any, kafka_broker: Any, tmp_path: Path, sink: str
) -> None:
    spark = cluster_session
    spark.conf.set(PREFIX + "checkpointInterval", "500ms")
    topic = f"in-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 4)
    output = DeltaOutput(tmp_path) if sink == "delta" else KafkaOutput(kafka_broker)
    producer = Producer(kafka_broker, topic)
    handle = barriered.managed(
        _start(spark, kafka_broker, topic, tmp_path, output), str(tmp_path / "ck"), spark, 2
    )
    try:
        wait_for("output", output.started)
        rows = []
        for partitions in (4, 3):
            seen = len(output.rows())
            rows.append(handle.rescale(partitions))
            wait_for("output after the rescale", lambda seen=seen: len(output.rows()) > seen)
        time.sleep(2)  # records keep flowing into the last run
        producer.stop()
        written: Counter[str] = Counter(
            r.key.decode() for r in kafka_broker.read_committed(topic) if r.key is not None
        )
        assert sum(written.values()) == producer.written
        wait_for("every record once", lambda: output.rows() == numbered(written), 300)
        layout = SnapshotLayout.configured(str(tmp_path / "snap"))
        wait_for("a checkpoint of every record", lambda: _last_state(layout) == written, 120)
    finally:
        producer.stop()
        handle.stop()
    assert [(r["from_partitions"], r["to_partitions"]) for r in rows] == [(2, 4), (4, 3)]
    assert rescales_table.read_rows(layout) == rows
    assert all(0 <= r["pause_ms"] < 120_000 for r in rows)
    assert layout.registrations()["record_numbers"]["partitions"] == 3
    assert output.rows() == numbered(written)
