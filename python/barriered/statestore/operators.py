"""Spark's own stateful operators in the snapshot: the JVM provider's store tables.

With the provider of :mod:`barriered.provider`, every partition of every Spark state
store writes, at a checkpoint's cut batch, the key groups that changed since the base
checkpoint as Parquet files (typed ``hash``, ``key`` and ``value`` columns) under
``operators/<op>-<store>/key_group=G/store_partition=P/`` and acknowledges as participant
``operator/<op>-<store>/<P>``. Partition 0 also registers the store
(``_coordinator/stores/<op>-<store>.json``: partitions, schemas, the run's epoch), so the
coordinator knows, at the cut, which acknowledgements to wait for.

At completion the coordinator commits each store's files into its Delta table (one
commit per store, then the ``state`` commit that records their versions in
``barriered.operators``: the checkpoint's restore point). A file replaces the files of
the same ``(key_group, store_partition)``; a partition that wrote everything ("full":
a new executor, a restored run) replaces all of its partition's files, and files of
partitions beyond the current count are removed, so the table at a recorded version
holds exactly each store's state at the cut. The files a commit replaces are
tombstoned for retention (:mod:`barriered.statestore.retention`), which deletes them
once no retained checkpoint reads a version that holds them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from barriered import wall_time
from barriered.files.fileio import (
    copy_file,
    delete_file,
    filesystem,
    join,
    list_names,
    read_json,
    write_json,
)
from barriered.statestore.acks import Ack, DataFile
from barriered.statestore.delta_tables import as_json, commit_files, current_files, open_table
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.retention import OPERATORS, record_removed

log = logging.getLogger(__name__)

#: Participant prefix of a store partition's acknowledgement.
PARTICIPANT_PREFIX = "operator/"
#: Partition columns of a store table (not stored in its files).
PARTITIONS = ["key_group", "store_partition"]
#: Commit metadata key of the ``state`` commit: store table versions of the checkpoint.
VERSIONS_KEY = "barriered.operators"
#: A store table gets a Delta checkpoint every this many versions (Delta's default).
CHECKPOINT_EVERY = 10


def registered_stores(layout: SnapshotLayout, epoch: int | None) -> list[dict[str, Any]]:
    """The stores the provider registered on this path for the run of ``epoch``."""
    folder = layout.stores_dir
    stores = [read_json(join(folder, n)) for n in list_names(folder) if n.endswith(".json")]
    return [s for s in stores if s and s.get("epoch") == epoch]


def participants(layout: SnapshotLayout, epoch: int | None) -> list[str]:
    """Every store partition expected to acknowledge a checkpoint of this run."""
    return [
        f"{PARTICIPANT_PREFIX}{store['operator']}/{p}"
        for store in registered_stores(layout, epoch)
        for p in range(int(store["partitions"]))
    ]


def file_schema(table_uri: str, first_file: str) -> pa.Schema:
    """A store table's schema: its first file's columns and the partition columns."""
    fs, root = filesystem(table_uri)
    with fs.open_input_file(f"{root}/{first_file}") as f:
        schema = pq.read_schema(f)
    return schema.append(pa.field("key_group", pa.int32())).append(
        pa.field("store_partition", pa.int32())
    )


def _replacements(table: DeltaTable | None, acks: list[Ack]) -> list[dict[str, str]]:
    """The (key_group, store_partition) partitions the acknowledgements replace."""
    out: list[dict[str, str]] = []
    partitions = max(int(a.extra["partitions"]) for a in acks)
    full = {str(a.extra["store_partition"]) for a in acks if a.extra.get("full")}
    for f in [] if table is None else current_files(table):
        pv = f["partition_values"]
        sp = pv.get("store_partition")
        if sp is not None and (sp in full or int(sp) >= partitions):
            out.append({"key_group": str(pv.get("key_group")), "store_partition": sp})
    for a in acks:
        if not a.extra.get("full"):
            sp = str(a.extra["store_partition"])
            out.extend(
                {"key_group": str(g), "store_partition": sp} for g in a.extra["changed_groups"]
            )
    return out


def stores_of(metadata: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The stores a checkpoint holds, from its ``state`` commit metadata."""
    raw = metadata.get(VERSIONS_KEY)
    return dict(json.loads(raw)) if raw else {}


def cut_watermark_ms(metadata: Mapping[str, Any]) -> int | None:
    """The watermark (ms) of the checkpoint's cut batch, from its stores' acknowledgements
    (None: no store, or no watermark). A query restored from the checkpoint starts its
    stateful operators there (``RestoredWatermark`` in ``jvm-shim/``)."""
    marks = [int(s["watermark_ms"]) for s in stores_of(metadata).values() if s.get("watermark_ms")]
    return max(marks, default=None)


def files_at(layout: SnapshotLayout, name: str, version: int | None) -> list[str]:
    """The data files (absolute) of store ``name``'s table at ``version``."""
    if version is None:
        return []
    table = open_table(layout.operator_table(name), version, layout.storage_options)
    return [] if table is None else list(table.file_uris())


