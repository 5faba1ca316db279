"""The JVM state store provider: Spark's ``groupBy().count()`` captured at every cut.

a. ``off``: ``groupBy("user_id").count()`` on the barriered provider, checkpoints off
   (``checkpointInterval=1d``): Spark's RocksDB behind the delegating provider, nothing
   exported. (Plain RocksDB cannot be the baseline on a barriered source: a built-in
   operator whose state no snapshot holds is refused at the first batch. The delegation
   itself measured 1.014 against plain RocksDB in-JVM, ``shared/research``.)
b. ``provider``: the same with aligned checkpoints every 5 s (every store partition
   writes its changed key groups at each cut).

Target: b/a >= 0.95. From b's acknowledgements: the export's rows/s and MB/s per
partition (iterate, hash, Parquet) against a sequential write of the same bytes. Then,
per fraction of changed key groups (1%, 10%, 100%): a state of ``seed_keys`` keys over
every key group is built first, after which the stream only touches keys of that
fraction of the key groups; the bytes each later checkpoint writes are reported.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from pyspark.sql import functions as F

from barriered.api import records
from barriered.demo import PHASES
from barriered.provider import PROVIDER_CLASS
from barriered.session import ROCKSDB_PROVIDER, STATE_STORE_PROVIDER
from benchmarks.harness import (
    Context,
    barriered_stream,
    checkpoint_rows,
    configure,
    percentile,
    ratio,
    run_for,
    source_offsets,
    start,
    target,
    throughput,
)
from benchmarks.jobs import rate_options
from benchmarks.markdown import table

CHANNELS, KEYS, MAX_PARALLELISM = 4, 1000, 128
TARGET = 0.95
FRACTIONS = (0.01, 0.10, 1.0)
SIZES = {
    "full": {"per_batch": 2500, "seconds": 30, "seed_keys": 200_000, "fraction_seconds": 30},
    "quick": {"per_batch": 1000, "seconds": 12, "seed_keys": 20_000, "fraction_seconds": 12},
}


def _keys(ctx: Context, size: dict[str, Any], provider: bool, interval: str) -> None:
    configure(
        ctx.spark,
        {
            "checkpointInterval": interval,
            "maxParallelism": str(MAX_PARALLELISM),
            "bufferPerChannel": str(size["per_batch"]),
            **PHASES["aligned"],
        },
    )
    ctx.spark.conf.set(STATE_STORE_PROVIDER, PROVIDER_CLASS if provider else ROCKSDB_PROVIDER)


def _acks(snap: str) -> list[dict[str, Any]]:
    out = []
    for folder, _, names in os.walk(os.path.join(snap, "_acks")):
        for name in names:
            if name.startswith("operator~") and name.endswith(".json"):
                with open(os.path.join(folder, name)) as f:
                    out.append(json.load(f))
    return out


def _sequential_write_ms(ctx: Context, nbytes: int) -> float:
    path = ctx.path("sequential.bin")
    block = os.urandom(1 << 20)
    began = time.perf_counter()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(block[: min(left, len(block))])
            left -= len(block)
        f.flush()
        os.fsync(f.fileno())
    ms = (time.perf_counter() - began) * 1000
    os.remove(path)
    return round(ms, 1)


def _throughput_variant(ctx: Context, name: str, size: dict[str, Any]) -> dict[str, Any]:
    _keys(ctx, size, provider=True, interval="5s" if name == "provider" else "1d")
    snap, ck = ctx.path(name, "snap"), ctx.path(name, "ck")
    options = rate_options(CHANNELS, KEYS, size["per_batch"], rows_per_channel=10**9)
    df = records(barriered_stream(ctx.spark, snap, options)).groupBy("user_id").count()
    batches = run_for(start(df, ck, output_mode="update"), size["seconds"])
    done = [r for r in checkpoint_rows(snap) if r["status"] == "completed"]
    result = {**throughput(batches), "checkpoints_completed": len(done)}
    if name == "provider":
        acks = [a for a in _acks(snap) if a["rows"]]
        rows = sum(a["rows"] for a in acks)
        nbytes = sum(a["bytes"] for a in acks)
        seconds = sum(a["extra"]["export_ms"] for a in acks) / 1000
        result["export"] = {
            "acks_with_rows": len(acks),
            "rows": rows,
            "bytes": nbytes,
            "rows_per_s_per_partition": round(rows / seconds, 1) if seconds else None,
            "mb_per_s_per_partition": round(nbytes / 1e6 / seconds, 2) if seconds else None,
            "sequential_write_ms_same_bytes": _sequential_write_ms(ctx, nbytes),
            "export_ms_total": round(seconds * 1000, 1),
        }
    return result


def _hot_keys(ctx: Context, fraction: float, count: int = 500) -> list[str]:
    """Keys whose key group ``pmod(hash(key), maxParallelism)`` is in the first ``fraction``."""
    groups = max(1, round(MAX_PARALLELISM * fraction))
    found = (
        ctx.spark.range(200_000)
        .select(F.concat(F.lit("hot-"), F.col("id").cast("string")).alias("k"))
        .where(F.expr(f"pmod(hash(k), {MAX_PARALLELISM})") < groups)
        .limit(count)
        .collect()
    )
    return [r.k for r in found]


def _fraction_run(ctx: Context, fraction: float, size: dict[str, Any]) -> dict[str, Any]:
    _keys(ctx, size, provider=True, interval="2s")
    tag = f"fraction{int(fraction * 100)}"
    snap, ck = ctx.path(tag, "snap"), ctx.path(tag, "ck")
    hot = _hot_keys(ctx, fraction)
    seed_per_channel = size["seed_keys"] // CHANNELS
    options = rate_options(CHANNELS, KEYS, size["per_batch"], rows_per_channel=10**9)
    events = records(barriered_stream(ctx.spark, snap, options))
    hot_key = F.element_at(
        F.array(*[F.lit(k) for k in hot]), (F.col("_seq") % len(hot) + 1).cast("int")
    )
    seed_key = F.concat(
        F.lit("seed-"), (F.col("_seq") * CHANNELS + F.col("_channel")).cast("string")
    )
    keyed = events.withColumn(
        "k", F.when(F.col("_seq") < seed_per_channel, seed_key).otherwise(hot_key)
    )
    batches = run_for(
        start(keyed.groupBy("k").count(), ck, output_mode="update"), size["fraction_seconds"]
    )
    seeded_at = next(
        (p["batchId"] for p in batches if min(source_offsets(p)[1].positions) >= seed_per_channel),
        None,
    )
    done = [
        r
        for r in checkpoint_rows(snap)
        if r["status"] == "completed" and seeded_at is not None and r["cut_batch_id"] > seeded_at
    ]
    later = done[1:]  # the first one after seeding still writes what seeding changed
    return {
        "changed_key_groups": max(1, round(MAX_PARALLELISM * fraction)),
        "seed_keys": size["seed_keys"],
        "checkpoints": len(later),
        "state_bytes_p50": percentile([r["state_bytes"] for r in later], 50),
        "state_rows_p50": percentile([r["state_rows"] for r in later], 50),
    }


def run(ctx: Context) -> dict[str, Any]:
    """The throughput pair, then the changed-fraction runs; return the results."""
    size = SIZES["quick" if ctx.quick else "full"]
    variants = {}
    for name in ("off", "provider"):
        variants[name] = _throughput_variant(ctx, name, size)
        ctx.emit(f"  {name}: {variants[name]['records_per_s']} records/s")
    fractions = {}
    for fraction in FRACTIONS:
        fractions[f"{int(fraction * 100)}%"] = _fraction_run(ctx, fraction, size)
        ctx.emit(
            f"  {int(fraction * 100)}% key groups changed: {fractions[f'{int(fraction * 100)}%']}"
        )
    ctx.spark.conf.set(STATE_STORE_PROVIDER, ROCKSDB_PROVIDER)
    b_over_a = ratio(variants["provider"]["records_per_s"], variants["off"]["records_per_s"])
    return {
        "params": {
            "channels": CHANNELS,
            "keys": KEYS,
            "max_parallelism": MAX_PARALLELISM,
            "rows_per_channel_per_batch": size["per_batch"],
            "seconds_per_variant": size["seconds"],
            "seed_keys": size["seed_keys"],
        },
        "results": {"variants": variants, "b_over_a": b_over_a, "changed_fractions": fractions},
        "targets": target(f"b/a >= {TARGET}", b_over_a, TARGET, at_least=True),
    }


def markdown(record: dict[str, Any]) -> str:
    """The provider section of RESULTS.md."""
    params, results = record["params"], record["results"]
    v = results["variants"]
    export = v["provider"].get("export", {})
    rows = [
        [
            "(a) `groupBy().count()`, RocksDB, no checkpoints",
            v["off"]["records_per_s"],
            v["off"]["batches"],
            "-",
        ],
        [
            "(b) the same, barriered provider, aligned every 5 s",
            v["provider"]["records_per_s"],
            v["provider"]["batches"],
            v["provider"]["checkpoints_completed"],
        ],
    ]
    fractions = [
        [k, f["changed_key_groups"], f["checkpoints"], f["state_rows_p50"], f["state_bytes_p50"]]
        for k, f in results["changed_fractions"].items()
    ]
    return "\n".join(
        [
            f'Spark\'s `groupBy("user_id").count()` over {params["keys"]} keys from '
            f"{params['channels']} channels, {params['rows_per_channel_per_batch']} rows per "
            f"channel and batch, ~{params['seconds_per_variant']} s per variant.",
            "",
            table(["variant", "records/s", "batches", "checkpoints"], rows),
            "",
            f"**b/a = {results['b_over_a']}** (target ≥ {TARGET}). Export at the cuts: "
            f"{export.get('rows_per_s_per_partition')} rows/s and "
            f"{export.get('mb_per_s_per_partition')} MB/s per partition "
            f"({export.get('rows')} rows, {export.get('bytes')} bytes in "
            f"{export.get('export_ms_total')} ms); a sequential write of the same bytes "
            f"took {export.get('sequential_write_ms_same_bytes')} ms.",
            "",
            f"Bytes per checkpoint with a state of {params['seed_keys']} keys over every "
            "key group, when only some key groups change:",
            "",
            table(
                ["key groups changed", "groups", "checkpoints", "rows p50", "bytes p50"], fractions
            ),
        ]
    )
