"""Sink: records/s of a query writing every record's output, into three sinks.

The same query (``barriered.keyed(df, "user_id").process(RecordNumbers())``: one output
row per record) over the same ``rate`` upstream (4 channels, 1,000 keys, every record
available at once, the same rows admitted per channel and batch), unaligned checkpoints
every 2 s, into

a. ``noop``: no output written (what processing alone costs);
b. ``parquet``: Spark's own file sink (one Parquet file per task and batch, its
   ``_spark_metadata`` log; at-least-once after a restore into a new checkpoint);
c. ``barriered_delta``: the exactly-once ``barriered-delta`` sink (Parquet files per task
   and batch, a staged-batch record per batch, one Delta commit per checkpoint).

Reported: records/s of each (from Spark's progress, as every workload), c/b, the rows
each sink wrote (c: committed by the checkpoints that completed) and the visibility lag
of c: how long after a batch ends its rows become visible, at most one checkpoint
interval plus the commit (here the checkpoints' end-to-end time, p50).
"""

from __future__ import annotations

from typing import Any

import pyarrow.dataset as ds
from deltalake import DeltaTable

import barriered
from barriered.examples import RecordNumbers
from benchmarks.harness import (
    Context,
    barriered_stream,
    checkpoint_rows,
    configure,
    percentile,
    ratio,
    run_for,
    start,
    throughput,
)
from benchmarks.jobs import rate_options
from benchmarks.markdown import table

CHANNELS, KEYS, MAX_PARALLELISM = 4, 1000, 64

SIZES = {
    "full": {"per_batch": 2500, "seconds": 20, "rounds": 2, "warmup": 15},
    "quick": {"per_batch": 1000, "seconds": 10, "rounds": 1, "warmup": 5},
}
VARIANTS = ("noop", "parquet", "barriered_delta")
KEYS_CONF = {"checkpointInterval": "2s", "unaligned.enabled": "true"}


def _written_rows(name: str, out: str) -> int | None:
    if name == "parquet":
        return int(ds.dataset(out, format="parquet", exclude_invalid_files=True).count_rows())
    if name == "barriered_delta":
        return int(DeltaTable(out).to_pyarrow_dataset().count_rows())
    return None


def _run_variant(ctx: Context, name: str, size: dict[str, Any], seconds: float, tag: str) -> dict:
    configure(
        ctx.spark,
        {
            "maxParallelism": str(MAX_PARALLELISM),
            "bufferPerChannel": str(size["per_batch"]),
            **KEYS_CONF,
        },
    )
    snap, ck, out = (ctx.path(tag, name, part) for part in ("snap", "ck", "out"))
    options = rate_options(CHANNELS, KEYS, size["per_batch"], rows_per_channel=10**9)
    events = barriered_stream(ctx.spark, snap, options)
    df = barriered.keyed(events, "user_id").process(RecordNumbers())
    if name == "noop":
        query = start(df, ck)
    elif name == "parquet":
        query = start(df, ck, sink="parquet", options={"path": out})
    else:
        query = start(df, ck, sink="barriered-delta", options={"path": out, "snapshotPath": snap})
    batches = run_for(query, seconds)
    barriered.await_termination(query, timeout=120)
    done = [r for r in checkpoint_rows(snap) if r["status"] == "completed"]
    return {
        **throughput(batches),
        "output_rows": sum(int(p["numInputRows"]) for p in batches),
        "written_rows": _written_rows(name, out),
        "checkpoints": len(done),
        "checkpoint_ms": [r["end_to_end_duration_ms"] for r in done],
        "sink_rows": sum(r.get("sink_rows") or 0 for r in done),
    }


def run(ctx: Context) -> dict[str, Any]:
    """Warm up, run the variants in rounds (forward, backward, ...); return the results."""
    size = SIZES["quick" if ctx.quick else "full"]
    _run_variant(ctx, "noop", size, size["warmup"], "warmup")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for i in range(size["rounds"]):
        order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            runs[name].append(_run_variant(ctx, name, size, size["seconds"], f"round{i}"))
            ctx.emit(f"  round {i} {name}: {runs[name][-1]['records_per_s']} records/s")
    variants = {}
    for name, rs in runs.items():
        records, secs = sum(r["records"] for r in rs), sum(r["seconds"] for r in rs)
        variants[name] = {
            "records": records,
            "seconds": round(secs, 2),
            "records_per_s": round(records / secs, 1) if secs else None,
            "batches": sum(r["batches"] for r in rs),
            "written_rows": [r["written_rows"] for r in rs],
            "checkpoints": sum(r["checkpoints"] for r in rs),
            "checkpoint_ms_p50": percentile([ms for r in rs for ms in r["checkpoint_ms"]], 50),
            "sink_rows": sum(r["sink_rows"] for r in rs),
        }
    rate = {name: v["records_per_s"] for name, v in variants.items()}
    return {
        "params": {
            "channels": CHANNELS,
            "keys": KEYS,
            "rows_per_channel_per_batch": size["per_batch"],
            "seconds_per_variant_and_round": size["seconds"],
            "rounds": size["rounds"],
            "checkpoint_interval": KEYS_CONF["checkpointInterval"],
        },
        "results": {
            "variants": variants,
            "ratios": {
                "delta_over_parquet": ratio(rate["barriered_delta"], rate["parquet"]),
                "parquet_over_noop": ratio(rate["parquet"], rate["noop"]),
                "delta_over_noop": ratio(rate["barriered_delta"], rate["noop"]),
            },
        },
        "targets": {},
    }


LABELS = {
    "noop": "(a) `noop` (nothing written)",
    "parquet": "(b) Spark's `parquet` file sink",
    "barriered_delta": "(c) `barriered-delta`, committed per checkpoint",
}


def markdown(record: dict[str, Any]) -> str:
    """The sink section of RESULTS.md."""
    params, results = record["params"], record["results"]
    rows = [
        [
            LABELS[name],
            v["records_per_s"],
            v["batches"],
            ", ".join(str(w) for w in v["written_rows"] if w is not None) or "-",
            v["checkpoints"],
            v["checkpoint_ms_p50"],
        ]
        for name, v in results["variants"].items()
    ]
    r = results["ratios"]
    return "\n".join(
        [
            f"One output row per record (`RecordNumbers`) over {params['keys']} keys from "
            f"{params['channels']} channels, {params['rows_per_channel_per_batch']} rows per "
            f"channel and batch, unaligned checkpoints every {params['checkpoint_interval']}, "
            f"{params['rounds']} round(s) of ~{params['seconds_per_variant_and_round']} s per "
            "variant after a warm-up run.",
            "",
            table(
                [
                    "sink",
                    "records/s",
                    "batches",
                    "rows in the output",
                    "checkpoints",
                    "checkpoint p50 ms",
                ],
                rows,
            ),
            "",
            f"**c/b = {r['delta_over_parquet']}** (the exactly-once sink against Spark's "
            f"file sink); b/a = {r['parquet_over_noop']}, c/a = {r['delta_over_noop']}. "
            "The `barriered-delta` output holds the rows of the completed checkpoints only "
            "(the batches after the last one stay staged, invisible); its visibility lag is "
            "at most one checkpoint interval plus the checkpoint's end-to-end time.",
        ]
    )