def write_restore_manifest(
    origin: SnapshotLayout,
    checkpoint_id: int,
    metadata: Mapping[str, Any],
    target: SnapshotLayout,
    epoch: int | None,
    path: str | None = None,
) -> str | None:
    """Write what the provider loads on restore; return its path (None: no stores).

    The manifest names, per store of the checkpoint, its schemas and the files of its
    table at the checkpoint's version; every partition of the restored query reads them
    and keeps the rows it owns (``pmod(hash, numPartitions)``). ``path`` writes it
    again where an earlier start of the same restored query named it.
    """
    stores = stores_of(metadata)
    if not stores:
        return None
    manifest = {
        "checkpoint": f"checkpoint {checkpoint_id} of {origin.root}",
        "stores": {
            name: {
                "key_schema": store["key_schema"],
                "value_schema": store["value_schema"],
                "files": files_at(origin, name, store.get("version")),
            }
            for name, store in stores.items()
        },
    }
    path = path or target.restore_manifest_file(checkpoint_id, epoch)
    write_json(path, manifest)
    return path


def remove_stale_manifests(layout: SnapshotLayout, epoch: int) -> list[str]:
    """Delete the restore manifests of runs older than ``epoch``; return their paths.

    A manifest is read only while its run's first batch opens the stores. A run refused
    there (a changed query) cannot remove its own (Spark does not stop a failed query's
    Python source), so the next run on the path does. A restored checkpoint location
    restarted before its first batch committed writes it again (``partitions``).
    """
    folder = join(layout.root, "_coordinator", "restore")
    stale = []
    for name in list_names(folder):
        owner = name.removesuffix(".json").rpartition(".e")[2]
        if name.endswith(".json") and owner.isdigit() and int(owner) < epoch:
            stale.append(join(folder, name))
            delete_file(join(folder, name))
    if stale:
        log.info("restore manifests of earlier runs removed: %s", stale)
    return stale


def copy_stores(
    origin: SnapshotLayout, metadata: Mapping[str, Any], target: SnapshotLayout, cid: int
) -> str | None:
    """Copy the stores of checkpoint ``cid`` (its ``state`` commit ``metadata``) from
    ``origin`` to ``target`` (a savepoint); return the new :data:`VERSIONS_KEY` value."""
    stores = stores_of(metadata)
    if not stores:
        return None
    for name, store in stores.items():
        if store.get("version") is None:
            continue
        table = open_table(origin.operator_table(name), store["version"], origin.storage_options)
        assert table is not None
        now = wall_time.now_ms()
        files = []
        for f in current_files(table):
            copy_file(
                join(origin.operator_table(name), f["path"]),
                join(target.operator_table(name), f["path"]),
            )
            files.append(
                DataFile(f["path"], int(f["size"]), int(f["rows"] or 0), f["partition_values"], now)
            )
        store["version"] = commit_files(
            target.operator_table(name),
            pa.schema(table.schema().to_arrow()),
            PARTITIONS,
            cid,
            files,
            storage_options=target.storage_options,
        ).version
    return as_json(stores)


def commit(
    layout: SnapshotLayout,
    checkpoint_id: int,
    acks: Iterable[Ack],
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Commit the store partitions' acknowledged files, one Delta commit per store.

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path.
    checkpoint_id : int
        The checkpoint (the commits' app transaction version).
    acks : iterable of Ack
        The checkpoint's acknowledgements (others than store partitions' are ignored).
    metadata : mapping, optional
        Commit metadata added to each commit (the run's epoch).

    Returns
    -------
    dict
        Per store ``<op>-<store>`` acknowledged: ``version`` of its table after the
        commit (None while it never held a row), ``key_schema`` and ``value_schema``
        (Spark JSON) and ``watermark_ms`` (the cut batch's watermark): the value of
        :data:`VERSIONS_KEY`.
    """
    by_store: dict[str, list[Ack]] = {}
    for ack in acks:
        if ack.participant.startswith(PARTICIPANT_PREFIX):
            by_store.setdefault(str(ack.extra["operator"]), []).append(ack)
    versions: dict[str, dict[str, Any]] = {}
    for name, store_acks in sorted(by_store.items()):
        uri = layout.operator_table(name)
        files = [f for a in store_acks for f in a.files]
        table = open_table(uri, storage_options=layout.storage_options)
        extra = store_acks[0].extra
        versions[name] = {
            "version": None,
            "key_schema": extra["key_schema"],
            "value_schema": extra["value_schema"],
            "watermark_ms": extra.get("watermark_ms"),
        }
        if table is None and not files:
            continue  # empty so far: no table, a restore starts it empty
        if table is not None:
            schema = pa.schema(table.schema().to_arrow())
        else:
            schema = file_schema(uri, files[0].path)
        done = commit_files(
            uri,
            schema,
            PARTITIONS,
            checkpoint_id,
            files,
            _replacements(table, store_acks),
            metadata=metadata,
            storage_options=layout.storage_options,
        )
        versions[name]["version"] = done.version
        record_removed(layout, OPERATORS + name, done.version, done.removed)
        if done.version > 0 and done.version % CHECKPOINT_EVERY == 0:
            # Without Delta checkpoints every commit re-reads the whole log (one commit
            # per checkpoint, each replacing the changed key groups' files): its cost
            # would grow with the run's length. A Delta checkpoint deletes nothing.
            written = open_table(uri, done.version, layout.storage_options)
            assert written is not None
            written.create_checkpoint()
        log.info(
            "checkpoint %d: store %s committed at version %d (%d file(s), %d removed)",
            checkpoint_id,
            name,
            done.version,
            len(files),
            len(done.removed),
        )
    return versions
