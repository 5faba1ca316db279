"""Human-readable numbers and plain-text tables for the command line."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

_UNITS = ("B", "KB", "MB", "GB", "TB")


def human_bytes(size: int | None) -> str:
    """Return ``size`` in bytes as ``"512 B"``, ``"12.3 KB"``, ``"4.50 MB"`` (powers of 1000)."""
    if size is None:
        return "-"
    value = float(size)
    for unit in _UNITS:
        if abs(value) < 1000 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.1f} {unit}" if value >= 10 else f"{value:.2f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def human_ms(ms: int | None) -> str:
    """Return a duration as ``"850 ms"``, ``"1.74 s"`` or ``"2 min 05 s"``; ``"-"`` if unknown."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds:02d} s"


def local_time(epoch_ms: int | None) -> str:
    """Return an epoch time in milliseconds as local ``YYYY-MM-DD HH:MM:SS``."""
    if epoch_ms is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def text_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()
) -> str:
    """Render ``rows`` under ``headers`` as aligned columns (two spaces apart).

    Parameters
    ----------
    headers : sequence of str
        Column titles.
    rows : sequence of sequences of str
        Cells, one sequence per row, as many as ``headers``.
    right : collection of int
        Indexes of the columns aligned to the right (numbers).
    """
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in rows)])
