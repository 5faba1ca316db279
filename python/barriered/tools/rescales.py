"""The rescale history of a snapshot path as ``barriered rescales`` prints it (the
``_rescales`` table, :mod:`barriered.statestore.rescales_table`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from barriered.tools.text import human_ms, local_time, text_table

_HEADERS = (
    "id",
    "status",
    "started",
    "partitions",
    "savepoint",
    "restored",
    "pause",
    "run",
    "reason",
)
_RIGHT = (0, 4, 5, 6)


def _cells(row: dict[str, Any]) -> list[str]:
    def text(value: Any) -> str:
        return "-" if value is None else str(value)

    return [
        text(row["rescale_id"]),
        text(row["status"]),
        local_time(row["started_ms"]),
        f"{text(row['from_partitions'])} -> {text(row['to_partitions'])}",
        text(row["savepoint_id"]),
        text(row["restored_checkpoint_id"]),
        human_ms(row["pause_ms"]),
        text(row["to_checkpoint_location"]),
        "" if row.get("reason") is None else str(row["reason"]),
    ]


def format_rescales(rows: Sequence[dict[str, Any]]) -> str:
    """Render ``_rescales`` rows as a table: when, partitions before and after, the
    savepoint taken, the checkpoint restored, the pause (no record processed), the new
    run's checkpoint location and why (autoscaling's reason)."""
    return text_table(_HEADERS, [_cells(r) for r in rows], _RIGHT)


def summary(rows: Sequence[dict[str, Any]], path: str) -> str | None:
    """One line under the checkpoint history naming the rescales (None: there are none)."""
    if not rows:
        return None
    last = rows[-1]
    return (
        f"{len(rows)} rescale(s), the last {last['from_partitions']} -> "
        f"{last['to_partitions']} partitions at savepoint {last['savepoint_id']}; "
        f"barriered rescales {path} lists them"
    )
