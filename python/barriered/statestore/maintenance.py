"""Bounded metadata: what keeps a long-running snapshot path from growing.

Retention (:mod:`barriered.statestore.retention`) deletes the data files no retained
checkpoint reads. Every ``retention.maintenanceInterval`` completed checkpoints the
coordinator also bounds what is left, without touching what a retained checkpoint needs:

* ``_checkpoints`` is compacted into one file holding the newest ``retention.historySize``
  rows and the rows of the retained checkpoints; the replaced files are tombstoned and
  deleted by retention after ``retention.minAge``.
* The Delta log of each table is cut at the oldest version a retained checkpoint reads
  (``state``, ``inflight``, the Spark operators' store tables) or at the current version
  (``_checkpoints``): a Delta
  checkpoint is written at that version, the commit files before it are deleted. Every
  retained checkpoint's version stays loadable, with its commit metadata (the restore
  point), since those commits are at or after the cut.
* Acknowledgement folders ``_acks/<id>/`` left behind (a task that acknowledged after its
  checkpoint was aborted, a crashed coordinator) are deleted once older than
  ``retention.minAge``, with the data files they list that no table version a retained
  checkpoint reads, nor the current one, references (keyed state files excepted, below).
* Keyed state files no live state reads any more: the ``state`` table's files that
  neither its current version nor a retained checkpoint's references and that retention
  does not track (a failed task attempt's file, one replaced before it was committed),
  and the files of changes spilled between two cuts (``_live/``), once written before
  the trigger of the newest completed checkpoint by ``retention.minAge``; so are the
  table's deletion vector files that no such version references (a commit that crashed
  between its deletion vector file and its log entry, or before retention recorded the
  file it dropped, :mod:`barriered.statestore.dv_files`). Every keyed
  partition reports at each cut every file its live state reads that no completed
  checkpoint holds, so whatever the newest completed checkpoint's version does not hold
  and was written before its cut is read by nobody (:mod:`barriered.statestore.live_state`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs

from barriered.files.fileio import (
    delete_file,
    delete_tree,
    exists,
    filesystem,
    join,
    list_names,
    read_json,
)
from barriered.statestore import checkpoints_table
from barriered.statestore.acks import read_acks
from barriered.statestore.delta_tables import (
    current_files,
    keep_removes_for,
    open_table,
    truncate_log,
)
from barriered.statestore.dv_files import is_vector_file, referenced
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.retention import (
    CHECKPOINTS,
    INFLIGHT,
    OPERATORS,
    STATE,
    Retained,
    ack_table,
    floors,
    pinned_vectors,
    record_removed,
    table_uri,
)
from barriered.statestore.state_log import StateFiles

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenanceReport:
    """What one maintenance run did."""

    compacted: bool
    log_files_deleted: int
    acks_deleted: int
    seconds: float


def run(
    layout: SnapshotLayout,
    retained: Sequence[Retained],
    history_size: int,
    min_age_ms: int,
    finished_below: int,
    pending: Collection[int] = (),
    settled_before_ms: int | None = None,
) -> MaintenanceReport:
    """Compact ``_checkpoints``, cut the Delta logs and remove stray acknowledgements.

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path.
    retained : sequence of Retained
        The retained completed checkpoints (at least one, else nothing is done).
    history_size : int
        ``retention.historySize``.
    min_age_ms : int
        ``retention.minAge``: stray acknowledgements younger than this stay.
    finished_below : int
        Every checkpoint id below it is finished (completed or aborted) or unknown to
        this run; only acknowledgement folders of such ids are candidates.
    pending : collection of int
        Checkpoints still pending (their acknowledgements always stay).
    settled_before_ms : int, optional
        The trigger time (epoch ms) of the newest completed checkpoint: keyed state
        files written ``min_age_ms`` before it that nothing references are deleted.
    """
    begin = time.perf_counter()
    if not retained:
        return MaintenanceReport(False, 0, 0, 0.0)
    ids = [r.checkpoint_id for r in retained]
    commit = checkpoints_table.compact(layout, history_size, ids)
    if commit is not None:
        record_removed(layout, CHECKPOINTS, commit.version, commit.removed)
    deleted = 0
    for table, floor in floors(retained).items():
        uri = table_uri(layout, table)
        if floor is None:
            current = open_table(uri, storage_options=layout.storage_options)
            floor = None if current is None else current.version()
        if floor is not None:
            keep_removes_for(uri, min_age_ms // 1000, layout.storage_options)
            deleted += truncate_log(uri, floor, layout.storage_options, min_age_ms)
    acks = _stray_acks(layout, retained, min_age_ms, finished_below, pending)
    if settled_before_ms is not None:
        deleted += _unread_state_files(layout, retained, settled_before_ms - min_age_ms)
    report = MaintenanceReport(
        commit is not None, deleted, acks, round(time.perf_counter() - begin, 4)
    )
    log.info("maintenance of %s (retained checkpoints %s): %s", layout.root, ids, report)
    return report


def _referenced(layout: SnapshotLayout, table: str, versions: set[int | None]) -> set[str]:
    """Paths of ``table`` read by ``versions`` (None: the current version)."""
    paths: set[str] = set()
    for version in versions:
        opened = open_table(table_uri(layout, table), version, layout.storage_options)
        if opened is not None:
            paths.update(f["path"] for f in current_files(opened))
    return paths


def _stray_acks(
    layout: SnapshotLayout,
    retained: Sequence[Retained],
    min_age_ms: int,
    finished_below: int,
    pending: Collection[int],
) -> int:
    acks_root = join(layout.root, "_acks")
    stray = [
        int(n)
        for n in list_names(acks_root, folders=True)
        if n.isdigit() and int(n) < finished_below and int(n) not in pending
    ]
    stray = [cid for cid in stray if _age_ms(layout.acks_dir(cid)) >= min_age_ms]
    if not stray:
        return 0
    stones = read_json(layout.tombstones_file, default={}) or {}
    versions: dict[str, set[int | None]] = {
        STATE: {None, *(r.state_version for r in retained)},
        INFLIGHT: {None, *(r.inflight_version for r in retained if r.inflight_version is not None)},
    }
    for r in retained:
        for name, version in r.stores.items():
            versions.setdefault(OPERATORS + name, {None}).add(version)
    keep: dict[str, set[str]] = {}  # per table: what a version still reads, or a tombstone
    for cid in stray:
        for ack in read_acks(layout, cid).values():
            table = ack_table(ack)
            if not ack.files or table == STATE:
                continue  # a keyed partition's live state may read its files (kept)
            if table not in keep:
                keep[table] = _referenced(layout, table, versions.get(table, {None}))
                keep[table].update(str(e[1]) for e in stones.get(table, []))
            for f in ack.files:
                if f.path not in keep[table]:
                    delete_file(join(table_uri(layout, table), f.path))
        delete_tree(layout.acks_dir(cid))
        log.info("maintenance: stray acknowledgements of checkpoint %d removed", cid)
    return len(stray)


def _referenced_vectors(layout: SnapshotLayout, versions: set[int | None]) -> set[str]:
    """The deletion vector files of the ``state`` table that ``versions`` reference."""
    out: set[str] = set()
    files = None
    for version in sorted(versions, key=lambda v: -1 if v is None else v):
        if version is None:  # the newest, replayed last (kept current from the older)
            continue
        files = StateFiles(layout.state_table, version) if files is None else files.refresh(version)
        out |= referenced(f.dv for f in files.files.values())
    newest = StateFiles(layout.state_table) if files is None else files.refresh()
    return out | referenced(f.dv for f in newest.files.values())


def _unread_state_files(
    layout: SnapshotLayout, retained: Sequence[Retained], before_ms: int
) -> int:
    """Delete the keyed state files and deletion vector files nothing reads that were
    written before ``before_ms``."""
    versions: set[int | None] = {None, *(r.state_version for r in retained)}
    keep = _referenced(layout, STATE, versions)
    stones = read_json(layout.tombstones_file, default={}) or {}
    keep.update(str(e[1]) for e in stones.get(STATE, []))
    if exists(join(layout.state_table, "_delta_log")):
        keep |= _referenced_vectors(layout, versions) | pinned_vectors(layout, retained)
    deleted = 0
    for root in (layout.state_table, layout.live_dir):
        fs, base = filesystem(root)
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        for info in infos:
            rel = info.path[len(base) :].lstrip("/")
            if (
                info.type != pafs.FileType.File
                or not (rel.endswith(".parquet") or is_vector_file(rel))
                or rel.startswith("_")  # the log (its checkpoints)
                or (root == layout.state_table and rel in keep)
                or info.mtime is None
                or info.mtime.timestamp() * 1000 >= before_ms
            ):
                continue
            delete_file(join(root, rel))
            deleted += 1
    if deleted:
        log.info("maintenance: %d keyed state file(s) nothing reads deleted", deleted)
    return deleted


def _age_ms(folder: str) -> int:
    """Milliseconds since the newest file in ``folder`` was written."""
    fs, path = filesystem(folder)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    newest = max((i.mtime.timestamp() for i in infos if i.mtime is not None), default=0.0)
    return int((time.time() - newest) * 1000)
