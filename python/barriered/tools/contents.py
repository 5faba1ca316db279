"""What one completed checkpoint holds (``barriered inspect``).

The keyed state per operator and key group at the checkpoint's version of the ``state``
table and, with the JVM provider, of each Spark operator's store table (rows, bytes, and
the newest checkpoint that wrote a row of the key group: an incremental checkpoint writes
only what changed), and per channel the barrier position ``B_n(c)`` with the in-flight
range an unaligned cut overtook and the rows stored for it in the ``inflight`` table.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from barriered.errors import SnapshotStoreError
from barriered.files.fileio import filesystem, join
from barriered.statestore import operators
from barriered.statestore.delta_tables import current_files, open_table, read_table
from barriered.statestore.dv_files import vector_rows
from barriered.statestore.integrity import committed_checkpoints
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_log import StateFiles
from barriered.tools.history import (
    barrier_positions,
    channel_names,
    open_history,
    pick_checkpoint,
)
from barriered.tools.text import human_bytes, human_ms, text_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyGroupState:
    """The snapshot of one key group of one operator."""

    operator: str
    key_group: int
    rows: int
    bytes: int
    files: int
    written_by: int  # the checkpoint that last rewrote this key group


@dataclass(frozen=True)
class ChannelSnapshot:
    """One channel at a checkpoint: barrier position and in-flight records."""

    channel: int
    name: str  # the channel's topic-partition for Kafka, else its number
    barrier: int
    inflight_start: int | None  # the overtaken backlog [start, end), None when aligned
    inflight_end: int | None
    inflight_stored_rows: int  # rows in the inflight table (0 with capture=reference)


@dataclass(frozen=True)
class CheckpointContents:
    """Everything ``barriered inspect`` reports about one completed checkpoint."""

    checkpoint: dict[str, Any]  # the ``_checkpoints`` row
    key_groups: list[KeyGroupState]
    channels: list[ChannelSnapshot]

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able form."""
        return {
            "checkpoint": self.checkpoint,
            "key_groups": [asdict(k) for k in self.key_groups],
            "channels": [asdict(c) for c in self.channels],
        }


def _table(layout: SnapshotLayout, uri: str, version: int | None) -> DeltaTable:
    table = open_table(uri, version, layout.storage_options)
    if table is None:
        raise SnapshotStoreError(f"Delta table {uri!r} is missing (no _delta_log)")
    return table


def key_group_states(layout: SnapshotLayout, version: int) -> list[KeyGroupState]:
    """The key groups stored in the ``state`` table at ``version``: their live rows (the
    deletion vectors applied), the files holding them, those files' bytes shared out by
    rows, and the newest checkpoint that wrote one of their rows."""
    _table(layout, layout.state_table, version)  # a damaged log is named as everywhere
    files = StateFiles(layout.state_table, version).files.values()
    groups: dict[tuple[str, int], list[int]] = {}  # rows, bytes, files, written by
    for f in files:
        operator = str(f.partition_values.get("operator"))
        fs, path = filesystem(join(layout.state_table, f.path))
        with fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            names = parquet.schema_arrow.names
            data = parquet.read(columns=[c for c in ("key_group", "checkpoint_id") if c in names])
        n = data.num_rows
        keep = np.ones(n, bool)
        if f.dv is not None:
            where = f"data file {f.path!r} at version {version}"
            keep[vector_rows(f.dv, layout.state_table, where)] = False
        earlier = f.partition_values.get("key_group")  # the earlier layout: in the path
        owned = (
            np.full(n, int(earlier), np.int64)
            if earlier is not None
            else np.asarray(data["key_group"].to_numpy(), np.int64)
        )[keep]
        written = np.asarray(data["checkpoint_id"].to_numpy(), np.int64)[keep]
        ids, counts = np.unique(owned, return_counts=True)
        shares = _shares(f.size, counts)
        for kg, count, share in zip(ids, counts, shares, strict=True):
            g = groups.setdefault((operator, int(kg)), [0, 0, 0, 0])
            g[0] += int(count)
            g[1] += share
            g[2] += 1
            g[3] = max(g[3], int(written[owned == kg].max()))
    return [
        KeyGroupState(op, kg, rows, size, n_files, by)
        for (op, kg), (rows, size, n_files, by) in sorted(groups.items())
    ]


def _shares(size: int, counts: np.ndarray) -> list[int]:
    """``size`` bytes shared out in proportion to ``counts``, summing to ``size``."""
    if not len(counts):
        return []
    exact = size * counts / counts.sum()
    shares = np.floor(exact).astype(np.int64)
    shares[np.argsort(shares - exact)[: size - int(shares.sum())]] += 1
    return [int(x) for x in shares]


def store_key_groups(layout: SnapshotLayout, checkpoint_id: int) -> list[KeyGroupState]:
    """The key groups of Spark's operators' stores (JVM provider) at ``checkpoint_id``.

    Each store ``<op>-<store>`` is read at the version its ``state`` commit recorded;
    its files are named ``c<checkpoint id>-...``, the checkpoint that wrote them.
    """
    committed = committed_checkpoints(layout).get(checkpoint_id)
    out: list[KeyGroupState] = []
    for name, store in operators.stores_of(committed[1] if committed else {}).items():
        if store.get("version") is None:
            continue
        table = _table(layout, layout.operator_table(name), int(store["version"]))
        groups: dict[int, list[int]] = {}
        for a in current_files(table):
            g = groups.setdefault(int(a["partition_values"]["key_group"]), [0, 0, 0, 0])
            g[0] += int(a["rows"] or 0)
            g[1] += int(a["size"])
            g[2] += 1
            written = a["path"].rsplit("/", 1)[-1].split("-", 1)[0].removeprefix("c")
            g[3] = max(g[3], int(written) if written.isdigit() else 0)
        out.extend(
            KeyGroupState(f"{name} (Spark)", kg, rows, size, files, by)
            for kg, (rows, size, files, by) in sorted(groups.items())
        )
    return out


