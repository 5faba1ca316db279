"""The checkpoint plot: durations, alignment and sizes over checkpoint ids.

Three panels share the checkpoint id axis: end-to-end duration, alignment duration, and
the bytes each checkpoint wrote (keyed state, with the in-flight records stacked on
top). Every checkpoint is drawn in the colour and marker of the mode its cut was taken
in, so aligned and unaligned checkpoints tell apart at a glance; aborted ones are red
crosses. Drawn with matplotlib's Agg canvas, without pyplot (no global state, no
display needed); a notebook shows the returned figure with ``display(fig)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from barriered.errors import BarrieredError, CheckpointError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Colour and marker of each mode (the mode the cut was really taken in).
STYLES: dict[str, tuple[str, str]] = {
    "aligned": ("#1f77b4", "o"),
    "unaligned": ("#ff7f0e", "^"),
    "at_least_once": ("#2ca02c", "s"),
}
ABORTED_STYLE = ("#d62728", "x")
_OTHER_STYLE = ("#7f7f7f", "D")


def _mode(row: dict[str, Any]) -> str:
    return str(row.get("effective_mode") or row["mode"])


def _style(row: dict[str, Any]) -> tuple[str, str]:
    if row["status"] == "aborted":
        return ABORTED_STYLE
    return STYLES.get(_mode(row), _OTHER_STYLE)


def _byte_unit(largest: int) -> tuple[str, float]:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if largest >= scale:
            return unit, scale
    return "B", 1.0


def _new_figure() -> Figure:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise BarrieredError(
            "the checkpoint plot needs matplotlib: pip install 'spark-barriered[plot]'"
        ) from exc
    fig = Figure(figsize=(10, 8), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _points(ax: Axes, rows: Sequence[dict[str, Any]], column: str) -> None:
    ids = [r["checkpoint_id"] for r in rows]
    values = [r.get(column) or 0 for r in rows]
    ax.plot(ids, values, color="#cccccc", linewidth=1, zorder=1)
    for row, value in zip(rows, values, strict=True):
        colour, marker = _style(row)
        ax.scatter([row["checkpoint_id"]], [value], color=colour, marker=marker, s=45, zorder=2)


def checkpoint_figure(rows: Sequence[dict[str, Any]], title: str = "Checkpoints") -> Figure:
    """Draw the checkpoint plot of ``_checkpoints`` rows.

    Parameters
    ----------
    rows : sequence of dict
        ``_checkpoints`` rows (see :mod:`barriered.statestore.checkpoints_table`).
    title : str
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    barriered.errors.CheckpointError
        When ``rows`` is empty.
    barriered.errors.BarrieredError
        When matplotlib is not installed.
    """
    if not rows:
        raise CheckpointError("nothing to plot: no checkpoint has finished yet")
    rows = sorted(rows, key=lambda r: r["checkpoint_id"])
    fig = _new_figure()
    e2e, align, sizes = fig.subplots(3, 1, sharex=True)
    fig.suptitle(title)
    _points(e2e, rows, "end_to_end_duration_ms")
    e2e.set_ylabel("end-to-end (ms)")
    _points(align, rows, "alignment_duration_ms")
    align.set_ylabel("alignment (ms)")
    largest = max((r.get("state_bytes") or 0) + (r.get("inflight_bytes") or 0) for r in rows)
    unit, scale = _byte_unit(largest)
    ids = [r["checkpoint_id"] for r in rows]
    state = [(r.get("state_bytes") or 0) / scale for r in rows]
    inflight = [(r.get("inflight_bytes") or 0) / scale for r in rows]
    colours = [_style(r)[0] for r in rows]
    sizes.bar(ids, state, color=colours, width=0.8)
    sizes.bar(ids, inflight, bottom=state, color=colours, width=0.8, alpha=0.45, hatch="//")
    sizes.set_ylabel(f"written ({unit})")
    sizes.set_xlabel("checkpoint id")
    _legend(fig, rows)
    from matplotlib.ticker import MaxNLocator

    sizes.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax, floor in ((e2e, -0.04), (align, -0.04), (sizes, 0.0)):
        ax.grid(True, axis="y", alpha=0.3)
        top = max(ax.get_ylim()[1], 1)
        ax.set_ylim(floor * top, top)  # points on 0 stay visible above the axis
    return fig


def _legend(fig: Figure, rows: Sequence[dict[str, Any]]) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    seen: dict[str, tuple[str, str]] = {}
    for row in rows:
        label = "aborted" if row["status"] == "aborted" else _mode(row)
        seen.setdefault(label, _style(row))
    handles: list[Any] = [
        Line2D([], [], color=c, marker=m, linestyle="", markersize=8, label=label)
        for label, (c, m) in seen.items()
    ]
    handles.append(Patch(facecolor="#999999", label="state bytes"))
    handles.append(Patch(facecolor="#999999", alpha=0.45, hatch="//", label="in-flight bytes"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles))


def save_checkpoint_plot(rows: Sequence[dict[str, Any]], out: str, title: str) -> None:
    """Draw the checkpoint plot of ``rows`` and write it to ``out`` (PNG)."""
    fig = checkpoint_figure(rows, title)
    try:
        fig.savefig(out, dpi=100, format="png")
    except OSError as exc:
        raise BarrieredError(f"cannot write the plot to {out!r}: {exc}") from exc
