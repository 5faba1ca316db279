"""The checkpoint history of a snapshot path (the ``_checkpoints`` table), for people.

Like Flink's checkpoint history tab: one line per finished checkpoint with its id, kind,
mode, status, trigger time, end-to-end duration, alignment (and how far an
aligned-with-timeout alignment went past ``alignedCheckpointTimeout``), start delay,
sizes and acknowledgements ``n/N``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, overload

from barriered.config import BarrieredConf
from barriered.errors import CheckpointError
from barriered.files.fileio import read_json
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.tools.text import human_bytes, human_ms, local_time, text_table

#: Columns of :func:`barriered.checkpoints` that come first, in this order; every other
#: ``_checkpoints`` column follows in table order. ``trigger_time``/``end_time`` are
#: timestamps made from the ``*_timestamp_ms`` columns and ``acks`` is ``"n/N"``.
DISPLAY_FIRST: tuple[str, ...] = (
    "checkpoint_id",
    "kind",
    "mode",
    "effective_mode",
    "status",
    "trigger_time",
    "end_to_end_duration_ms",
    "alignment_duration_ms",
    "start_delay_ms",
    "state_bytes",
    "inflight_bytes",
    "inflight_rows",
    "acks",
    "failure_reason",
    "mode_reason",
    "end_time",
)

_HEADERS = (
    "id",
    "kind",
    "mode",
    "status",
    "trigger time",
    "end-to-end",
    "alignment",
    "overshoot",
    "start delay",
    "state",
    "in-flight",
    "rows",
    "acks",
    "output",
    "note",
)
_RIGHT = {0, 5, 6, 7, 8, 9, 10, 11, 12, 13}

#: Added to each row by :func:`open_history`: how far the alignment of an
#: aligned-with-timeout checkpoint went past ``alignedCheckpointTimeout`` (None if not).
OVERSHOOT = "alignment_overshoot_ms"


def display_columns() -> list[str]:
    """Every column of :func:`barriered.checkpoints`, in display order."""
    rest = [c for c in checkpoints_table.SCHEMA.names if c not in DISPLAY_FIRST]
    return [*DISPLAY_FIRST, *rest]


def open_history(path: str) -> tuple[SnapshotLayout, list[dict[str, Any]]]:
    """Return the layout of snapshot path ``path`` and its finished checkpoints.

    Returns
    -------
    tuple of (SnapshotLayout, list of dict)
        The layout (with the storage options the source recorded) and the
        ``_checkpoints`` rows ordered by id; empty when no checkpoint finished yet.

    Raises
    ------
    SnapshotStoreError
        When ``path`` does not exist or is not a snapshot path.
    """
    layout = SnapshotLayout.existing(path)
    return layout, with_overshoot(layout, checkpoints_table.read_rows(layout))


def with_overshoot(layout: SnapshotLayout, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add :data:`OVERSHOOT` to every row: alignment minus ``alignedCheckpointTimeout``.

    An aligned-with-timeout checkpoint switches to unaligned only at a micro-batch
    boundary (the planner runs once per batch), so its alignment can last up to a batch
    longer than the timeout, whether it then completed aligned or switched. The timeout
    is the one the latest query on the path started with.
    """
    stored = read_json(layout.config_file, default=None) or {}
    timeout = BarrieredConf(**stored.get("conf", {})).aligned_checkpoint_timeout_ms
    for row in rows:
        alignment = row.get("alignment_duration_ms")
        row[OVERSHOOT] = None
        if row.get("mode") == "aligned_with_timeout" and alignment is not None:
            row[OVERSHOOT] = int(alignment) - timeout if int(alignment) > timeout else None
    return rows


def retained_ids(layout: SnapshotLayout, rows: Sequence[dict[str, Any]]) -> list[int]:
    """The completed checkpoints whose data retention keeps: the last ``retainedCheckpoints``.

    ``retainedCheckpoints`` is the value the latest query on the path started with.
    """
    stored = read_json(layout.config_file, default=None) or {}
    keep = BarrieredConf(**stored.get("conf", {})).retained_checkpoints
    return sorted(int(r["checkpoint_id"]) for r in rows if r["status"] == "completed")[-keep:]


def select_checkpoint(
    rows: Sequence[dict[str, Any]], checkpoint_id: int | None, retained: Sequence[int]
) -> dict[str, Any]:
    """Return the row of a retained completed checkpoint: ``checkpoint_id`` or the latest.

    Parameters
    ----------
    rows : sequence of dict
        The ``_checkpoints`` rows.
    checkpoint_id : int or None
        The checkpoint; None for the latest completed one.
    retained : sequence of int
        The ids whose data is kept (:func:`retained_ids`).

    Raises
    ------
    CheckpointError
        When there is no completed checkpoint, the id is unknown, that checkpoint was
        aborted or is no longer retained (the message says which ids are available).
    """
    available = ", ".join(map(str, retained)) or "none"
    if checkpoint_id is None:
        if not retained:
            raise CheckpointError("no completed checkpoint yet")
        checkpoint_id = retained[-1]
    row = checkpoints_table.row_of(rows, checkpoint_id)
    if row is None:
        raise CheckpointError(
            f"checkpoint {checkpoint_id} is not in the history (retained: {available})"
        )
    if row["status"] != "completed":
        raise CheckpointError(
            f"checkpoint {checkpoint_id} was {row['status']} ({row.get('failure_reason')}): "
            f"it holds no state (retained: {available})"
        )
    if checkpoint_id not in retained:
        raise CheckpointError(
            f"checkpoint {checkpoint_id} is no longer retained: retention removed its data "
            f"(retainedCheckpoints keeps the last {len(retained)}: {available})"
        )
    return row


