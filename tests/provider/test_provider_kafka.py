"""Spark's own ``groupBy().agg()`` over a real Kafka topic under the barriered state
store provider: a driver killed by pid after 2 completed checkpoints, more records, a
restore into 3 shuffle partitions instead of 2; the aggregation's state must equal a
recount of the topic (the uneven topic and the kill of
``tests/recovery/test_kafka_recovery.py``)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import barriered
from kafka_queries import kafka_sums, recount
from runs import MODES, PREFIX

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recovery"))
from test_kafka_recovery import crash_driver, fill

pytestmark = [pytest.mark.spark, pytest.mark.provider, pytest.mark.kafka, pytest.mark.full]


def test_a_kafka_aggregation_restores_exactly_at_other_parallelism(
    provider_spark: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    spark = provider_spark
    topic = f"sums-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 4)
    produced = fill(kafka_broker, topic, 0)
    crash_driver(tmp_path, kafka_broker.bootstrap, topic, "unaligned", "aggregation")
    produced += fill(kafka_broker, topic, 10_000)

    conf = {
        "snapshotPath": str(tmp_path / "snap"),
        "maxParallelism": "8",
        **MODES["unaligned"],
    }
    for key, value in conf.items():
        spark.conf.set(PREFIX + key, value)
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    query = (
        kafka_sums(spark, kafka_broker.bootstrap, topic, restoreFrom="latest")
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "ck-restored"))
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query, timeout=300)
    state = spark.read.format("statestore").load(str(tmp_path / "ck-restored")).collect()
    assert {r.key.user_id: r.value[0] for r in state} == recount(kafka_broker, topic) == produced
    assert {r.partition_id for r in state} == {0, 1, 2}
