"""One Spark driver of tests/recovery/test_sink_recovery.py, run as its own process.

``python sink_driver.py SNAP CHECKPOINT_PARENT OUT KIND MODE`` runs the availableNow query
of ``runs.SOURCE`` through ``barriered.keyed`` (KIND ``append``: ``RecordNumbers`` to
the sink in mode append; ``update``: ``RunningTotals`` merged by ``user_id``) into the
``barriered-delta`` sink at OUT, with the checkpoint settings of ``runs.MODES[MODE]``
(its own local[2] session, 2 shuffle partitions; the environment variable
``BARRIERED_TEST_CONF``, a JSON object, adds session keys). The test arms a blocking fault first
and SIGKILLs this process (the driver) once the fault fired. It prints ``STARTED`` when
the query runs and ``ENDED`` if it ends on its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

import barriered
from runs import MODES, PREFIX, SOURCE, sink_query, start


def main() -> int:
    snap, parent, out, kind, mode = sys.argv[1:6]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sink-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    barriered.install(spark)
    for key, value in {
        "checkpointInterval": "10ms",
        "maxParallelism": "8",
        "bufferPerChannel": "100",
        "retainedCheckpoints": "100",
        **json.loads(os.environ.get("BARRIERED_TEST_CONF") or "{}"),
    }.items():
        spark.conf.set(PREFIX + key, value)
    processor, sink = sink_query(kind, out)
    query = start(spark, Path(parent), MODES[mode], SOURCE, snap, "ck-crashed", processor, sink)
    print("STARTED", flush=True)
    query.awaitTermination()
    print("ENDED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
