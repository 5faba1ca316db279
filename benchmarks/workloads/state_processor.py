"""State processor: bootstrapping keyed state offline, and restoring it.

``keys`` users each get a running count of 1, as a batch DataFrame. Two pairs are timed:

* **bootstrap vs plain Delta write**: :func:`barriered.state_processor.bootstrap` of that
  DataFrame (key groups computed by Spark, one shuffle by key group to Python workers
  that check one row per key and write one Parquet file per key group, one Delta commit)
  against writing the same rows as one plain Delta table (``toArrow()`` then delta-rs
  ``write_deltalake``, the embedded writer the snapshot store uses), both after a
  warm-up run of 10,000 keys;
* **restore vs ingest**: an ``availableNow`` query restored from the bootstrapped
  savepoint (every key group loads its state, then the run's final checkpoint) against a
  fresh query that ingests one record per key in one batch into empty state (and
  checkpoints it), both on the ``files`` upstream, to the end of the run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake
from pyspark.sql import functions as F

from barriered import state_processor
from benchmarks.harness import Context, configure, ratio, start
from benchmarks.jobs import OPERATOR, SilentCount, running_count
from benchmarks.markdown import table

MAX_PARALLELISM = 128
SIZES = {"full": 10_000_000, "quick": 1_000_000}
WARM_UP_KEYS = 10_000


def _users(ctx: Context, keys: int) -> Any:
    return ctx.spark.range(keys).select(
        F.concat(F.lit("user-"), F.col("id").cast("string")).alias("user_id"),
        F.lit(1).cast("long").alias("count"),
    )


def _timed_run(ctx: Context, snap: str, options: dict[str, str], checkpoint: str) -> float:
    began = time.perf_counter()
    query = start(
        running_count(ctx.spark, snap, options, silent=True), ctx.path(checkpoint),
        available_now=True,
    )  # fmt: skip
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"benchmark query failed: {query.exception()}")
    return time.perf_counter() - began


def run(ctx: Context) -> dict[str, Any]:
    """Time bootstrap, a plain Delta write, a restore and a one-batch ingest."""
    keys = SIZES["quick" if ctx.quick else "full"]
    configure(ctx.spark, {"maxParallelism": str(MAX_PARALLELISM), "checkpointInterval": "1h"})
    data = ctx.workdir / "data"
    (data / "c0").mkdir(parents=True, exist_ok=True)
    options = {"upstream": "files", "path": str(data), "format": "parquet", "channelBy": "folder"}
    options["schema"] = "user_id string, amount long"
    users = _users(ctx, keys)
    # Warm both paths up first (JVM code generation, Python workers): else the first one
    # timed pays the session's start-up (measured: 6.6 s cold against 2.2 s warm for 1M
    # keys, most of the "bootstrap against plain Delta" gap of the first quick run).
    warm = _users(ctx, WARM_UP_KEYS)
    state_processor.bootstrap(
        ctx.spark, ctx.path("sp-warm-up"), options,
        [state_processor.KeyedState(warm, ["user_id"], SilentCount(), name=OPERATOR)],
    )  # fmt: skip
    write_deltalake(ctx.path("plain-warm-up"), warm.toArrow())

    began = time.perf_counter()
    saved = state_processor.bootstrap(
        ctx.spark, ctx.path("sp"), options,
        [state_processor.KeyedState(users, ["user_id"], SilentCount(), name=OPERATOR)],
    )  # fmt: skip
    bootstrap_s = time.perf_counter() - began
    ctx.emit(f"  bootstrap of {keys:,} keys: {bootstrap_s:.1f} s ({saved.state_bytes:,} bytes)")

    began = time.perf_counter()
    write_deltalake(ctx.path("plain"), users.toArrow())
    plain_s = time.perf_counter() - began
    ctx.emit(f"  plain Delta write of the same rows: {plain_s:.1f} s")

    restore_s = _timed_run(
        ctx, ctx.path("snap-restored"), {**options, "restoreFrom": saved.path}, "ck-r"
    )
    ctx.emit(f"  restore of the savepoint (availableNow run): {restore_s:.1f} s")

    fresh = ctx.workdir / "fresh"
    (fresh / "c0").mkdir(parents=True, exist_ok=True)
    names = users.select("user_id").toArrow()
    pq.write_table(
        pa.table({"user_id": names["user_id"], "amount": pa.array([1] * keys, pa.int64())}),
        fresh / "c0" / "keys.parquet",
    )
    ingest_s = _timed_run(ctx, ctx.path("snap-fresh"), {**options, "path": str(fresh)}, "ck-f")
    ctx.emit(f"  one-batch ingest of the same keys into fresh state: {ingest_s:.1f} s")
    plain_bytes = sum(f.stat().st_size for f in Path(ctx.path("plain")).rglob("*.parquet"))
    return {
        "params": {"keys": keys, "max_parallelism": MAX_PARALLELISM, "cores": os.cpu_count()},
        "results": {
            "bootstrap_s": round(bootstrap_s, 2),
            "bootstrap_bytes": saved.state_bytes,
            "bootstrap_files": saved.state_files,
            "plain_delta_s": round(plain_s, 2),
            "plain_delta_bytes": plain_bytes,
            "bootstrap_over_plain": ratio(bootstrap_s, plain_s, digits=2),
            "restore_s": round(restore_s, 2),
            "ingest_s": round(ingest_s, 2),
            "restore_over_ingest": ratio(restore_s, ingest_s, digits=2),
        },
        "targets": {},
    }


def markdown(record: dict[str, Any]) -> str:
    """The state processor section of RESULTS.md."""
    r = record["results"]
    return "\n".join(
        [
            f"{record['params']['keys']:,} keys (a running count each) in "
            f"{record['params']['max_parallelism']} key groups.",
            "",
            table(
                ["what", "seconds", "against", "seconds", "ratio"],
                [
                    [
                        "bootstrap (savepoint, one file per key group)",
                        r["bootstrap_s"],
                        "the same rows as a plain Delta table",
                        r["plain_delta_s"],
                        r["bootstrap_over_plain"],
                    ],
                    [
                        "restore of that savepoint (availableNow run)",
                        r["restore_s"],
                        "one-batch ingest of the same keys into fresh state",
                        r["ingest_s"],
                        r["restore_over_ingest"],
                    ],
                ],
            ),
        ]
    )
