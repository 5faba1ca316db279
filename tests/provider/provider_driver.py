"""One Spark driver of tests/provider/test_provider_recovery.py, run as its own process.

``python provider_driver.py SNAP CHECKPOINT QUERY MODE PARTITIONS [OUT]`` runs query QUERY
of ``queries.QUERIES`` with the barriered state store provider on ``PARTITIONS`` shuffle
partitions (its own local[1] session) until it is killed, into the ``barriered-delta``
sink at OUT if given (else ``noop``). The environment variable ``BARRIERED_TEST_CONF`` (a
JSON object) adds session keys (short names, such as ``snapshotStorageOptions``); the
session has Hadoop's ``s3a`` on its class path (``hadoop_aws.py``) for paths on the S3
server. It prints ``STARTED`` once the query made progress, ``FAILED <message>`` (exit
code 3) if the query fails.
"""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession
from queries import CONF, MODES, PREFIX, QUERIES, SOURCE, stream

import barriered
from hadoop_aws import with_s3a


def main() -> int:
    snap, checkpoint, name, mode, partitions = sys.argv[1:6]
    out = sys.argv[6] if len(sys.argv) > 6 else None
    builder = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", partitions)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
    )
    spark = barriered.with_state_store(with_s3a(builder)).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    barriered.install(spark)
    keys = json.loads(os.environ.get("BARRIERED_TEST_CONF") or "{}")
    for key, value in {**CONF, **MODES[mode], **keys}.items():
        spark.conf.set(PREFIX + key, value)
    events = spark.readStream.format("barriered").options(**SOURCE).option("snapshotPath", snap)
    writer = stream(name, events.load()).writeStream.format("noop")
    if out is not None:
        writer = writer.format("barriered-delta").options(snapshotPath=snap, path=out)
    query = (
        writer.outputMode(QUERIES[name][1])
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
