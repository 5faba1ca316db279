"""Which query's sink owns an output table: checked before anything is staged or committed.

A sink commits checkpoint ``n`` with the app transaction ``(barriered.sink.<sinkId>, n)``
and skips a checkpoint the table already holds. Two queries (two snapshot paths) whose
sinks share a table and a ``sinkId`` would take each other's checkpoints for their own,
and one query's output would silently never reach the table. So a sink *owns* its
table: the table property ``barriered.sink.owner.<sinkId>`` holds the snapshot path of
the query that owns it, set by the sink's first commit. Before staging (when the query's
first batch starts) and before every commit the sink checks it:

* a new table, or one this snapshot path owns: written;
* a table another snapshot path's sink owns under the same ``sinkId``: refused
  (:class:`~barriered.errors.SinkError`), unless this query was restored from that
  query (``restoreFrom`` of its snapshot path, or of a savepoint taken of it) and the
  table holds none of its output after the restored checkpoint: the restored query then
  takes the table over (the property names its snapshot path). The owner is the
  *query lineage*, not one snapshot path;
* a table other sinks own under other ``sinkId``\\ s: written next to their output (each
  sink keeps its own app transaction);
* a table no barriered-delta sink wrote: refused unless the option ``adoptTable`` is
  true (then the sink owns it).

Tables written before owners were recorded carry the snapshot path in their commits'
metadata (``barriered.snapshot_path``): the newest such commit names their owner.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable
from deltalake.transaction import CommitProperties

from barriered.config.sink_options import ADOPT_TABLE, PATH
from barriered.errors import SinkError
from barriered.files.fileio import read_json
from barriered.sink.options import SinkSettings
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

#: Table property naming the snapshot path that owns sink ``<sinkId>``'s output.
OWNER_PREFIX = "barriered.sink.owner."
#: Commit metadata: the sink that wrote the commit.
SINK_ID_KEY = "barriered.sink_id"
SNAPSHOT_PATH_KEY = "barriered.snapshot_path"
#: Commit metadata of the commit recording an owner (it changes no data).
RECORDED_KEY = "barriered.owner_recorded"


def owner_property(sink_id: str) -> str:
    """The table property holding the owner of sink ``sink_id``'s output."""
    return OWNER_PREFIX + sink_id


@dataclass(frozen=True)
class Lineage:
    """Where a run restored from *another* snapshot path came from: the snapshot path
    that wrote the restored checkpoint (a savepoint's origin) and the checkpoint."""

    origin: str
    #: None: not known yet (when the query starts), checked at the commit.
    checkpoint_id: int | None


def lineage(root: str, restored: Mapping[str, Any] | None) -> Lineage | None:
    """The lineage of a run of snapshot path ``root`` from its offsets' ``restore`` entry
    (``from``, ``checkpoint_id``) or its ``restoreFrom`` (``from`` alone); None when it
    was not restored from another path."""
    where = str((restored or {}).get("from") or "")
    if not where or where == "latest" or where.isdigit():
        return None
    origin = SnapshotLayout.at(where)
    if origin.root == root:
        return None
    marker = read_json(origin.savepoint_file, default=None) or {}
    cid = (restored or {}).get("checkpoint_id")
    return Lineage(str(marker.get("origin") or origin.root), None if cid is None else int(cid))


def _written_by(table: DeltaTable, sink_id: str, app_id: str) -> str | None:
    """The snapshot path of the newest commit sink ``sink_id`` wrote (tables written
    before owners were recorded, or a crash between a table's creation and its owner)."""
    legacy = table.transaction_version(app_id) is not None
    for entry in table.history():  # newest first
        root, sid = entry.get(SNAPSHOT_PATH_KEY), entry.get(SINK_ID_KEY)
        if root is not None and (sid == sink_id or (sid is None and legacy)):
            return str(root)
    return None


def owners(table: DeltaTable) -> dict[str, str]:
    """Sink id -> the snapshot path owning its output, from the table's properties."""
    config = table.metadata().configuration
    return {k[len(OWNER_PREFIX) :]: str(v) for k, v in config.items() if k.startswith(OWNER_PREFIX)}


def check(
    table: DeltaTable | None, settings: SinkSettings, root: str, restored: Lineage | None = None
) -> bool:
    """Whether the sink of snapshot path ``root`` may write ``table`` and must record
    itself as its owner first (False: a new table, or already recorded).

    Raises
    ------
    SinkError
        When another query's sink owns the table under this ``sinkId`` (and this query
        was not restored from it before that query's later output), or no barriered-delta
        sink wrote it and ``adoptTable`` is not set. Naming the table, both owners and
        what to do.
    """
    if table is None:
        return False
    sid, path = settings.sink_id, settings.path
    recorded = owners(table)
    owner = recorded.get(sid) or _written_by(table, sid, settings.app_id)
    if owner == root:
        return sid not in recorded
    if owner is None:
        if recorded or settings.adopt_table:
            return True  # next to other sinks' output, or a table the user hands over
        raise SinkError(
            f"barriered-delta sink {sid!r} of snapshot path {root!r}: the output table "
            f"{path!r} exists and no barriered-delta sink wrote it (no table property "
            f"{owner_property(sid)!r}); the sink owns its table. Nothing was written. "
            f"Write to a new table (option {PATH.name}), or set .option({ADOPT_TABLE.name!r}, "
            "'true') to let this query's sink take the table over"
        )
    done = table.transaction_version(settings.app_id)
    if restored is not None and restored.origin == owner:
        if restored.checkpoint_id is None:
            return False  # the query starts: its first commit checks the checkpoint
        if done is None or done <= restored.checkpoint_id:
            log.info("sink %s: %s taken over from %s (restored query)", sid, path, owner)
            return True
        raise SinkError(
            f"barriered-delta sink {sid!r} of snapshot path {root!r}, restored from "
            f"checkpoint {restored.checkpoint_id} of {owner!r}: the output table {path!r} "
            f"already holds that query's output up to its checkpoint {done}, which this "
            "query produces again. Nothing was written. Restore on the original snapshot "
            f"path {owner!r} (which takes the table back to the checkpoint's output), "
            "restore its latest checkpoint, or write to a new table (option path)"
        )
    raise SinkError(
        f"barriered-delta sink {sid!r} of snapshot path {root!r}: the output table {path!r} "
        f"belongs to sink {sid!r} of another query (snapshot path {owner!r}, table property "
        f"{owner_property(sid)!r}); its committed checkpoints (up to {done}) would be taken "
        "for this query's and this query's output silently dropped. Nothing was written. "
        "Give this sink its own id (option sinkId) to add its output next to that "
        "query's, or write to a new table (option path). A restore of that query "
        "(restoreFrom its snapshot path or a savepoint of it) takes its table over"
    )


def record(table: DeltaTable, settings: SinkSettings, root: str) -> None:
    """Record the snapshot path ``root`` as the owner of the sink's output (one metadata
    commit of the table, with the sink's commit metadata: a rewind walks past it)."""
    props = CommitProperties(
        custom_metadata={SNAPSHOT_PATH_KEY: root, SINK_ID_KEY: settings.sink_id, RECORDED_KEY: True}
    )
    table.alter.set_table_properties(
        {owner_property(settings.sink_id): root},
        raise_if_not_exists=False,
        commit_properties=props,
    )
    table.update_incremental()
    log.info("sink %s: %s owned by snapshot path %s", settings.sink_id, settings.path, root)
