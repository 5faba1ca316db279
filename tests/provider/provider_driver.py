"""One Spark driver of tests/provider/test_provider_recovery.py, run as its own process.

``python provider_driver.py SNAP CHECKPOINT QUERY MODE PARTITIONS`` runs query QUERY of
``queries.QUERIES`` with the barriered state store provider on ``PARTITIONS`` shuffle
partitions (its own local[1] session) until it is killed. It prints ``STARTED`` once the
query made progress, ``FAILED <message>`` (exit code 3) if the query fails.
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession
from queries import CONF, MODES, PREFIX, QUERIES, SOURCE

import barriered


def main() -> int:
    snap, checkpoint, name, mode, partitions = sys.argv[1:6]
    builder = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", partitions)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
    )
    spark = barriered.with_state_store(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    barriered.install(spark)
    for key, value in {**CONF, **MODES[mode]}.items():
        spark.conf.set(PREFIX + key, value)
    build, output_mode = QUERIES[name]
    events = spark.readStream.format("barriered").options(**SOURCE).option("snapshotPath", snap)
    query = (
        build(barriered.records(events.load()))
        .writeStream.format("noop")
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    announced = False
    while query.isActive:
        if not announced and query.lastProgress is not None:
            print("STARTED", flush=True)
            announced = True
        time.sleep(0.1)
    print("FAILED " + str(query.exception()).replace("\n", " "), flush=True)
    return 3


if __name__ == "__main__":
    sys.exit(main())
