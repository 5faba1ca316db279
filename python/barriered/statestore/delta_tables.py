"""The Delta tables under a snapshot path: schemas, creation, single-commit checkpoints.

Executors write data files; the coordinator commits them here, one checkpoint at a time.
Each commit carries a Delta *app transaction* ``(barriered.<table>, checkpoint id)``, so
committing the same checkpoint twice (a retried completion after a crash) changes
nothing. The ``state`` table's commit is the completion point of a checkpoint: its
version is the checkpoint's restore point (time travel), and its commit metadata holds
the barrier positions, so a checkpoint can be rebuilt from the state table alone.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import DeltaTable, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    RemoveAction,
    Transaction,
    create_table_with_add_actions,
)

from barriered import wall_time
from barriered.errors import SnapshotStoreError
from barriered.files.fileio import delete_file, filesystem, join, list_names
from barriered.files.storage import delta_options
from barriered.statestore.acks import Ack, DataFile

log = logging.getLogger(__name__)

#: The ``state`` table's partitions: one folder per keyed operator (its files span key
#: groups; an earlier layout also partitioned by ``key_group``).
STATE_PARTITIONS = ["operator"]
INFLIGHT_PARTITIONS = ["checkpoint_id"]
APP_ID_PREFIX = "barriered."


def open_table(
    uri: str, version: int | None = None, storage_options: Mapping[str, str] | None = None
) -> DeltaTable | None:
    """Return the Delta table at ``uri`` (at ``version``), or None if there is none.

    Raises
    ------
    SnapshotStoreError
        When the table's log cannot be read: the message names the log file that is
        missing or damaged, when one can be found. Nothing is changed.
    """
    try:
        return DeltaTable(uri, version=version, storage_options=delta_options(uri, storage_options))
    except TableNotFoundError:
        return None
    except Exception as exc:  # delta-rs raises DeltaError, OSError, ... for a damaged log
        at = "" if version is None else f" at version {version}"
        raise SnapshotStoreError(
            f"Delta table {uri!r} cannot be read{at}: {log_damage(uri, version, exc)}. "
            "Nothing was changed"
        ) from exc


def has_deletion_vectors(table: DeltaTable) -> bool:
    """Whether readers of ``table`` must apply deletion vectors (the ``state`` table)."""
    return "deletionVectors" in (table.protocol().reader_features or [])


def scan(
    table: DeltaTable, columns: Sequence[str] | None = None, predicate: str | None = None
) -> pa.Table:
    """Read ``table`` with delta-rs's engine (deletion vectors applied), each column as
    the table's schema declares it (the engine returns string views, ``element`` lists).

    Parameters
    ----------
    columns : sequence of str, optional
        The columns (default: all).
    predicate : str, optional
        A DataFusion SQL predicate (files and rows that cannot match are skipped).
    """
    wanted = None if columns is None else list(columns)
    data = pa.table(table.scan(columns=wanted, predicate=predicate).read_all())
    declared = pa.schema(table.schema().to_arrow())
    return pa.Table.from_arrays(
        [data[n].cast(declared.field(n).type) for n in data.column_names],
        schema=pa.schema([declared.field(n) for n in data.column_names]),
    )


def read_table(
    table: DeltaTable,
    columns: Sequence[str] | None = None,
    where: pc.Expression | None = None,
    predicate: str | None = None,
) -> pa.Table:
    """Read ``table`` (some ``columns``, rows matching ``where``) into memory; a table
    with deletion vectors through delta-rs's engine (``predicate``: its SQL form of
    ``where``, to skip files).

    Raises
    ------
    SnapshotStoreError
        When a data file is missing or unreadable: the message names it. Nothing is changed.
    """
    try:
        if has_deletion_vectors(table):
            data = scan(table, None if where is not None else columns, predicate)
            if where is not None:
                data = data.filter(where)
            return data if columns is None else data.select(list(columns))
        return table.to_pyarrow_dataset().to_table(
            columns=None if columns is None else list(columns), filter=where
        )
    except Exception as exc:  # OSError (missing), ArrowInvalid (not Parquet), DeltaError
        uri = table.table_uri.rstrip("/")
        uri = uri.removeprefix("file://") if uri.startswith("file:///") else uri
        raise SnapshotStoreError(
            f"Delta table {uri!r} at version {table.version()} cannot be read: "
            f"{_data_damage(uri, exc)}. Nothing was changed"
        ) from exc


def log_file(uri: str, version: int) -> str:
    """The log file of commit ``version`` of the table at ``uri``."""
    return join(uri, "_delta_log", f"{version:020d}.json")


def log_file_problem(uri: str, version: int) -> str | None:
    """What is wrong with the log file of commit ``version`` (None: it is there and parses)."""
    path = log_file(uri, version)
    fs, local = filesystem(path)
    try:
        with fs.open_input_stream(local) as f:
            raw = f.read()
    except OSError:
        return f"its commit {path!r} is missing"
    if not raw.strip():
        return f"its commit {path!r} is empty"
    try:
        for line in raw.decode("utf-8").splitlines():
            if line.strip():
                json.loads(line)
    except ValueError as exc:
        return f"its commit {path!r} is not valid JSON ({exc})"
    return None


def log_damage(uri: str, version: int | None, exc: BaseException) -> str:
    """Name the log file that makes the table at ``uri`` unreadable: missing (also a gap
    in the versions), empty or not JSON; else the first line of delta-rs's error."""
    versions = sorted(
        int(n[:-5])
        for n in list_names(join(uri, "_delta_log"))
        if n.endswith(".json") and n[:-5].isdigit()
    )
    wanted = [version] if version is not None and version not in versions else []
    gaps = [v for a, b in itertools.pairwise(versions) for v in range(a + 1, b)]
    for v in [*wanted, *gaps[:1], *reversed(versions)]:
        problem = log_file_problem(uri, v)
        if problem is not None:
            return problem.removeprefix("its ")
    return _first_line(exc)


