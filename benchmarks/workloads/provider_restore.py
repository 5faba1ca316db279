"""The provider workload's restore row: a store of many keys restored into 5 partitions,
against Spark's own offline repartition of the same state.

a. ``restore``: Spark's ``groupBy("user_id").count()`` on the barriered provider ingests
   ``keys`` keys (one ``files`` upstream file, one record per key) with 2 shuffle
   partitions, with ``Trigger.AvailableNow``, so its final checkpoint holds every key.
   After one more small file, a new query restores it (``restoreFrom=latest``) into a new
   checkpoint location with 5 shuffle partitions: the time from ``start()`` to the end
   of its first batch (in which each of the 5 partitions reads the store table's files
   and loads the rows it owns), minus the same for a fresh query on the small file
   (``baseline``: session, planning, state store setup).
b. ``repartition``: the same keys ingested by the same query on Spark's plain RocksDB
   provider (no coordinator, as every native baseline), stopped after that batch; then
   ``spark._streamingCheckpointManager.repartition(checkpoint, 5)`` (Spark 4.2+, classic
   sessions, plain RocksDB checkpoints only) rewrites its state offline into 5 partitions:
   its wall-clock time. It does not start the query; the restore includes loading the
   state into the running query's stores.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from barriered.api import records
from barriered.provider import PROVIDER_CLASS
from barriered.session import ROCKSDB_PROVIDER, STATE_STORE_PROVIDER
from benchmarks.harness import (
    NATIVE_OPTIONS,
    Context,
    barriered_stream,
    configure,
    error_line,
    ratio,
    run_until,
    start,
    without_coordinator,
)
from benchmarks.workloads.snapshot import drop_file, wait_for_checkpoint

SEED_PARTITIONS, RESTORE_PARTITIONS = 2, 5
#: Target (issue 24): the restore no slower than Spark's offline repartition.
TARGET = 1.0
#: Why the target is missed and what would close it (RESULTS.md).
WHY_MISSED = (
    "a key's partition is pmod(hash, partitions), which no key group decides, so each of "
    "the 5 partitions reads every file of the store's table (Spark's vectorized Parquet "
    "reader) and keeps a fifth of the rows; RocksDB's puts (each with a get for the row "
    "count) are ~60% of a partition's load (1M keys: ~0.9 of ~1.5 s), and 5 tasks run in 3 "
    "waves on 2 cores. Spark's offline repartition reads the state once, shuffles it, and "
    "loads no running query's stores. One read per executor shared by its partitions would "
    "close the read part."
)
SMALL = [f"user-{i}" for i in range(10)]


def _options(data: str) -> dict[str, str]:
    return {
        "upstream": "files",
        "path": data,
        "format": "parquet",
        "channelBy": "folder",
        "schema": "user_id string, amount long",
    }


def count_by_user(ctx: Context, snap: str, data: str, extra: dict[str, str] | None = None) -> Any:
    """Spark's ``groupBy("user_id").count()`` over the files of ``data`` (barriered source)."""
    stream = barriered_stream(ctx.spark, snap, {**_options(data), **(extra or {})})
    return records(stream).groupBy("user_id").count()


def _timed_start(df: Any, ck: str) -> dict[str, Any]:
    """Start ``df``, wait for its first batch, stop it: ``start()`` to the batch's end,
    the batch's duration and the state rows after it."""
    began = time.time()
    query = start(df, ck, output_mode="update")
    try:
        batches = run_until(query, lambda seen: bool(seen), timeout=1800)
        seconds = round(time.time() - began, 2)
    finally:
        query.stop()
    first = batches[0]
    return {
        "seconds_to_first_batch": seconds,
        "first_batch_ms": first["batchDuration"],
        "state_rows_after": sum(op.get("numRowsTotal", 0) for op in first["stateOperators"]),
    }