@overload
def pick_checkpoint(
    layout: SnapshotLayout,
    rows: Sequence[dict[str, Any]],
    checkpoint_id: int | None,
    *,
    required: Literal[True] = True,
) -> dict[str, Any]: ...


@overload
def pick_checkpoint(
    layout: SnapshotLayout,
    rows: Sequence[dict[str, Any]],
    checkpoint_id: int | None,
    *,
    required: bool,
) -> dict[str, Any] | None: ...


def pick_checkpoint(
    layout: SnapshotLayout,
    rows: Sequence[dict[str, Any]],
    checkpoint_id: int | None,
    *,
    required: bool = True,
) -> dict[str, Any] | None:
    """The ``_checkpoints`` row of the retained completed checkpoint ``checkpoint_id``, or
    of the latest (None): what every tool that reads one checkpoint of a path looks at
    (:func:`select_checkpoint` among :func:`retained_ids`).

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path (its recorded ``retainedCheckpoints``).
    rows : sequence of dict
        Its ``_checkpoints`` rows (:func:`open_history`).
    checkpoint_id : int or None
        The checkpoint; None for the latest completed one.
    required : bool, default True
        False: None when no checkpoint completed yet and none was asked for.

    Raises
    ------
    CheckpointError
        As :func:`select_checkpoint`.
    """
    retained = retained_ids(layout, rows)
    if not required and not retained and checkpoint_id is None:
        return None
    return select_checkpoint(rows, checkpoint_id, retained)


def barrier_positions(row: dict[str, Any]) -> dict[int, int]:
    """``B_n(c)`` per channel of one ``_checkpoints`` row."""
    return {int(c): int(p) for c, p in json.loads(row["barrier_positions"] or "{}").items()}


def channel_names(layout: SnapshotLayout) -> dict[int, str]:
    """Channel -> the name people know it by: ``topic-partition`` when the path's
    upstream is ``kafka`` (recorded in ``_coordinator/config.json``; the names come from
    the upstream's manifest under ``_source``), else empty (channels are numbers)."""
    stored = read_json(layout.config_file, default=None) or {}
    if (stored.get("upstream") or {}).get("upstream") != "kafka":
        return {}
    from barriered.datasource.upstreams.kafka import manifest_channel_names

    return dict(enumerate(manifest_channel_names(layout.source_dir) or []))


def with_channel_names(
    rows: Sequence[dict[str, Any]], names: dict[int, str]
) -> list[dict[str, Any]]:
    """Copies of ``rows`` whose ``barrier_positions`` JSON is keyed by channel name
    (``{"events-0": 120, ...}``) where :func:`channel_names` gave one."""
    if not names:
        return list(rows)
    out = []
    for row in rows:
        named = {names.get(c, str(c)): p for c, p in barrier_positions(row).items()}
        out.append({**row, "barrier_positions": json.dumps(named)})
    return out


def _cells(row: dict[str, Any]) -> list[str]:
    note = row.get("failure_reason") or ""
    if row.get("savepoint_target"):
        note = f"savepoint {row['savepoint_target']} {note}".strip()
    return [
        str(row["checkpoint_id"]),
        str(row["kind"]),
        str(row.get("effective_mode") or row["mode"]),
        str(row["status"]),
        local_time(row.get("trigger_timestamp_ms")),
        human_ms(row.get("end_to_end_duration_ms")),
        human_ms(row.get("alignment_duration_ms")),
        "" if row.get(OVERSHOOT) is None else f"+{human_ms(row[OVERSHOOT])}",
        human_ms(row.get("start_delay_ms")),
        human_bytes(row.get("state_bytes")),
        human_bytes(row.get("inflight_bytes")),
        str(row.get("inflight_rows") or 0),
        f"{row.get('num_acknowledged') or 0}/{row.get('num_expected') or 0}",
        _output(row),
        note,
    ]


def _output(row: dict[str, Any]) -> str:
    """What a sink committed (barriered-delta) or published (barriered-kafka) with the
    checkpoint: rows, bytes."""
    if row.get("sink_rows") is None:
        return ""
    return f"{row['sink_rows']} rows {human_bytes(row.get('sink_bytes'))}"


def format_history(rows: Sequence[dict[str, Any]]) -> str:
    """Render ``_checkpoints`` rows as the history table of ``barriered checkpoints``.

    ``mode`` is the mode the cut was taken in (an aligned-with-timeout checkpoint that
    timed out shows ``unaligned``); ``overshoot`` is how far such a checkpoint's
    alignment went past ``alignedCheckpointTimeout`` (rows from :func:`open_history`;
    see :func:`with_overshoot`); ``note`` holds why a checkpoint was aborted.
    """
    return text_table(_HEADERS, [_cells(r) for r in rows], _RIGHT)
