"""One Spark driver of tests/recovery/test_kafka_recovery.py, run as its own process.

``python kafka_driver.py SNAP CHECKPOINT BOOTSTRAP TOPIC MODE [QUERY]`` keeps a running
total per key of the Kafka topic's records (key: the user, value: the amount as text):
QUERY ``keyed`` (the default: ``barriered.keyed`` with ``RunningTotals``) or
``aggregation`` (Spark's ``groupBy().agg()`` under the barriered state store provider),
with the checkpoint settings of ``runs.KAFKA_MODES[MODE]`` (its own local[2] session, 2
shuffle partitions, at most 20 offsets per partition and micro-batch, so the busy
partition lags). It runs until the test SIGKILLs it; it prints ``STARTED`` when the
query runs.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

import barriered
from kafka_queries import KAFKA_MODES, QUERIES
from runs import PREFIX, run_until_killed


def main() -> int:
    snap, checkpoint, bootstrap, topic, mode = sys.argv[1:6]
    name = sys.argv[6] if len(sys.argv) > 6 else "keyed"
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("kafka-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
    )
    if name == "aggregation":
        builder = barriered.with_state_store(builder)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    barriered.install(spark)
    for key, value in {
        "snapshotPath": snap,
        "checkpointInterval": "10ms",
        "maxParallelism": "8",
        "bufferPerChannel": "100",
        "retainedCheckpoints": "100",
        **KAFKA_MODES[mode],
    }.items():
        spark.conf.set(PREFIX + key, value)
    make, output_mode = QUERIES[name]
    query = (
        make(spark, bootstrap, topic)
        .writeStream.format("noop")
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    return run_until_killed(query)


if __name__ == "__main__":
    sys.exit(main())
