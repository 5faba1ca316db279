"""Markdown helpers for the sections of RESULTS.md."""

from __future__ import annotations

from collections.abc import Sequence


def cell(value: object) -> str:
    """One table cell: ``-`` for a missing value, thousands separators for big integers."""
    if value is None or value == "":
        return "-"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value).replace("|", "\\|")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