def _data_damage(uri: str, exc: BaseException) -> str:
    found = re.search(r"(?:Parquet input source|Failed to open local file) '([^']+)'", str(exc))
    if found is None:
        return f"a data file is missing or unreadable ({_first_line(exc)})"
    name = found.group(1)
    path = name if name.startswith(("/", uri)) or "://" in name else join(uri, name)
    return f"data file {path!r} is missing or not a readable Parquet file ({_first_line(exc)})"


def _first_line(exc: BaseException) -> str:
    """delta-rs's message without the native backtrace it appends."""
    text = str(exc).split("\n", 1)[0]
    return re.split(r"\s+0: ", text, maxsplit=1)[0].strip() or type(exc).__name__


def _adds(files: Iterable[DataFile]) -> list[AddAction]:
    return [
        AddAction(
            path=f.path,
            size=f.size,
            partition_values=dict(f.partition_values),
            modification_time=f.modification_time,
            data_change=True,
            stats=f.stats_json(),
        )
        for f in files
    ]


@dataclass(frozen=True)
class Commit:
    """What :func:`commit_files` did: the table version and the files it removed."""

    version: int
    removed: tuple[str, ...] = ()


def commit_files(
    uri: str,
    schema: pa.Schema,
    partition_by: Sequence[str],
    checkpoint_id: int | None,
    adds: Sequence[DataFile],
    replace_partitions: Sequence[Mapping[str, str]] = (),
    metadata: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, str] | None = None,
    description: str | None = None,
    app_id: str | None = None,
) -> Commit:
    """Commit files to one table in one transaction.

    Parameters
    ----------
    uri : str
        The table.
    schema : pyarrow.Schema
        The table schema (used to create the table on its first commit).
    partition_by : sequence of str
        Partition columns.
    checkpoint_id : int or None
        Also the app transaction version: a checkpoint already committed is not
        committed again (its version is returned). None for housekeeping commits
        (retention), which carry no app transaction.
    adds : sequence of DataFile
        Files to add.
    replace_partitions : sequence of mapping
        Partitions whose current files this commit removes (key groups rewritten,
        in-flight partitions dropped by retention).
    metadata : mapping, optional
        Custom commit metadata.
    storage_options : mapping, optional
        delta-rs storage options of the table.
    description : str, optional
        The table's description, set when the commit creates it.
    app_id : str, optional
        The app transaction id (default: ``barriered.<table folder name>``).

    Returns
    -------
    Commit
        The version the commit created (or found) and the paths it removed.
    """
    app_id = app_id or APP_ID_PREFIX + uri.rstrip("/").rsplit("/", 1)[-1]
    custom: dict[str, Any] = dict(metadata or {})
    apps = []
    if checkpoint_id is not None:
        custom["barriered.checkpoint_id"] = checkpoint_id
        apps.append(Transaction(app_id, checkpoint_id, wall_time.now_ms()))
    props = CommitProperties(custom_metadata=custom, app_transactions=apps or None)
    what = f"checkpoint {checkpoint_id}" if checkpoint_id is not None else "retention"
    options = delta_options(uri, storage_options)
    table = open_table(uri, storage_options=options)
    try:
        if table is None:
            create_table_with_add_actions(
                uri,
                DeltaSchema.from_arrow(schema),
                _adds(adds),
                mode="error",
                partition_by=list(partition_by),
                description=description,
                storage_options=options,
                commit_properties=props,
            )
            return Commit(DeltaTable(uri, storage_options=options).version())
        if checkpoint_id is not None:
            done = table.transaction_version(app_id)
            if done is not None and done >= checkpoint_id:
                version = committed_version(table, checkpoint_id, custom.get("barriered.epoch"))
                log.info("%s already committed to %s; skipped", what, uri)
                return Commit(version)
        add_columns(table, schema)
        removes: list[RemoveAction] = []
        if replace_partitions:
            wanted = {tuple(p.get(c) for c in partition_by) for p in replace_partitions}
            now = wall_time.now_ms()
            for action in current_files(table):
                pv = action["partition_values"]
                if tuple(pv.get(c) for c in partition_by) in wanted:
                    removes.append(
                        RemoveAction(
                            path=action["path"],
                            data_change=True,
                            deletion_timestamp=now,
                            size=action["size"],
                            partition_values=pv,
                        )
                    )
        if not adds and not removes and checkpoint_id is None:
            return Commit(table.version())
        table.create_write_transaction(
            [*_adds(adds), *removes],
            mode="append",
            schema=DeltaSchema.from_arrow(schema),
            partition_by=list(partition_by),
            commit_properties=props,
        )
        table.update_incremental()
        return Commit(table.version(), tuple(r.path for r in removes))
    except OSError as exc:
        raise SnapshotStoreError(f"cannot commit {what} to {uri!r}: {exc}") from exc


