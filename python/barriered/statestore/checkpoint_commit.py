"""The tables of one completed checkpoint, committed in order.

First the in-flight records (``inflight``), then each Spark operator store the JVM
provider captured (one table per store), and last the ``state`` table, whose commit is
the checkpoint's restore point: its metadata records the barrier positions, the
in-flight ranges and table version, the store versions and whatever the caller adds
(the sinks' plans). A checkpoint whose ``state`` commit is missing does not exist for a
restore, whatever the earlier commits wrote.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from barriered.control.model import CompletedCheckpoint
from barriered.files.fileio import filesystem
from barriered.statestore import operators
from barriered.statestore.acks import Ack
from barriered.statestore.delta_tables import INFLIGHT_PARTITIONS, as_json, commit_files
from barriered.statestore.dv_files import VECTORS_READ, VECTORS_READ_KEY
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.retention import store_versions
from barriered.statestore.state_commit import commit_state_table
from barriered.statestore.state_schema import table_schema

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointCommit:
    """What :func:`commit_checkpoint` wrote."""

    state_version: int
    inflight_version: int | None
    #: Per channel (as text), the captured in-flight range ``[start, end)``.
    inflight_ranges: dict[str, list[int]]
    #: The files the ``state`` commit removed, and the deletion vector files it no
    #: longer references (for retention).
    removed: Sequence[Any]
    #: Per Spark operator store, its table version (None: empty so far).
    stores: dict[str, int | None]


def _commit_inflight(
    layout: SnapshotLayout, checkpoint_id: int, acks: list[Ack], epoch: int | None
) -> int | None:
    files = [f for a in acks if a.participant.startswith("inflight/") for f in a.files]
    if not files:
        return None
    fs, root = filesystem(layout.inflight_table)
    with fs.open_input_file(f"{root}/{files[0].path}") as f:
        schema = pq.read_schema(f).append(pa.field("checkpoint_id", pa.int64()))
    return commit_files(
        layout.inflight_table,
        schema,
        INFLIGHT_PARTITIONS,
        checkpoint_id,
        files,
        metadata={"barriered.epoch": epoch},
        storage_options=layout.storage_options,
    ).version


def commit_checkpoint(
    layout: SnapshotLayout,
    done: CompletedCheckpoint,
    acks: list[Ack],
    registrations: list[dict[str, Any]],
    epoch: int | None,
    metadata: Mapping[str, Any],
) -> CheckpointCommit:
    """Commit checkpoint ``done``'s in-flight, operator store and state tables.

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path.
    done : CompletedCheckpoint
        The checkpoint every participant acknowledged.
    acks : list of Ack
        Its acknowledgements (in-flight writers, key groups, store partitions, sinks).
    registrations : list of dict
        The keyed operators registered on the path (the ``state`` table's columns).
    epoch : int or None
        The committing run's epoch, recorded with every commit.
    metadata : mapping
        More ``state`` commit metadata (e.g. the sinks' plans).

    Returns
    -------
    CheckpointCommit
        The versions written and the in-flight ranges.
    """
    cid = done.checkpoint_id
    inflight_version = _commit_inflight(layout, cid, acks, epoch)
    stores = operators.commit(layout, cid, acks, metadata={"barriered.epoch": epoch})
    state_acks = [a for a in acks if a.participant.startswith("state/")]
    ranges = {
        str(a.extra["channel"]): [a.extra["start"], a.extra["end"]]
        for a in acks
        if a.participant.startswith("inflight/")
    }
    commit = commit_state_table(
        layout,
        cid,
        table_schema(registrations),
        [f for a in state_acks for f in a.files],
        {
            "barriered.kind": done.kind,
            "barriered.mode": done.effective_mode or done.mode,
            "barriered.barrier": as_json({str(k): v for k, v in done.positions.items()}),
            "barriered.inflight": as_json(ranges),
            "barriered.inflight_version": inflight_version,
            operators.VERSIONS_KEY: as_json(stores),
            VECTORS_READ_KEY: _vectors_read(layout, state_acks),
            **metadata,
        },
        epoch,
    )
    log.debug("checkpoint %d: state table version %d", cid, commit.version)
    removed = (*commit.removed, *commit.vectors_dropped)  # tombstoned alike
    return CheckpointCommit(
        commit.version, inflight_version, ranges, removed, store_versions(stores)
    )


def _vectors_read(layout: SnapshotLayout, acks: Sequence[Ack]) -> str | None:
    """The deletion vector files of the ``state`` table that the keyed partitions'
    restored runs read (relative to the table; JSON), None when there are none: a
    retained checkpoint listing one keeps it (:func:`~barriered.statestore.retention.
    pinned_vectors`). Another path's files (a restore from there) are that path's."""
    root = layout.state_table.rstrip("/") + "/"
    read = {
        str(path)[len(root) :]
        for a in acks
        for path in a.extra.get(VECTORS_READ, ())
        if str(path).startswith(root)
    }
    return as_json(sorted(read)) if read else None


def upstream_start(
    barrier: Mapping[str, int], inflight: Mapping[str, Any], by_value: bool
) -> tuple[int, ...]:
    """Where a restore from a checkpoint reads the upstream from, per channel: ``B_n(c)``,
    or the start of the in-flight range when it was captured by reference."""
    starts = {int(c): int(b) for c, b in barrier.items()}
    if not by_value:
        for c, (a, _) in inflight.items():
            starts[int(c)] = min(starts[int(c)], int(a))
    return tuple(starts[c] for c in sorted(starts))
