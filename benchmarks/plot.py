"""The backpressure plot: checkpoint durations and what the fast channels delivered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"aligned": "tab:red", "unaligned": "tab:blue", "aligned_with_timeout": "tab:orange"}


def backpressure_png(record: dict[str, Any], path: Path) -> Path:
    """Draw the backpressure record to ``path`` (PNG, matplotlib's Agg backend).

    Left: end-to-end duration of every completed checkpoint, per mode. Right: records
    the fast channels delivered per micro-batch over time, with each mode's cuts marked;
    the dips are batches in which aligned checkpoints blocked them.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = record["results"]["modes"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for mode, m in modes.items():
        color = COLORS.get(mode)
        points = m["checkpoints"]
        left.plot(
            range(1, len(points) + 1),
            [c["end_to_end_ms"] for c in points],
            marker="o",
            color=color,
            label=f"{mode} (p50 {m['end_to_end_ms']['p50']} ms)",
        )
        series = m["series"][1:]
        right.plot([s["t_s"] for s in series], [s["fast"] for s in series], color=color, label=mode)
        cuts = [s for s in series if s["cut"] is not None]
        right.scatter(
            [s["t_s"] for s in cuts], [s["fast"] for s in cuts], color=color, marker="v", s=30
        )
    left.set(xlabel="checkpoint (in order)", ylabel="end-to-end duration (ms)")
    left.set_title("Checkpoint duration behind a lagging channel")
    left.set_ylim(bottom=0)
    left.legend(fontsize=8)
    right.set(xlabel="time since the first batch (s)", ylabel="records per batch")
    right.set_title("Fast channels' records per micro-batch (▼ = cut)")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    params = record["params"]
    fig.suptitle(
        f"{record['mode']} run {record['run_id']}: channel {params['lagging_channel']} "
        f"produces {params['skew']}x, checkpoint every {params['checkpoint_interval']}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