def _provider_restore(ctx: Context, keys: int, data: Path, small: Path) -> dict[str, Any]:
    ctx.spark.conf.set(STATE_STORE_PROVIDER, PROVIDER_CLASS)
    configure(ctx.spark, {"checkpointInterval": "1s", "maxParallelism": "128"})
    ctx.spark.conf.set("spark.sql.shuffle.partitions", str(SEED_PARTITIONS))
    snap = ctx.path("restore", "snap")
    began = time.time()
    seeding = start(
        count_by_user(ctx, snap, str(data)),
        ctx.path("restore", "ck-seed"),
        "update",
        available_now=True,
    )
    seeding.awaitTermination()
    if seeding.exception() is not None:
        raise RuntimeError(f"seeding {keys} keys failed: {seeding.exception()}")
    wait_for_checkpoint(snap, keys, timeout=600)
    out: dict[str, Any] = {"seed_seconds": round(time.time() - began, 1)}
    drop_file(data / "c0", "01-more", SMALL)
    ctx.spark.conf.set("spark.sql.shuffle.partitions", str(RESTORE_PARTITIONS))
    baseline = count_by_user(ctx, ctx.path("restore", "snap-baseline"), str(small))
    out["baseline"] = _timed_start(baseline, ctx.path("restore", "ck-baseline"))
    restored = count_by_user(ctx, snap, str(data), {"restoreFrom": "latest"})
    out["restored"] = _timed_start(restored, ctx.path("restore", "ck-restored"))
    out["restore_seconds"] = round(
        out["restored"]["seconds_to_first_batch"] - out["baseline"]["seconds_to_first_batch"], 2
    )
    return out


def _offline_repartition(ctx: Context, keys: int, data: Path) -> dict[str, Any]:
    ctx.spark.conf.set(STATE_STORE_PROVIDER, ROCKSDB_PROVIDER)
    ctx.spark.conf.set("spark.sql.shuffle.partitions", str(SEED_PARTITIONS))
    configure(ctx.spark, {"checkpointInterval": "1d"})
    ck = ctx.path("repartition", "ck")
    with without_coordinator(ctx.spark):
        df = count_by_user(ctx, ctx.path("repartition", "snap"), str(data), NATIVE_OPTIONS)
        seeded = _timed_start(df, ck)
    out: dict[str, Any] = {"seed": seeded}
    began = time.time()
    try:
        ctx.spark._streamingCheckpointManager.repartition(ck, RESTORE_PARTITIONS)
        out["repartition_seconds"] = round(time.time() - began, 2)
    except Exception as exc:  # an older Spark, a Connect session: reported, not fatal
        out["error"] = error_line(exc)
    return out


def measure(ctx: Context, keys: int) -> dict[str, Any]:
    """Restore ``keys`` keys into 5 partitions; Spark's offline repartition of the same
    state; return both and their ratio."""
    ctx = dataclasses.replace(ctx, workdir=ctx.workdir / f"{keys}-keys")  # a folder per size
    users = [f"user-{i}" for i in range(keys)]
    data, native, small = (ctx.workdir / f"restore-{n}" for n in ("data", "native", "small"))
    drop_file(data / "c0", "00-load", users)
    drop_file(native / "c0", "00-load", users)
    drop_file(small / "c0", "00-load", SMALL)
    try:
        restore = _provider_restore(ctx, keys, data, small)
        ctx.emit(f"  restore {keys} keys into {RESTORE_PARTITIONS} partitions: {restore}")
        offline = _offline_repartition(ctx, keys, native)
        ctx.emit(f"  Spark's offline repartition of the same state: {offline}")
    finally:
        ctx.spark.conf.set(STATE_STORE_PROVIDER, ROCKSDB_PROVIDER)
        ctx.spark.conf.set("spark.sql.shuffle.partitions", str(SEED_PARTITIONS))
    return {
        "keys": keys,
        "from_partitions": SEED_PARTITIONS,
        "to_partitions": RESTORE_PARTITIONS,
        "provider": restore,
        "offline_repartition": offline,
        "restore_over_repartition": ratio(
            restore["restore_seconds"], offline.get("repartition_seconds"), 2
        ),
    }