def inflight_ranges(layout: SnapshotLayout, checkpoint_id: int) -> dict[int, tuple[int, int]]:
    """The in-flight range per channel, from the state table commit of ``checkpoint_id``."""
    committed = committed_checkpoints(layout).get(checkpoint_id)
    ranges = json.loads((committed[1].get("barriered.inflight") if committed else None) or "{}")
    return {int(c): (int(r[0]), int(r[1])) for c, r in ranges.items()}


def inflight_stored_rows(
    layout: SnapshotLayout, checkpoint_id: int, version: int
) -> dict[int, int]:
    """Rows of ``checkpoint_id`` per channel in the ``inflight`` table at ``version``."""
    table = _table(layout, layout.inflight_table, version)
    data = read_table(table, ["_channel"], pc.field("checkpoint_id") == checkpoint_id)
    counts = data.group_by("_channel").aggregate([("_channel", "count")])
    return {int(r["_channel"]): int(r["_channel_count"]) for r in counts.to_pylist()}


def inspect_checkpoint(
    path: str,
    checkpoint_id: int | None = None,
    step: Callable[[str], None] = lambda _: None,
) -> CheckpointContents:
    """Read what a completed checkpoint holds.

    Parameters
    ----------
    path : str
        The snapshot path.
    checkpoint_id : int, optional
        The checkpoint (default: the latest completed one).
    step : callable, optional
        Called with a description before each read (progress reporting).

    Returns
    -------
    CheckpointContents

    Raises
    ------
    barriered.errors.SnapshotStoreError
        Not a snapshot path, or a table cannot be read.
    barriered.errors.CheckpointError
        No such completed checkpoint.
    """
    step(f"reading the checkpoint history of {path}")
    layout, rows = open_history(path)
    row = pick_checkpoint(layout, rows, checkpoint_id)
    cid = int(row["checkpoint_id"])
    step(f"reading the state table at version {row['state_table_version']}")
    groups = key_group_states(layout, int(row["state_table_version"]))
    step(f"reading the Spark operators' store tables of checkpoint {cid}")
    groups += store_key_groups(layout, cid)
    step(f"reading the in-flight records of checkpoint {cid}")
    ranges = inflight_ranges(layout, cid)
    stored: dict[int, int] = {}
    if row.get("inflight_table_version") is not None:
        stored = inflight_stored_rows(layout, cid, int(row["inflight_table_version"]))
    names = channel_names(layout)
    channels = [
        ChannelSnapshot(
            channel=c,
            name=names.get(c, str(c)),
            barrier=b,
            inflight_start=ranges[c][0] if c in ranges else None,
            inflight_end=ranges[c][1] if c in ranges else None,
            inflight_stored_rows=stored.get(c, 0),
        )
        for c, b in sorted(barrier_positions(row).items())
    ]
    log.debug("checkpoint %d: %d key groups, %d channels", cid, len(groups), len(channels))
    return CheckpointContents(row, groups, channels)


def format_contents(contents: CheckpointContents) -> str:
    """Render :class:`CheckpointContents` as the text of ``barriered inspect``."""
    row = contents.checkpoint
    groups = contents.key_groups
    head = (
        f"checkpoint {row['checkpoint_id']} ({row['kind']}, "
        f"{row.get('effective_mode') or row['mode']}), {human_ms(row['end_to_end_duration_ms'])}"
        f" end to end; state table version {row['state_table_version']}"
    )
    total = (
        f"state: {len(groups)} key groups, {sum(g.rows for g in groups)} rows, "
        f"{human_bytes(sum(g.bytes for g in groups))}"
    )
    state = text_table(
        ("operator", "key group", "rows", "bytes", "files", "written by"),
        [
            (
                g.operator,
                str(g.key_group),
                str(g.rows),
                human_bytes(g.bytes),
                str(g.files),
                f"checkpoint {g.written_by}",
            )
            for g in groups
        ],
        right={1, 2, 3, 4},
    )
    channels = text_table(
        ("channel", "barrier", "in-flight range", "in-flight rows", "stored rows"),
        [
            (
                c.name,
                str(c.barrier),
                "-" if c.inflight_start is None else f"[{c.inflight_start}, {c.inflight_end})",
                str(0 if c.inflight_start is None else (c.inflight_end or 0) - c.inflight_start),
                str(c.inflight_stored_rows),
            )
            for c in contents.channels
        ],
        right={1, 3, 4} | ({0} if all(c.name.isdigit() for c in contents.channels) else set()),
    )
    parts = [head, total, state, channels]
    if row.get("sink_rows") is not None:
        parts.append(
            f"output: barriered-delta sink table version {row.get('sink_table_version')}, "
            f"{row['sink_rows']} rows, {human_bytes(row.get('sink_bytes'))} committed by "
            "this checkpoint"
        )
    return "\n\n".join(parts)