def add_columns(table: DeltaTable, schema: pa.Schema) -> None:
    """Add the columns of ``schema`` the table lacks (a new keyed operator's), in one
    metadata commit before the data commit (Delta reads them as null in older files)."""
    have = set(pa.schema(table.schema().to_arrow()).names)
    new = [f for f in schema if f.name not in have]
    if new:
        table.alter.add_columns(list(DeltaSchema.from_arrow(pa.schema(new)).fields))
        table.update_incremental()
        log.info("%s: columns %s added", table.table_uri, [f.name for f in new])


def current_files(table: DeltaTable) -> list[dict[str, Any]]:
    """Return the table's live files: path, size, rows, partition_values (as strings)."""
    actions = pa.table(table.get_add_actions(flatten=True))
    prefix = "partition."
    out = []
    for a in actions.to_pylist():
        pv = {k[len(prefix) :]: v for k, v in a.items() if k.startswith(prefix)}
        out.append(
            {
                "path": a["path"],
                "size": a["size_bytes"],
                "rows": a.get("num_records"),
                "partition_values": {k: (None if v is None else str(v)) for k, v in pv.items()},
            }
        )
    return out


def committed_version(table: DeltaTable, checkpoint_id: int, epoch: int | None = None) -> int:
    """Return the table version whose commit carries ``checkpoint_id``.

    With ``epoch``, that commit must be this run's: a run that lost the snapshot path
    (see :mod:`barriered.statestore.ownership`) may have committed the same id in the
    moment between its ownership check and its commit, and taking that commit for this
    run's checkpoint would be silently wrong.
    """
    for entry in table.history():
        if entry.get("barriered.checkpoint_id") != checkpoint_id:
            continue
        theirs = entry.get("barriered.epoch")
        if epoch is not None and theirs is not None and int(theirs) != int(epoch):
            raise SnapshotStoreError(
                f"checkpoint {checkpoint_id} of {table.table_uri!r} was committed (version "
                f"{entry['version']}) by the run of epoch {theirs}, which lost the snapshot "
                f"path to this run (epoch {epoch}) while it committed; this run's checkpoint "
                f"{checkpoint_id} is a different one and was not committed. Stop the older "
                "run, then restore again (restoreFrom=latest)"
            )
        return int(entry["version"])
    raise SnapshotStoreError(
        f"{table.table_uri!r} says checkpoint {checkpoint_id} was committed, but no commit "
        "carries it in the retained Delta history"
    )


