"""Restore: time to restore 100k and 1M keys, into the same or a different parallelism.

For each size a snapshot path is seeded: a ``files`` upstream delivers one record per
user (``keys`` distinct users) through the keyed running count (its silent variant, same
operator and state, to seed faster), run with
``Trigger.AvailableNow`` so that it ends with a final checkpoint holding every key. Then
a new query reads the same upstream with ``.option("restoreFrom", "latest")`` into a
*new* Spark checkpoint location, with ``spark.sql.shuffle.partitions`` equal to the
seeding run's (``same``) or different (``rescaled``), after one more small file (one
record per key group) was dropped in. The restore time is measured from ``start()`` to
the end of the restored query's first micro-batch (in which every key group, called for
its record, reads its snapshot file on the executor), next to the same first batch of a fresh
query without restore on the same small file (``baseline``), so the difference is what
loading the state costs. A tiny seed-and-restore runs first, not measured (warm-up).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.harness import Context, configure, run_until, start
from benchmarks.jobs import running_count
from benchmarks.markdown import table
from benchmarks.workloads.snapshot import (
    MAX_PARALLELISM,
    drop_file,
    users_by_group,
    wait_for_checkpoint,
)

SIZES = {
    "full": {"keys": (100_000, 1_000_000)},
    "quick": {"keys": (5_000, 20_000)},
}
SEED_PARTITIONS, RESCALED_PARTITIONS = 2, 4


def _options(data: str) -> dict[str, str]:
    return {
        "upstream": "files",
        "path": data,
        "format": "parquet",
        "channelBy": "folder",
        "schema": "user_id string, amount long",
    }


def _reason(exc: Exception) -> str:
    """The Python error line of a (JVM-wrapped) exception, e.g. ``ConfigError: ...``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (errors[-1] if errors else f"{type(exc).__name__}: {lines[0]}")[:300]


def _first_batch(ctx: Context, snap: str, data: str, ck: str, extra: dict[str, str]) -> dict:
    """Start a query, wait for its first batch, stop it; return its timings."""
    began = time.time()
    query = start(running_count(ctx.spark, snap, {**_options(data), **extra}), ck)
    try:
        batches = run_until(query, lambda seen: bool(seen), timeout=1800)
    finally:
        query.stop()
    first = batches[0]
    state_rows = sum(op.get("numRowsTotal", 0) for op in first.get("stateOperators", []))
    return {
        "seconds_to_first_batch": round(time.time() - began, 2),
        "first_batch_ms": first["batchDuration"],
        "state_rows_after": state_rows,
    }


def _seed(
    ctx: Context, keys: int, tag: str = "seed"
) -> tuple[str, str, dict[str, list[str]], float]:
    """A snapshot path whose latest checkpoint holds ``keys`` keys."""
    groups = users_by_group(keys)
    data = ctx.workdir / f"data-{tag}-{keys}"
    drop_file(data / "c0", "00-load", [u for users in groups.values() for u in users])
    snap = ctx.path(f"snap-{tag}-{keys}")
    ctx.spark.conf.set("spark.sql.shuffle.partitions", str(SEED_PARTITIONS))
    began = time.time()
    query = start(
        running_count(ctx.spark, snap, _options(str(data)), silent=True),
        ctx.path(f"ck-{tag}-{keys}"),
        available_now=True,
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"seeding {keys} keys failed: {query.exception()}")
    wait_for_checkpoint(snap, keys, timeout=300)  # the run's final checkpoint
    return snap, str(data), groups, round(time.time() - began, 1)


def _warm_up(ctx: Context) -> None:
    """Seed and restore a tiny state once (not measured): the first restore of a session
    pays for loading the restore code paths, which no measured run should."""
    snap, data, _, _ = _seed(ctx, 1000, "warmup")
    _first_batch(ctx, snap, data, ctx.path("ck-warmup-restore"), {"restoreFrom": "latest"})


def _restore_size(ctx: Context, keys: int) -> dict[str, Any]:
    snap, data, groups, seed_s = _seed(ctx, keys)
    ctx.emit(f"  seeded {keys} keys in {seed_s} s")
    more = [users[0] for users in groups.values()]
    drop_file(Path(data) / "c0", "01-more", more)
    baseline_data = ctx.workdir / f"data-{keys}-baseline"
    drop_file(baseline_data / "c0", "01-more", more)
    out: dict[str, Any] = {"seed_seconds": seed_s}
    runs = {
        "baseline": (SEED_PARTITIONS, ctx.path(f"snap-{keys}-baseline"), str(baseline_data), {}),
        "same": (SEED_PARTITIONS, snap, data, {"restoreFrom": "latest"}),
        "rescaled": (RESCALED_PARTITIONS, snap, data, {"restoreFrom": "latest"}),
    }
    for name, (partitions, target, folder, extra) in runs.items():
        ctx.spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
        out[name] = {"shuffle_partitions": partitions}
        try:
            ck = ctx.path(f"ck-{name}-{keys}")
            out[name].update(_first_batch(ctx, target, folder, ck, extra))
        except Exception as exc:  # restoreFrom is refused until restores exist
            out[name]["error"] = _reason(exc)
        ctx.emit(f"  {keys} keys, {name}: {out[name]}")
    base = out["baseline"].get("seconds_to_first_batch")
    for name in ("same", "rescaled"):
        if base is not None and "seconds_to_first_batch" in out[name]:
            out[name]["restore_seconds"] = round(out[name]["seconds_to_first_batch"] - base, 2)
    return out


def run(ctx: Context) -> dict[str, Any]:
    """Seed and restore every size; return params and results."""
    size = SIZES["quick" if ctx.quick else "full"]
    configure(ctx.spark, {"checkpointInterval": "1d", "maxParallelism": str(MAX_PARALLELISM)})
    try:
        _warm_up(ctx)
        results = {str(keys): _restore_size(ctx, keys) for keys in size["keys"]}
    finally:
        ctx.spark.conf.set("spark.sql.shuffle.partitions", str(SEED_PARTITIONS))
    return {
        "params": {
            "keys": list(size["keys"]),
            "max_parallelism": MAX_PARALLELISM,
            "seed_partitions": SEED_PARTITIONS,
            "rescaled_partitions": RESCALED_PARTITIONS,
        },
        "results": results,
    }


def markdown(record: dict[str, Any]) -> str:
    """The restore section of RESULTS.md."""
    params, results = record["params"], record["results"]
    rows = []
    for keys, result in results.items():
        for name in ("baseline", "same", "rescaled"):
            r = result[name]
            head = [int(keys), name, r["shuffle_partitions"]]
            if "error" in r:
                rows.append([*head, f"failed: {r['error']}", None, None, None])
            else:
                rows.append(
                    [
                        *head,
                        r["seconds_to_first_batch"],
                        r["first_batch_ms"],
                        r.get("restore_seconds"),
                        r["state_rows_after"],
                    ]
                )
    seeds = ", ".join(f"{int(k):,} keys {r['seed_seconds']} s" for k, r in results.items())
    return "\n".join(
        [
            f"Restore from `latest` into a new checkpoint location; "
            f"{params['max_parallelism']} key groups, seeded with {params['seed_partitions']} "
            f"shuffle partitions, restored with {params['seed_partitions']} (same) and "
            f"{params['rescaled_partitions']} (rescaled).",
            "",
            table(
                [
                    "keys",
                    "run",
                    "partitions",
                    "start → end of first batch s",
                    "first batch ms",
                    "restore s (minus baseline)",
                    "state rows after",
                ],
                rows,
            ),
            "",
            f"Seeding (one keyed batch with every key, then the final checkpoint): {seeds}.",
        ]
    )
