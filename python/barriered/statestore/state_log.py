"""The ``state`` table's Delta log: its live files with their deletion vectors, and the
commit of a checkpoint's state written here.

The ``state`` table is merge-on-read (``statestore/README.md``, "Incremental state"): a
checkpoint adds files with the keys that changed and marks the rows they replace with a
deletion vector on the file that holds them (:mod:`barriered.statestore.deletion_vectors`).
delta-rs reads such a table (``DeltaTable.scan``) but neither writes deletion vectors nor
lists them with a table's files, so this module

* replays the log (the newest Delta checkpoint at or below a version, then the JSON
  commits after it) into :class:`StateFiles`, each live file with its deletion vector,
  and keeps it current by replaying only the commits after the version it holds;
* writes the commit of a checkpoint (:func:`commit_state`): the new files, the deletion
  vectors of the files whose rows they replace (a file whose every row is deleted is
  removed instead), the app transaction ``(barriered.state, checkpoint id)`` and the
  commit metadata, as the log file of the next version, created only if absent
  (:func:`~barriered.files.fileio.create_if_absent`). Its deletion vectors above
  :data:`~barriered.statestore.dv_files.INLINE_MAX` bytes go to one deletion vector
  file written before the log entry (:mod:`barriered.statestore.dv_files`). Metadata
  commits (creating the table, adding a new operator's columns) stay delta-rs's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from barriered import wall_time
from barriered.errors import SnapshotStoreError
from barriered.files.fileio import (
    create_if_absent,
    delete_file,
    filesystem,
    join,
    list_names,
    read_bytes,
)
from barriered.statestore.deletion_vectors import DeletionVector, union
from barriered.statestore.dv_files import VectorFile, referenced, vector_rows

log = logging.getLogger(__name__)

#: Table properties of a new ``state`` table: readers must apply deletion vectors.
STATE_CONFIGURATION = {"delta.enableDeletionVectors": "true"}
#: How often a commit that lost the race for its version is tried again.
COMMIT_ATTEMPTS = 20


@dataclass(frozen=True)
class LiveFile:
    """One live data file of a version: its ``add`` action."""

    path: str  # relative to the table (as in the log)
    size: int
    rows: int  # physical rows (``numRecords``)
    partition_values: Mapping[str, str | None]
    modification_time: int
    stats: str | None
    dv: DeletionVector | None = None

    @property
    def live_rows(self) -> int:
        """The rows the version holds: physical rows minus deleted ones."""
        return self.rows - (self.dv.cardinality if self.dv else 0)

    def add_json(self) -> dict[str, Any]:
        """The ``add`` action."""
        stats = self.stats
        if self.dv is not None and stats:  # bounds may be wider than the live rows
            stats = json.dumps({**json.loads(stats), "tightBounds": False})
        out: dict[str, Any] = {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": True,
            "stats": stats,
        }
        if self.dv is not None:
            out["deletionVector"] = self.dv.to_json()
        return out

    def remove_json(self, now_ms: int) -> dict[str, Any]:
        """The ``remove`` action of this file as it is (with its deletion vector)."""
        out: dict[str, Any] = {
            "path": self.path,
            "deletionTimestamp": now_ms,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
        }
        if self.dv is not None:
            out["deletionVector"] = self.dv.to_json()
        return out


def _live_file(add: Mapping[str, Any]) -> LiveFile:
    stats = add.get("stats")
    rows = json.loads(stats).get("numRecords") if stats else None
    dv = add.get("deletionVector")
    return LiveFile(
        path=str(add["path"]),
        size=int(add.get("size") or 0),
        rows=int(rows) if rows is not None else -1,
        partition_values=dict(add.get("partitionValues") or {}),
        modification_time=int(add.get("modificationTime") or 0),
        stats=stats,
        dv=DeletionVector.from_json(dv) if dv else None,
    )


def _versions(uri: str) -> tuple[list[int], list[int]]:
    """The versions of the JSON commits and of the (single-file) Delta checkpoints."""
    commits, checkpoints = [], []
    for name in list_names(join(uri, "_delta_log")):
        head, _, tail = name.partition(".")
        if len(head) == 20 and head.isdigit():
            if tail == "json":
                commits.append(int(head))
            elif tail == "checkpoint.parquet":
                checkpoints.append(int(head))
    return sorted(commits), sorted(checkpoints)


class StateFiles:
    """The live files of one Delta table at a version (log replay), kept current.

    Parameters
    ----------
    uri : str
        The table.
    version : int, optional
        The version to read (default: the newest).

    Raises
    ------
    SnapshotStoreError
        When the table has no log, the version is not in it, or a log file is damaged.
    """

    def __init__(self, uri: str, version: int | None = None) -> None:
        self.uri = uri
        self.version = -1
        self.files: dict[str, LiveFile] = {}
        self.partition_columns: list[str] = []
        self.refresh(version)

    def refresh(self, version: int | None = None) -> StateFiles:
        """Replay the commits after the version held, up to ``version`` (default: all)."""
        commits, checkpoints = _versions(self.uri)
        if not commits and not checkpoints:
            raise SnapshotStoreError(f"{self.uri!r} is not a Delta table (no _delta_log)")
        target = max([*commits, *checkpoints]) if version is None else version
        if target < self.version or target > max([*commits, *checkpoints]):
            raise SnapshotStoreError(f"{self.uri!r} has no version {target} in its log")
        base = max((c for c in checkpoints if self.version < c <= target), default=None)
        if base is not None:
            self._load_checkpoint(base)
        todo = [v for v in commits if self.version < v <= target]
        if todo and todo[0] != self.version + 1:
            raise SnapshotStoreError(
                f"{self.uri!r}: the log has no commit {self.version + 1} (it starts at "
                f"{todo[0]}) and no Delta checkpoint before it, so version {target} "
                "cannot be read (it left the retention window)"
            )
        for v in todo:
            self._apply(v)
        return self

    def _load_checkpoint(self, version: int) -> None:
        path = join(self.uri, "_delta_log", f"{version:020d}.checkpoint.parquet")
        fs, local = filesystem(path)
        try:
            with fs.open_input_file(local) as f:
                table = pq.read_table(f, columns=["add", "metaData"])
        except (OSError, ValueError) as exc:
            raise SnapshotStoreError(f"Delta checkpoint {path!r} cannot be read: {exc}") from exc
        self.files = {}
        for add in table.column("add").to_pylist():
            if add is not None:
                if isinstance(add.get("partitionValues"), list):
                    add = {**add, "partitionValues": dict(add["partitionValues"])}
                self.files[add["path"]] = _live_file(add)
        for meta in table.column("metaData").to_pylist():
            if meta is not None:
                self.partition_columns = list(meta.get("partitionColumns") or [])
        self.version = version

    def _apply(self, version: int) -> None:
        path = join(self.uri, "_delta_log", f"{version:020d}.json")
        raw = read_bytes(path, "Delta log entry")
        if raw is None:
            raise SnapshotStoreError(f"{self.uri!r}: its commit {path!r} is missing")
        try:
            actions = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line]
        except ValueError as exc:
            raise SnapshotStoreError(f"{self.uri!r}: its commit {path!r} is not JSON") from exc
        for action in actions:
            if "remove" in action:
                self.files.pop(action["remove"]["path"], None)
        for action in actions:
            if "add" in action:
                self.files[action["add"]["path"]] = _live_file(action["add"])
            elif "metaData" in action:
                self.partition_columns = list(action["metaData"].get("partitionColumns") or [])
        self.version = version


@dataclass(frozen=True)
class NewFile:
    """A data file a checkpoint adds, with the rows of it that no version holds (a
    deleted key's marker row: it shadows the key's older rows in the live state). It is
    added even when no row of it is held: a partition's live state reads it."""

    path: str
    size: int
    rows: int
    partition_values: Mapping[str, str | None]
    modification_time: int
    stats: str
    hidden: np.ndarray  # sorted row indices