def state_replacements(acks: Iterable[Ack]) -> list[dict[str, str]]:
    """Partitions (operator, key_group) that the changed key groups of ``acks`` replace."""
    out = []
    for ack in acks:
        if ack.changed and ack.participant.startswith("state/"):
            _, operator, key_group = ack.participant.split("/")
            out.append({"operator": operator, "key_group": key_group})
    return out


def append_rows(
    uri: str,
    rows: Sequence[Mapping[str, Any]],
    schema: pa.Schema,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Append plain rows to a (small) Delta table, creating it when needed."""
    table = pa.Table.from_pylist([dict(r) for r in rows], schema=schema)
    write_deltalake(
        uri,
        table,
        mode="append",
        schema_mode="merge",
        storage_options=delta_options(uri, storage_options),
    )


DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"


def keep_removes_for(
    uri: str, seconds: int, storage_options: Mapping[str, str] | None = None
) -> bool:
    """Make Delta checkpoints of the table keep remove actions ``seconds`` only.

    Delta keeps every removed file's remove action in each checkpoint for
    ``delta.deletedFileRetentionDuration`` (one week by default), so checkpoints of a
    table rewritten every few seconds grow for a week. Retention tracks removed files
    itself (``_coordinator/tombstones.json``); the remove actions only serve VACUUM.
    Returns True when the table property was changed (one metadata commit).
    """
    table = open_table(uri, storage_options=storage_options)
    wanted = f"interval {seconds} seconds"
    if table is None or table.metadata().configuration.get(DELETED_FILE_RETENTION) == wanted:
        return False
    table.alter.set_table_properties({DELETED_FILE_RETENTION: wanted})
    return True


def truncate_log(
    uri: str,
    keep_from: int,
    storage_options: Mapping[str, str] | None = None,
    min_age_ms: int = 0,
) -> int:
    """Delete the Delta log of the versions before ``keep_from``; return how many files.

    Version ``keep_from`` and every later one stay loadable (a Delta checkpoint is written
    at the cut first, so nothing before it is needed), and so does their commit metadata:
    ``DeltaTable.history()`` reads it from the commit files, which are kept from the cut
    on. Versions before the cut can no longer be loaded.

    A reader may have just read ``_last_checkpoint`` naming the table's previous Delta
    checkpoint: the files before the cut go only once a Delta checkpoint at or below the
    cut is ``min_age_ms`` old (until then, a later run deletes them).

    Parameters
    ----------
    uri : str
        The table.
    keep_from : int
        The oldest version that must stay loadable.
    storage_options : mapping, optional
        delta-rs storage options of the table.
    min_age_ms : int, default 0
        Commits younger than this stay loadable too: the cut moves down to the oldest
        of them (a savepoint being copied, a reader loading a version that just left
        the retention window).
    """
    fs, log_dir = filesystem(join(uri, "_delta_log"))
    infos = fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True))
    versions: dict[str, tuple[int, float]] = {
        i.base_name: (int(i.base_name[:20]), i.mtime.timestamp() if i.mtime else 0.0)
        for i in infos
        if i.base_name[:20].isdigit() and i.base_name[20:21] == "."
    }
    young = time.time() - min_age_ms / 1000
    cut = min(
        [keep_from]
        + [v for name, (v, mtime) in versions.items() if name.endswith(".json") and mtime > young]
    )
    if not any(v < cut for v, _ in versions.values()):
        return 0
    at_cut = f"{cut:020d}.checkpoint.parquet"
    if at_cut not in versions:
        table = open_table(uri, cut, storage_options)
        if table is None:
            return 0
        table.create_checkpoint()
        versions[at_cut] = (cut, time.time())
    settled = [
        v
        for name, (v, mtime) in versions.items()
        if name.endswith(".checkpoint.parquet") and v <= cut and (not min_age_ms or mtime <= young)
    ]
    floor = max(settled, default=0)
    old = sorted(name for name, (v, _) in versions.items() if v < floor)
    for name in old:
        delete_file(join(uri, "_delta_log", name))
    if old:
        log.info("%s: Delta log before version %d deleted (%d file(s))", uri, floor, len(old))
    return len(old)


def as_json(value: Any) -> str:
    """Serialize ``value`` compactly (for commit metadata and table cells)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
