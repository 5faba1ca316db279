"""Backpressure: aligned, unaligned and aligned-with-timeout checkpoints behind a lagging channel.

The ``rate`` upstream produces ``rate`` rows/s on channels 1-3 and ``SKEW`` (8) times as
many on channel 0 (``skew=0:8``), and every channel is admitted at most ``per_batch`` rows per
micro-batch, so the fast channels keep up while channel 0 builds an ever larger backlog.
``bufferPerChannel`` is ``buffer_batches`` times the admission: a barrier is fixed that
far ahead of channel 0's delivered position, so an aligned checkpoint waits about that
many batches for channel 0 while the fast channels, once at their barrier, are blocked.
An unaligned checkpoint instead stores channel 0's backlog up to its barrier as
in-flight records and is cut at once; aligned-with-timeout starts aligned and switches
after ``alignedCheckpointTimeout`` (Flink's behaviour: ``unaligned.adaptive=false``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from barriered.config import ALIGNED_CHECKPOINT_TIMEOUT
from barriered.demo import PHASES
from benchmarks.harness import (
    Context,
    Progress,
    batch_window_ms,
    checkpoint_rows,
    configure,
    delivered,
    percentile,
    ratio,
    run_for,
    source_field,
    source_offsets,
    start,
    target,
    throughput,
)
from benchmarks.jobs import rate_options, running_count
from benchmarks.markdown import cell, table
from benchmarks.plot import backpressure_png

CHANNELS, KEYS, MAX_PARALLELISM, LAGGING, SKEW = 4, 1000, 128, 0, 8
#: Target: unaligned checkpoints complete within this many micro-batches (p90).
TARGET_BATCHES = 1

SIZES = {
    "full": {"per_batch": 1000, "rate": 250, "buffer_batches": 4, "seconds": 50},
    "quick": {"per_batch": 1000, "rate": 250, "buffer_batches": 4, "seconds": 20},
}
INTERVAL = "5s"
#: The demo's session keys per mode (aligned-with-timeout: Flink's fixed timeout).
MODES = PHASES
TIMEOUT = MODES["aligned_with_timeout"][ALIGNED_CHECKPOINT_TIMEOUT.key]
#: The mode of :func:`run_mode` without checkpoints (none is due in a run), its interval.
OFF, OFF_INTERVAL = "off", "1d"


def _stats(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "max": max(values) if values else None,
    }


def _series(batches: list[Progress]) -> list[dict[str, Any]]:
    """One entry per batch: time, duration (of it, ``addBatch``, the planning and the
    keyed operator's), records on the lagging and fast channels, backlog."""
    if not batches:
        return []
    t0 = batch_window_ms(batches[0])[0]
    out = []
    for p in batches:
        per_channel = delivered(p)
        _, end = source_offsets(p)
        report = (source_field(p, "latestOffset") or {}).get("barriered", {})
        available = report.get("available") or end.positions
        out.append(
            {
                "batch": p["batchId"],
                "ms": p["batchDuration"],
                "add_ms": p["durationMs"].get("addBatch"),
                "plan_ms": p["durationMs"].get("latestOffset", 0)
                + p["durationMs"].get("queryPlanning", 0),
                # the keyed operator's time (summed over its tasks): its Python calls,
                # snapshot writes included, and its state store's commit
                "operator_ms": sum(o.get("allUpdatesTimeMs", 0) for o in p["stateOperators"]),
                "commit_ms": sum(o.get("commitTimeMs", 0) for o in p["stateOperators"]),
                "t_s": round((batch_window_ms(p)[0] - t0) / 1000, 2),
                "lagging": per_channel[LAGGING],
                "fast": sum(per_channel) - per_channel[LAGGING],
                "backlog": available[LAGGING] - end.positions[LAGGING],
                "aligning": end.active is not None,
                "cut": end.cut.checkpoint_id if end.cut is not None else None,
            }
        )
    return out


def _checkpoints(rows: list[dict[str, Any]], series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Completed checkpoints with their durations and fast-channel records while aligning.

    The alignment window of a checkpoint is the batches after the one that fixed its
    barriers, up to and including its cut batch: the batches in which a channel that
    reached its barrier could be blocked.
    """
    by_batch = {s["batch"]: s for s in series}
    out = []
    for r in rows:
        if r["status"] != "completed" or r["cut_batch_id"] is None:
            continue
        barrier = r["barrier_batch_id"]
        first = (r["cut_batch_id"] if barrier is None else barrier) + 1
        window = [by_batch[b] for b in range(first, r["cut_batch_id"] + 1) if b in by_batch]
        out.append(
            {
                "id": r["checkpoint_id"],
                "mode": r["effective_mode"] or r["mode"],
                "end_to_end_ms": r["end_to_end_duration_ms"],
                "alignment_ms": r["alignment_duration_ms"] or 0,
                "batches": r["cut_batch_id"] - r["trigger_batch_id"]
                if r["trigger_batch_id"] is not None
                else None,
                "aligning_batches": len(window),
                "fast_records_aligning": sum(s["fast"] for s in window),
                "inflight_rows": r["inflight_rows"],
                "inflight_bytes": r["inflight_bytes"],
                "cut_batch": r["cut_batch_id"],
            }
        )
    return out


def run_mode(
    ctx: Context,
    mode: str,
    size: dict[str, Any],
    options: dict[str, str],
    tag: str,
    key_from: str | None = None,
    interval: str = INTERVAL,
    transform: Callable[[Any], Any] | None = None,
    session: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run the keyed running count on the source ``options`` (channel 0 lagging) for
    ``size["seconds"]`` in checkpoint mode ``mode``; return its throughput and checkpoints.

    ``size`` holds ``per_batch`` (the source's admission, ``maxRowsPerChannel``),
    ``buffer_batches`` and ``seconds``; the query's folders are under ``tag``; the key is
    the ``user_id`` column, or the column ``key_from`` as a string; the source's records
    pass through ``transform`` first. A checkpoint is due every ``interval``; ``mode``
    :data:`OFF` takes none. ``session`` replaces the session keys of ``mode`` in
    :data:`MODES`.
    """
    configure(
        ctx.spark,
        {
            "checkpointInterval": OFF_INTERVAL if mode == OFF else interval,
            "maxParallelism": str(MAX_PARALLELISM),
            "bufferPerChannel": str(size["per_batch"] * size["buffer_batches"]),
            **(MODES.get(mode, {}) if session is None else session),
        },
    )
    snap = ctx.path(tag, "snap")
    job = running_count(ctx.spark, snap, options, key_from=key_from, transform=transform)
    query = start(job, ctx.path(tag, "ck"))
    batches = run_for(query, size["seconds"])
    series = _series(batches)
    done = _checkpoints(checkpoint_rows(snap), series)
    steady = series[1:]
    aligning = {
        b
        for c in done
        for b in range(c["cut_batch"] - c["aligning_batches"] + 1, c["cut_batch"] + 1)
    }
    cuts = {c["cut_batch"] for c in done}
    fast_free = [s["fast"] for s in steady if s["batch"] not in aligning]
    fast_aligning = [s["fast"] for s in steady if s["batch"] in aligning]
    result = {
        "throughput": throughput(batches),
        "batch_ms": _stats([s["ms"] for s in steady if s["batch"] not in cuts]),
        "cut_batch_ms": _stats([s["ms"] for s in steady if s["batch"] in cuts]),
        "operator_ms": _stats([s["operator_ms"] for s in steady if s["batch"] not in cuts]),
        "cut_operator_ms": _stats([s["operator_ms"] for s in steady if s["batch"] in cuts]),
        "checkpoints_completed": len(done),
        "end_to_end_ms": _stats([c["end_to_end_ms"] for c in done]),
        "batches": _stats([c["batches"] for c in done if c["batches"] is not None]),
        "alignment_ms": _stats([c["alignment_ms"] for c in done]),
        "fast_records_per_aligning_batch": round(sum(fast_aligning) / len(fast_aligning), 1)
        if fast_aligning
        else None,
        "fast_records_per_free_batch": round(sum(fast_free) / len(fast_free), 1)
        if fast_free
        else None,
        "fast_records_aligning_per_checkpoint": _stats([c["fast_records_aligning"] for c in done]),
        "inflight_rows": _stats([c["inflight_rows"] for c in done]),
        "inflight_bytes": _stats([c["inflight_bytes"] for c in done]),
        "effective_modes": sorted({c["mode"] for c in done}),
        "checkpoints": done,
        "series": series,
    }
    ctx.emit(
        f"  {mode}: {len(done)} checkpoints, end-to-end p50 {result['end_to_end_ms']['p50']} ms, "
        f"p90 {result['batches']['p90']} batches"
    )
    return result


def run(ctx: Context) -> dict[str, Any]:
    """Run the three modes one after the other; return params and results."""
    size = SIZES["quick" if ctx.quick else "full"]
    options = rate_options(
        CHANNELS, KEYS, size["per_batch"], rows_per_second=size["rate"], skew=f"{LAGGING}:{SKEW}"
    )
    modes = {mode: run_mode(ctx, mode, size, options, mode) for mode in MODES}
    p90_batches = modes["unaligned"]["batches"]["p90"]
    ratios = {
        "aligned_over_unaligned_p50": ratio(
            modes["aligned"]["end_to_end_ms"]["p50"], modes["unaligned"]["end_to_end_ms"]["p50"]
        ),
        "aligned_over_unaligned_p90": ratio(
            modes["aligned"]["end_to_end_ms"]["p90"], modes["unaligned"]["end_to_end_ms"]["p90"]
        ),
    }
    params = {
        "channels": CHANNELS,
        "keys": KEYS,
        "lagging_channel": LAGGING,
        "skew": SKEW,
        "rows_per_second_per_channel": size["rate"],
        "rows_per_channel_per_batch": size["per_batch"],
        "buffer_per_channel": size["per_batch"] * size["buffer_batches"],
        "checkpoint_interval": INTERVAL,
        "aligned_checkpoint_timeout": TIMEOUT,
        "seconds_per_mode": size["seconds"],
    }
    targets = target(
        f"unaligned trigger→cut micro-batches p90 <= {TARGET_BATCHES}",
        p90_batches,
        TARGET_BATCHES,
        at_least=False,
    )
    return {"params": params, "results": {"modes": modes, "ratios": ratios}, "targets": targets}


def artifacts(record: dict[str, Any], folder: Path) -> None:
    """Draw the plot of ``record`` to ``folder/backpressure.png``."""
    backpressure_png(record, folder / "backpressure.png")


def modes_table(modes: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of the results of :func:`run_mode`, one row per mode."""

    def trio(s: dict[str, Any]) -> str:
        return f"{cell(s['p50'])} / {cell(s['p90'])} / {cell(s['max'])}"

    rows = [
        [
            f"{mode} ({', '.join(m['effective_modes'])})",
            m["checkpoints_completed"],
            trio(m["end_to_end_ms"]),
            trio(m["batches"]),
            f"{cell(m['alignment_ms']['p50'])} / {cell(m['alignment_ms']['p90'])}",
            f"{cell(m['fast_records_per_aligning_batch'])} / "
            f"{cell(m['fast_records_per_free_batch'])}",
            m["inflight_rows"]["p50"],
            m["inflight_bytes"]["p50"],
            m["throughput"]["records_per_s"],
        ]
        for mode, m in modes.items()
    ]
    return table(
        [
            "mode (effective)",
            "checkpoints",
            "end-to-end ms p50 / p90 / max",
            "micro-batches p50 / p90 / max",
            "alignment ms p50 / p90",
            "fast-channel records per batch, aligning / free",
            "in-flight rows p50",
            "in-flight bytes p50",
            "records/s",
        ],
        rows,
    )


def markdown(record: dict[str, Any]) -> str:
    """The backpressure section of RESULTS.md."""
    params, results = record["params"], record["results"]
    r = results["ratios"]
    return "\n".join(
        [
            f"{params['channels']} channels; channel {params['lagging_channel']} produces "
            f"{params['skew']}x the {params['rows_per_second_per_channel']} rows/s of the "
            f"others, every channel is admitted {params['rows_per_channel_per_batch']} rows "
            f"per batch; bufferPerChannel {params['buffer_per_channel']}; a checkpoint every "
            f"{params['checkpoint_interval']}, aligned timeout "
            f"{params['aligned_checkpoint_timeout']}; ~{params['seconds_per_mode']} s per mode.",
            "",
            modes_table(results["modes"]),
            "",
            f"**Aligned / unaligned end-to-end duration: {r['aligned_over_unaligned_p50']} "
            f"(p50), {r['aligned_over_unaligned_p90']} (p90).** "
            "Plot: [results/backpressure.png](results/backpressure.png).",
        ]
    )
