"""A scheduled ``availableNow`` job, written as a user writes one: run as its own process
by tests/integration/test_script_exit.py.

``python scheduled_job.py BASE RUN (--remote URL | --classic) [--restore] [--stop] [--fail]``

It lands run RUN's input (JSON files, one folder per channel, each record with a unique
``id``) under ``BASE/events``, installs barriered, reads every file not read yet with the
``files`` upstream (every barriered key a source option, as on serverless), writes the
records to the ``barriered-delta`` sink at ``BASE/out`` with ``availableNow``, waits with
``barriered.await_termination`` and checks the output: every id landed so far, each once.
Then it returns, without ``spark.stop()`` unless ``--stop``: the process must end by
itself. It prints one JSON line, ``{"rows", "duplicates", "missing", "ended"}``
(``ended``: ``time.time()`` when the wait returned), and exits 0 when the output is exact.
With ``--restore`` the run starts on a new checkpoint location (``spark-checkpoint-RUN``)
and restores the latest barriered checkpoint (``restoreFrom=latest``), as notebook 05's
third run does. With ``--fail`` the query fails in its first batch (a UDF raises) and
the wait raises.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import time
from collections import Counter

from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import barriered

CHANNELS = {"eu": 60, "us": 20, "asia": 20}
KEYS = {
    "checkpointInterval": "100ms",
    "maxParallelism": "8",
    "unaligned.enabled": "true",
    "alignedCheckpointTimeout": "50ms",
    "bufferPerChannel": "20",
}


def land(events: str, run: int) -> None:
    """Write run ``run``'s input files."""
    for channel, rows in CHANNELS.items():
        os.makedirs(os.path.join(events, channel), exist_ok=True)
        with open(os.path.join(events, channel, f"run-{run}.json"), "w") as out:
            for i in range(rows):
                out.write(json.dumps({"id": f"{run}-{channel}-{i}", "amount": i % 5}) + "\n")


def landed(runs: int) -> set[str]:
    """The ids of every record the first ``runs`` runs landed."""
    return {
        f"{r}-{c}-{i}" for r in range(1, runs + 1) for c, n in CHANNELS.items() for i in range(n)
    }


def fail(amount: int) -> int:
    raise ValueError(f"scheduled_job --fail: refusing amount {amount}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("run", type=int)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--remote")
    target.add_argument("--classic", action="store_true")
    parser.add_argument("--restore", action="store_true")
    parser.add_argument("--stop", action="store_true")
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()

    builder = SparkSession.builder.config("spark.sql.shuffle.partitions", "2")
    if args.classic:
        builder = builder.master("local[2]").config("spark.ui.enabled", "false")
    else:
        builder = builder.remote(args.remote)
    spark = builder.getOrCreate()
    barriered.install(spark)

    events, out = os.path.join(args.base, "events"), os.path.join(args.base, "out")
    snapshots = os.path.join(args.base, "snapshots")
    land(events, args.run)
    reader = spark.readStream.format("barriered")
    checkpoint = os.path.join(args.base, "spark-checkpoint")
    if args.restore:
        reader = reader.option("restoreFrom", "latest")
        checkpoint = f"{checkpoint}-{args.run}"
    records = barriered.records(
        reader.option("upstream", "files")
        .option("path", events)
        .option("channelBy", "folder")
        .option("schema", "id string, amount long")
        .option("maxRowsPerChannel", "15")
        .option("snapshotPath", snapshots)
        .options(**KEYS)
        .load()
    ).select("id", "amount")
    if args.fail:
        records = records.withColumn("amount", F.udf(fail, "long")("amount"))
    query = (
        records.writeStream.format("barriered-delta")
        .option("snapshotPath", snapshots)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out)
    )
    barriered.await_termination(query)
    ended = time.time()
    # Should the interpreter hang at its exit, the test sees every thread's stack.
    faulthandler.dump_traceback_later(45, exit=False)

    ids = Counter(DeltaTable(out).to_pyarrow_table(columns=["id"]).column("id").to_pylist())
    expected = landed(args.run)
    report = {
        "rows": sum(ids.values()),
        "duplicates": sum(n - 1 for n in ids.values() if n > 1),
        "missing": len(expected - set(ids)),
        "ended": ended,
    }
    print(json.dumps(report), flush=True)
    if args.stop:
        spark.stop()
    exact = report["duplicates"] == report["missing"] == 0 and set(ids) == expected
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
