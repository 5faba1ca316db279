"""One Spark driver on the standalone cluster of ``test_s3_cluster.py``, run as its own
process (its own application, with an executor on each worker).

``python cluster_driver.py MASTER KIND MODE SNAP CHECKPOINT OUT`` runs the availableNow
query of KIND (:func:`start_query`) with the checkpoint settings of mode MODE into the
``barriered-delta`` sink at OUT, every path an ``s3://`` URI of the local S3 server: the
environment variable ``BARRIERED_TEST_CONF`` (a JSON object of session keys, short names)
carries ``snapshotStorageOptions``, ``BARRIERED_TEST_SOURCE`` (a JSON object) source
options (the ``files`` upstream's ``path``). The test SIGKILLs this process once a checkpoint
completed. It prints ``STARTED`` when the query runs and ``ENDED`` if it ends on its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import queries
from standalone import ROCKSDB, builder

import barriered
from barriered.provider import PROVIDER_CLASS
from runs import DRIVER_KEYS, FILES_SOURCE, MODES, PREFIX, run_until_killed, sink_query, start

#: The sources of each query kind: the ``files`` upstream (its ``path`` given: a folder of
#: the bucket), and ``queries.SOURCE`` in a fifth of its batches.
SOURCES = {
    "keyed": {**FILES_SOURCE, "maxRowsPerChannel": "20"},
    "provider": {**queries.SOURCE, "maxRowsPerChannel": "200"},
}
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
#: The provider's query (``barriered-delta`` takes Spark's append mode only).
PROVIDER_QUERY = "window_append"


def start_query(
    spark: Any, kind: str, mode: str, snap: str, checkpoint: str, out: str, **source: str
) -> Any:
    """Start the availableNow query of ``kind`` on the cluster session ``spark``; return it.

    ``keyed``: ``barriered.keyed`` running totals per user of JSON-lines files (the
    ``files`` upstream; ``source`` gives its ``path``; RocksDB holds the operator's live
    state) merged into the ``barriered-delta`` sink at ``out`` by user; ``provider``:
    ``queries.window_append`` (count and total per user and window, evicted as the
    watermark passes) of ``queries.SOURCE`` under the barriered state store provider,
    appended to the sink. ``source`` adds source options (``restoreFrom``).
    """
    options = {**SOURCES[kind], **source}
    if kind == "keyed":
        spark.conf.set(PROVIDER, ROCKSDB)
        processor, sink = sink_query("update", out)
        return start(spark, Path(), MODES[mode], options, snap, checkpoint, processor, sink)
    for key, value in {**queries.CONF, **queries.MODES[mode]}.items():
        spark.conf.set(PREFIX + key, value)
    spark.conf.set(PROVIDER, PROVIDER_CLASS)
    events = spark.readStream.format("barriered").options(**options)
    events = events.option("snapshotPath", snap).load()
    return (
        queries.stream(PROVIDER_QUERY, events)
        .writeStream.format("barriered-delta")
        .options(snapshotPath=snap, path=out)
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def main() -> int:
    master, kind, mode, snap, checkpoint, out = sys.argv[1:7]
    spark = builder(master, f"cluster-driver-{kind}").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    barriered.install(spark)
    keys = {**DRIVER_KEYS, **json.loads(os.environ.get("BARRIERED_TEST_CONF") or "{}")}
    for key, value in keys.items():
        spark.conf.set(PREFIX + key, value)
    source = json.loads(os.environ.get("BARRIERED_TEST_SOURCE") or "{}")
    query = start_query(spark, kind, mode, snap, checkpoint, out, **source)
    return run_until_killed(query)


if __name__ == "__main__":
    sys.exit(main())
