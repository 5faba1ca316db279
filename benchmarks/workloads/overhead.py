"""Overhead: records/s of a keyed running count, with and without barrier checkpoints.

Four variants read the same ``rate`` upstream (4 channels, 1,000 keys, every record
available at once, the same rows admitted per channel and batch, so every variant runs
as fast as it can):

a. ``native``: Spark's ``groupBy("user_id").count()`` (RocksDB state store, update mode)
   on ``barriered.records(df)``, checkpoints effectively off (``checkpointInterval=1d``);
b. ``keyed``: ``barriered.keyed(df, "user_id").process(RunningCount())``, checkpoints off;
c. ``keyed_aligned``: the same with aligned checkpoints every 5 s;
d. ``keyed_unaligned``: the same with unaligned checkpoints every 5 s.

``bufferPerChannel`` equals the per-batch admission (one batch of read-ahead), so an
aligned checkpoint is cut one batch after its barriers are fixed and an unaligned one
stores at most one batch per channel in flight.
"""

from __future__ import annotations

from typing import Any

from barriered.demo import PHASES
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
    throughput,
)
from benchmarks.jobs import rate_options, running_count
from benchmarks.markdown import table

CHANNELS, KEYS, MAX_PARALLELISM = 4, 1000, 128
#: Target of c/b and d/b (issue 6).
TARGET = 0.90

SIZES = {
    "full": {"per_batch": 2500, "seconds": 45, "interval": "5s"},
    "quick": {"per_batch": 1000, "seconds": 12, "interval": "5s"},
}

VARIANTS: dict[str, dict[str, str]] = {
    "native": {"checkpointInterval": "1d"},
    "keyed": {"checkpointInterval": "1d"},
    "keyed_aligned": PHASES["aligned"],
    "keyed_unaligned": PHASES["unaligned"],
}


def _run_variant(ctx: Context, name: str, size: dict[str, Any]) -> dict[str, Any]:
    keys = {
        "checkpointInterval": size["interval"],
        "maxParallelism": str(MAX_PARALLELISM),
        "bufferPerChannel": str(size["per_batch"]),
        **VARIANTS[name],
    }
    configure(ctx.spark, keys)
    snap = ctx.path(name, "snap")
    options = rate_options(CHANNELS, KEYS, size["per_batch"], rows_per_channel=10**9)
    if name == "native":
        from barriered import records

        df = records(barriered_stream(ctx.spark, snap, options)).groupBy("user_id").count()
        query = start(df, ctx.path(name, "ck"), output_mode="update")
    else:
        query = start(running_count(ctx.spark, snap, options), ctx.path(name, "ck"))
    batches = run_for(query, size["seconds"])
    result = throughput(batches)
    cut_ms = [p["batchDuration"] for p in batches[1:] if source_offsets(p)[1].cut is not None]
    other_ms = [p["batchDuration"] for p in batches[1:] if source_offsets(p)[1].cut is None]
    done = [r for r in checkpoint_rows(snap) if r["status"] == "completed"]
    result.update(
        checkpoints_completed=len(done),
        checkpoint_ms_p50=percentile([r["end_to_end_duration_ms"] for r in done], 50),
        cut_batch_ms_p50=percentile(cut_ms, 50),
        other_batch_ms_p50=percentile(other_ms, 50),
        inflight_rows=sum(r["inflight_rows"] for r in done),
    )
    ctx.emit(f"  {name}: {result['records_per_s']} records/s over {result['seconds']} s")
    return result


def run(ctx: Context) -> dict[str, Any]:
    """Run the four variants one after the other; return params and results."""
    size = SIZES["quick" if ctx.quick else "full"]
    variants = {name: _run_variant(ctx, name, size) for name in VARIANTS}
    rate = {name: v["records_per_s"] for name, v in variants.items()}
    ratios = {
        "b_over_a": ratio(rate["keyed"], rate["native"]),
        "c_over_b": ratio(rate["keyed_aligned"], rate["keyed"]),
        "d_over_b": ratio(rate["keyed_unaligned"], rate["keyed"]),
    }
    targets = {
        f"{k}>={TARGET}": {"met": v is not None and v >= TARGET, "value": v}
        for k, v in ratios.items()
        if k != "b_over_a"
    }
    params = {
        "channels": CHANNELS,
        "keys": KEYS,
        "max_parallelism": MAX_PARALLELISM,
        "rows_per_channel_per_batch": size["per_batch"],
        "seconds_per_variant": size["seconds"],
        "checkpoint_interval": size["interval"],
    }
    return {
        "params": params,
        "results": {"variants": variants, "ratios": ratios},
        "targets": targets,
    }


LABELS = {
    "native": "(a) Spark `groupBy().count()`, RocksDB",
    "keyed": "(b) keyed processor, checkpoints off",
    "keyed_aligned": "(c) keyed, aligned every {interval}",
    "keyed_unaligned": "(d) keyed, unaligned every {interval}",
}


def markdown(record: dict[str, Any]) -> str:
    """The overhead section of RESULTS.md."""
    params, results = record["params"], record["results"]
    rows = [
        [
            LABELS[name].format(interval=params["checkpoint_interval"]),
            v["records_per_s"],
            v["batches"],
            v["batch_ms_p50"],
            v["cut_batch_ms_p50"],
            v["checkpoints_completed"],
            v["checkpoint_ms_p50"],
            v["inflight_rows"],
        ]
        for name, v in results["variants"].items()
    ]
    r = results["ratios"]
    return "\n".join(
        [
            f"Keyed running count over {params['keys']} keys from {params['channels']} "
            f"channels, {params['rows_per_channel_per_batch']} rows per channel and batch, "
            f"~{params['seconds_per_variant']} s per variant.",
            "",
            table(
                [
                    "variant",
                    "records/s",
                    "batches",
                    "batch p50 ms",
                    "cut batch p50 ms",
                    "checkpoints",
                    "checkpoint p50 ms",
                    "in-flight rows",
                ],
                rows,
            ),
            "",
            f"**b/a = {r['b_over_a']}** (Python keyed operator against Spark's native "
            f"aggregation), **c/b = {r['c_over_b']}**, **d/b = {r['d_over_b']}** "
            f"(target ≥ {TARGET}).",
        ]
    )