@dataclass(frozen=True)
class StateCommit:
    """What :func:`commit_state` did."""

    version: int
    #: Files the commit removed whole (every row deleted): for retention.
    removed: tuple[str, ...] = ()
    #: Files whose deletion vector it changed.
    masked: tuple[str, ...] = ()
    #: Deletion vector files the version before referenced and this one does not (no
    #: later version can): for retention, like ``removed``.
    vectors_dropped: tuple[str, ...] = ()


def _actions(
    current: Mapping[str, LiveFile],
    adds: Sequence[NewFile],
    deleted: Mapping[str, np.ndarray],
    removable: Collection[str],
    now_ms: int,
    vectors: VectorFile,
    files: StateFiles,
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The add and remove actions of one commit; the paths removed whole and masked.
    Deletion vectors go inline or into ``vectors`` by size."""
    actions: list[dict[str, Any]] = []
    removed, masked = [], []
    for new in adds:
        if new.path in current:
            continue  # already committed (a checkpoint reported it again)
        rows = union(new.hidden, deleted.get(new.path, np.empty(0, np.int64)))
        if len(rows) >= new.rows and new.path in removable:
            removed.append(new.path)  # replaced before it was ever committed: never added
            continue
        entry = LiveFile(
            new.path,
            new.size,
            new.rows,
            new.partition_values,
            new.modification_time,
            new.stats,
            vectors.vector(rows) if len(rows) else None,
        )
        actions.append({"add": entry.add_json()})
    fresh = {a.path for a in adds if a.path not in current}
    for path, rows in deleted.items():
        old = current.get(path)
        if old is None or path in fresh:
            continue  # removed before, or a new file (its vector was set above)
        where = f"data file {path!r} at version {files.version}"
        before = vector_rows(old.dv, files.uri, where) if old.dv else np.empty(0, np.int64)
        now = union(before, rows)
        if len(now) == len(before):
            continue
        actions.append({"remove": old.remove_json(now_ms)})
        if path in removable and old.rows >= 0 and len(now) >= old.rows:
            removed.append(path)
        else:
            actions.append({"add": replace(old, dv=vectors.vector(now)).add_json()})
            masked.append(path)
    return actions, removed, masked


def commit_state(
    files: StateFiles,
    checkpoint_id: int | None,
    adds: Sequence[NewFile],
    deleted: Mapping[str, np.ndarray],
    metadata: Mapping[str, Any],
    app_id: str,
    is_committed: Any = None,
    removable: Collection[str] = (),
) -> StateCommit:
    """Commit a checkpoint's new files and deleted rows to the table of ``files``.

    Parameters
    ----------
    files : StateFiles
        The table's live files; brought to the newest version (and kept there).
    checkpoint_id : int or None
        The checkpoint (also the app transaction's version); None for housekeeping.
    adds : sequence of NewFile
        Files to add (one already live is skipped: a checkpoint may report a file an
        earlier one committed).
    deleted : mapping
        Per file path (relative to the table), rows no longer held: they are added to
        its deletion vector.
    metadata : mapping
        Custom commit metadata (``barriered.*``), top-level keys of ``commitInfo``.
    app_id : str
        The app transaction id.
    is_committed : callable, optional
        ``is_committed() -> int | None``: the table version that already holds
        ``checkpoint_id`` (checked before each attempt: a crash may have committed it).
    removable : collection of str
        Files that are removed once no row of them is held (others keep a deletion
        vector of every row: a partition's live state may still read them).

    Returns
    -------
    StateCommit

    Raises
    ------
    SnapshotStoreError
        When the log entry cannot be written, or other writers keep taking the version.
    """
    for _ in range(COMMIT_ATTEMPTS):
        files.refresh()
        if checkpoint_id is not None and is_committed is not None:
            done = is_committed()
            if done is not None:
                log.info("checkpoint %s already committed to %s; skipped", checkpoint_id, files.uri)
                return StateCommit(int(done))
        now = wall_time.now_ms()
        vectors = VectorFile()
        body, removed, masked = _actions(files.files, adds, deleted, removable, now, vectors, files)
        info = {
            "timestamp": now,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append"},
            "readVersion": files.version,
            "isBlindAppend": not removed and not masked,
            "clientVersion": "spark-barriered",
            **{k: v for k, v in metadata.items() if v is not None},
        }
        if checkpoint_id is not None:
            info["barriered.checkpoint_id"] = checkpoint_id
        head: list[dict[str, Any]] = [{"commitInfo": info}]
        if checkpoint_id is not None:
            head.append({"txn": {"appId": app_id, "version": checkpoint_id, "lastUpdated": now}})
        entry = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in [*head, *body])
        version = files.version + 1
        target = join(files.uri, "_delta_log", f"{version:020d}.json")
        before = referenced(f.dv for f in files.files.values())
        written = vectors.write(files.uri)  # before the log entry that references it
        if create_if_absent(target, entry.encode("utf-8"), "Delta log entry"):
            files.refresh(version)
            dropped = before - referenced(f.dv for f in files.files.values())
            log.debug(
                "%s version %d (checkpoint %s): %d action(s), %d file(s) removed, %d masked, "
                "deletion vector file %s (%d vector(s)), %d no longer referenced",
                files.uri,
                version,
                checkpoint_id,
                len(body),
                len(removed),
                len(masked),
                written,
                vectors.records,
                len(dropped),
            )
            return StateCommit(version, tuple(removed), tuple(masked), tuple(sorted(dropped)))
        if written is not None:  # nothing references it: the entry was not written
            delete_file(join(files.uri, written))
        log.info(
            "%s: version %d was taken by another writer (checkpoint %s); trying again",
            files.uri,
            version,
            checkpoint_id,
        )
    raise SnapshotStoreError(
        f"cannot commit checkpoint {checkpoint_id} to {files.uri!r}: another writer took "
        f"the next version {COMMIT_ATTEMPTS} times in a row"
    )


def partition_files(files: Iterable[LiveFile], **wanted: str) -> list[LiveFile]:
    """The files whose partition values are ``wanted``."""
    return [f for f in files if all(f.partition_values.get(k) == v for k, v in wanted.items())]
