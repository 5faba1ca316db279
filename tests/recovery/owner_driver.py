"""One Spark driver of tests/recovery/test_ownership_spark.py, run as its own process.

``python owner_driver.py SNAP CHECKPOINT SECONDS [OPTIONS_JSON]`` runs a running-totals
query on an endless skewed ``rate`` upstream (its own local[1] SparkSession) for SECONDS,
then stops it. It prints ``STARTED <query id> <run id>`` once the query made progress,
``STOPPED`` after a clean stop, or ``FAILED <message>`` (exit code 3) when the query fails.
"""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession

import barriered
from barriered.examples import RunningTotals

PREFIX = "spark.sql.streaming.barriered."
#: Endless, skewed: channel 0 produces four times the others (records depend only on
#: channel and position, so tests recount them with ``runs.upstream``-like instances).
SOURCE = {
    "upstream": "rate",
    "channels": "3",
    "rowsPerSecond": "40",
    "skew": "0:4",
    "keys": "25",
    "maxRowsPerChannel": "40",
}
CONF = {
    "checkpointInterval": "300ms",
    "maxParallelism": "4",
    "bufferPerChannel": "100",
    "retainedCheckpoints": "1000",
    "leaseTimeout": "4s",
}


def main() -> int:
    snap, checkpoint, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    spark = (
        SparkSession.builder.master("local[1]")
        .appName(f"owner-driver-{os.getpid()}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        barriered.install(spark)
        for key, value in CONF.items():
            spark.conf.set(PREFIX + key, value)
        events = (
            spark.readStream.format("barriered")
            .options(**{**SOURCE, **options})
            .option("snapshotPath", snap)
            .load()
        )
        out = barriered.keyed(events, "user_id").process(RunningTotals())
        query = (
            out.writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        deadline = time.monotonic() + seconds
        announced = False
        while time.monotonic() < deadline and query.isActive:
            if not announced and query.lastProgress is not None:
                print(f"STARTED {query.id} {query.runId}", flush=True)
                announced = True
            time.sleep(0.1)
        if query.isActive:
            query.stop()
        try:
            barriered.await_termination(query, timeout=60)
        except Exception as exc:
            print("FAILED " + str(exc).replace("\n", " "), flush=True)
            return 3
        print("STOPPED", flush=True)
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
