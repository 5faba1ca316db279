"""What a restore starts from: one completed checkpoint (or savepoint) of a snapshot path.

The ``state`` table's commit of checkpoint ``n`` is its completion point, and its commit
metadata holds everything a restore needs besides the data: the barrier positions
``B_n(c)``, the in-flight ranges and the ``inflight`` table version. A restore point is
therefore read from the state table's history alone; the ``_checkpoints`` row may be
missing (a crash right after the commit) and is only used to explain why an id cannot be
restored. Nothing here writes anything.

``restoreFrom`` takes ``latest``, a checkpoint id (both: of this query's snapshot path)
or a path: a savepoint (``barriered.savepoint``), or another snapshot path, whose latest
checkpoint is restored.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from barriered.config import BarrieredConf, check_restore_compatible
from barriered.config.source_options import RESTORE_FROM as RESTORE_FROM_OPTION
from barriered.control.record import ControlRecord
from barriered.errors import RestoreError
from barriered.files.fileio import exists, filesystem, join, list_names, read_json
from barriered.statestore import checkpoints_table, integrity
from barriered.statestore.deletion_vectors import DeletionVector
from barriered.statestore.delta_tables import open_table
from barriered.statestore.integrity import PathIntegrity, committed_checkpoints
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.source_manifest import MANIFESTS, manifest_ends
from barriered.statestore.state_log import StateFiles

log = logging.getLogger(__name__)

#: The default of :func:`resolve`'s ``asked_by``: the source's option.
RESTORE_FROM = f"option {RESTORE_FROM_OPTION.name!r}"


@dataclass(frozen=True)
class TableFile:
    """One live data file of a Delta table at a version."""

    path: str
    size: int
    rows: int  # physical rows
    partition_values: Mapping[str, str | None]
    stats: str | None = None
    dv: DeletionVector | None = None  # the rows of it the version does not hold

    @property
    def live_rows(self) -> int:
        """The rows of it the version holds."""
        return self.rows - (self.dv.cardinality if self.dv else 0)


@dataclass(frozen=True)
class RestorePoint:
    """A completed checkpoint a query can be restored from.

    Attributes
    ----------
    origin : SnapshotLayout
        The snapshot path (or savepoint) holding it.
    checkpoint_id : int
    kind : str
        ``checkpoint`` or ``savepoint``.
    mode : str
        The mode it was cut in (``aligned``, ``unaligned``, ...).
    state_version : int
        Its version of the ``state`` table.
    barrier : tuple of int
        ``B_n(c)`` per channel.
    inflight : tuple of (channel, start, end)
        Records the barrier overtook; they are replayed first on restore.
    inflight_version : int or None
        Its version of the ``inflight`` table (None: nothing was copied).
    config : mapping
        The ``_coordinator/config.json`` of the origin (configuration, channels, upstream).
    savepoint : bool
        True when the origin is a savepoint folder.
    metadata : mapping
        The ``barriered.*`` metadata of its ``state`` commit.
    """

    origin: SnapshotLayout
    checkpoint_id: int
    kind: str
    mode: str
    state_version: int
    barrier: tuple[int, ...]
    inflight: tuple[tuple[int, int, int], ...]
    inflight_version: int | None
    config: Mapping[str, Any]
    savepoint: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def start_positions(self) -> tuple[int, ...]:
        """Where each channel resumes: the start of its in-flight range, else ``B_n(c)``."""
        starts = {c: a for c, a, _ in self.inflight}
        return tuple(starts.get(c, b) for c, b in enumerate(self.barrier))

    def describe(self) -> str:
        """One line for logs and errors."""
        where = "savepoint" if self.savepoint else "snapshot path"
        return f"{self.kind} {self.checkpoint_id} of {where} {self.origin.root!r}"

    def to_meta(self) -> dict[str, Any]:
        """The small JSON form carried to ``barriered.keyed`` in the schema metadata."""
        return {
            "root": self.origin.root,
            "checkpoint_id": self.checkpoint_id,
            "state_version": self.state_version,
        }

    # -- files ---------------------------------------------------------------------------

    def state_files(self, operator: str | None = None) -> list[TableFile]:
        """The ``state`` files of this checkpoint (of one operator, or all)."""
        files = _files(self.origin, self.origin.state_table, self.state_version, self)
        if operator is None:
            return files
        return [f for f in files if f.partition_values.get("operator") == operator]

    def inflight_files(self) -> list[TableFile]:
        """The ``inflight`` files of this checkpoint (value capture only)."""
        if self.inflight_version is None:
            return []
        files = _files(self.origin, self.origin.inflight_table, self.inflight_version, self)
        return [
            f for f in files if f.partition_values.get("checkpoint_id") == str(self.checkpoint_id)
        ]

    def check_files(self) -> None:
        """Check that every data file of the checkpoint is there, whole and readable, and
        that the upstream's manifest (if the upstream keeps one) covers its positions.

        Raises
        ------
        RestoreError
            Naming the first missing, truncated or unreadable file. Nothing is changed.
        """
        tables = [(self.origin.state_table, self.state_files())]
        tables.append((self.origin.inflight_table, self.inflight_files()))
        for table_uri, files in tables:
            fs, root = filesystem(table_uri)
            if files and not isinstance(fs, pafs.LocalFileSystem):
                _check_listed(fs, root, table_uri, files, self)
                continue
            for f in files:
                _check_file(join(table_uri, f.path), f.size, self)
            _check_vectors(table_uri, files, self)
        self.check_manifest()

    def check_manifest(self) -> None:
        """Check that the upstream's manifest is there and reaches every barrier position:
        the checkpoint's positions mean records only through it, so it is never rebuilt.

        Raises
        ------
        RestoreError
            Naming the manifest file. Nothing is changed.
        """
        upstream = str(dict(self.config.get("upstream", {})).get("upstream", ""))
        name = MANIFESTS.get(upstream)
        if name is None:
            return
        path = join(self.origin.source_dir, name)
        ends = manifest_ends(path, len(self.barrier))
        if ends is None:
            raise RestoreError(
                f"cannot restore {self.describe()}: its upstream manifest {path!r} is "
                f"missing. The checkpoint's positions of the {upstream} upstream refer to "
                "it, and it is never rebuilt from what the upstream holds now (records "
                "could move to other positions). Nothing was changed. Put the manifest "
                "back (from a backup, or the _source folder of a savepoint of this "
                "checkpoint), or restore a savepoint that holds it"
            )
        for channel, end in enumerate(ends):
            barrier = self.barrier[channel]
            if end < barrier:
                raise RestoreError(
                    f"cannot restore {self.describe()}: upstream manifest {path!r} records "
                    f"{end} records of channel {channel}, but the checkpoint's barrier there "
                    f"is at {barrier}: it is not the manifest this query wrote (or an older "
                    "copy). Nothing was changed. Put back the manifest of this snapshot path"
                )

    def operators(self) -> dict[str, dict[str, Any]]:
        """The keyed operators registered on the origin, by name."""
        return self.origin.registrations()

    # -- compatibility -------------------------------------------------------------------

    def check_config(self, conf: BarrieredConf) -> None:
        """Refuse a query whose keys fixed for the life of a snapshot (``maxParallelism``)
        differ from the snapshot's.

        Raises
        ------
        ConfigError
            Naming the key, both values and what to do.
        """
        check_restore_compatible(self.config.get("conf", {}), conf)

    def check_upstream(self, channels: int, upstream: str, grows: bool = False) -> None:
        """Refuse a source with another channel count or upstream than the snapshot's
        (more channels are fine for an upstream that ``grows``: they joined later).

        Raises
        ------
        RestoreError
            Naming both values.
        """
        recorded = len(self.barrier) or int(self.config.get("channels", channels))
        if recorded != channels and not (grows and channels > recorded):
            raise RestoreError(
                f"cannot restore {self.describe()}: it was taken from {recorded} channels, "
                f"this source has {channels}. Channels are fixed for the life of a snapshot; "
                "restore with the same upstream options"
            )
        theirs = str(dict(self.config.get("upstream", {})).get("upstream", upstream))
        if theirs != upstream:
            raise RestoreError(
                f"cannot restore {self.describe()}: it was taken from upstream {theirs!r}, "
                f"this source reads {upstream!r}; it belongs to another query"
            )


def _files(layout: SnapshotLayout, uri: str, version: int, point: RestorePoint) -> list[TableFile]:
    try:
        table = open_table(uri, version, layout.storage_options)
        files = StateFiles(uri, version).files.values() if table is not None else ()
    except Exception as exc:
        raise RestoreError(
            f"cannot restore {point.describe()}: table {uri!r} cannot be read at version "
            f"{version} ({exc}). Nothing was changed; restore another retained checkpoint"
        ) from exc
    if table is None:
        raise RestoreError(
            f"cannot restore {point.describe()}: table {uri!r} is missing. Nothing was changed"
        )
    return [
        TableFile(f.path, f.size, max(f.rows, 0), dict(f.partition_values), f.stats, f.dv)
        for f in files
    ]


def _check_file(uri: str, size: int, point: RestorePoint) -> None:
    fs, path = filesystem(uri)
    info = fs.get_file_info(path)
    problem = None
    if info.size != size:
        found = "is missing" if info.size is None else f"has {info.size} bytes"
        problem = f"{found}, the Delta log says {size}"
    else:
        try:
            with fs.open_input_file(path) as f:
                pq.read_metadata(f)
        except Exception as exc:
            problem = f"is not a readable Parquet file ({exc})"
    if problem is not None:
        _refuse(uri, problem, point)


def _check_listed(
    fs: pafs.FileSystem, root: str, table_uri: str, files: list[TableFile], point: RestorePoint
) -> None:
    """:func:`_check_file` on an object store, for a whole table with one listing: an
    object is whole or absent (one PUT), so its listed size is the check (a request per
    1,000 files instead of two HEADs and a GET per file)."""
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    sizes = {i.path: i.size for i in fs.get_file_info(selector)}
    for f in files:
        size = sizes.get(f"{root}/{f.path}")
        if size != f.size:
            problem = "is missing" if size is None else f"has {size} bytes"
            _refuse(join(table_uri, f.path), f"{problem}, the Delta log says {f.size}", point)
    _check_vectors(table_uri, files, point, {p: s for p, s in sizes.items() if s is not None})


def _check_vectors(
    table_uri: str,
    files: list[TableFile],
    point: RestorePoint,
    sizes: Mapping[str, int] | None = None,
) -> None:
    """Check that the deletion vector files the version references are there and long
    enough for each vector (``sizes``: the listed sizes of an object store's files, by
    path inside it; else one request per file)."""
    ends: dict[str, tuple[int, str]] = {}
    for f in files:
        if f.dv is None or f.dv.storage_type == "i":
            continue
        start, length = f.dv.stored_bytes
        path = f.dv.file_path(table_uri)
        if start + length > ends.get(path, (0, ""))[0]:
            ends[path] = (start + length, f.path)
    for path, (end, data_file) in sorted(ends.items()):
        if sizes is not None:
            size = sizes.get(filesystem(path)[1])
        else:
            fs, local = filesystem(path)
            size = fs.get_file_info(local).size
        if size is None or size < end:
            found = "is missing" if size is None else f"has {size} bytes"
            raise RestoreError(
                f"cannot restore {point.describe()}: deletion vector file {path!r} of table "
                f"{table_uri!r} (version {point.state_version}; the vector of data file "
                f"{data_file!r} ends at byte {end}) {found}. Nothing was changed or "
                "deleted. If retention removed it, restore a newer checkpoint (barriered "
                "checkpoints PATH lists them); otherwise put the file back"
            )


def _refuse(uri: str, problem: str, point: RestorePoint) -> NoReturn:
    raise RestoreError(
        f"cannot restore {point.describe()}: data file {uri!r} {problem}. Nothing was "
        "changed or deleted. If retention removed it, restore a newer checkpoint "
        "(barriered checkpoints PATH lists them); otherwise put the file back"
    )


def highest_checkpoint_id(layout: SnapshotLayout) -> int:
    """The highest checkpoint id ever used on ``layout`` (0 if none): committed, recorded,
    requested, scheduled, or with acknowledgements left by a crashed run. New ids must be
    above it, so that nothing a crashed run left behind is mistaken for a new checkpoint's."""
    ids = set(committed_checkpoints(layout))
    ids.update(int(r["checkpoint_id"]) for r in checkpoints_table.read_rows(layout))
    ids.update(ControlRecord.read(layout).ids())
    ids.update(int(n) for n in list_names(join(layout.root, "_acks"), folders=True) if n.isdigit())
    return max(ids, default=0)


def _not_restorable(found: PathIntegrity, checkpoint_id: int) -> str:
    row = checkpoints_table.row_of(found.rows, checkpoint_id)
    known = f"completed checkpoints there: {found.restorable or 'none'}"
    retired = bool(found.restorable) and checkpoint_id < found.restorable[-1]
    if row is None and retired:
        return (
            f"checkpoint {checkpoint_id} under {found.root!r} is not retained: it left the "
            f"retention window (retainedCheckpoints) or never completed ({known})"
        )
    if row is None:
        return f"checkpoint {checkpoint_id} does not exist under {found.root!r} ({known})"
    if row["status"] == "completed" and retired:
        return (
            f"checkpoint {checkpoint_id} under {found.root!r} left the retention window "
            f"(retainedCheckpoints): its files and Delta log are gone ({known})"
        )
    if row["status"] == "completed":
        return (
            f"checkpoint {checkpoint_id} under {found.root!r} is listed as completed but "
            f"cannot be restored: {found.reason(checkpoint_id)}. Nothing was changed; put the "
            f"missing file back or restore another checkpoint ({known})"
        )
    reason = f": {row['failure_reason']}" if row.get("failure_reason") else ""
    return (
        f"checkpoint {checkpoint_id} under {found.root!r} is {row['status']}{reason}, "
        f"not completed ({known})"
    )


def resolve(
    target: SnapshotLayout, restore_from: str, asked_by: str | None = RESTORE_FROM
) -> RestorePoint:
    """Find the checkpoint ``restoreFrom`` names.

    Parameters
    ----------
    target : SnapshotLayout
        The restoring query's snapshot path (where ``latest`` and ids are looked up).
    restore_from : str
        ``latest``, a checkpoint id, or the path of a savepoint or snapshot path.
    asked_by : str or None
        What asks, the start of every message (default: the source's option
        ``restoreFrom``, whose removal is the advice when nothing was completed yet;
        None: a command that has no such option).

    Raises
    ------
    RestoreError
        When there is no such completed checkpoint, or the path is not a savepoint or
        snapshot path, or holds none.
    """
    asked = "" if asked_by is None else f"{asked_by}: "
    spec = restore_from.strip()
    wanted: int | None = None
    if spec.lower() == "latest":
        origin = target
    elif spec.isdigit():
        origin, wanted = target, int(spec)
    else:
        origin = SnapshotLayout.at(spec, target.storage_options)
        if not exists(origin.root):
            raise RestoreError(
                f"{asked}{spec!r} is not 'latest', a checkpoint id, or an existing "
                "savepoint or snapshot path"
            )
        if not origin.is_snapshot_path():
            raise RestoreError(
                f"{asked}{spec!r} is not a savepoint or snapshot path: it has no _checkpoints "
                "table and no _coordinator/config.json (a plain Delta table or another "
                "folder). Give a savepoint folder (barriered.savepoint, barriered savepoint) "
                "or the snapshotPath of a query"
            )
    marker = read_json(origin.savepoint_file, default=None)
    if marker is not None and wanted is None:
        wanted = int(marker["checkpoint_id"])
    found = integrity.check(origin)
    if found.history_problem is not None:
        if origin.root == target.root:  # the restored query could not number its checkpoints
            raise RestoreError(f"{asked}{found.history_problem}")
        log.warning("restore from %s: %s", origin.root, found.history_problem)
    if wanted is None:
        refusal = found.refusal() or found.state_problem
        if refusal is not None:
            raise RestoreError(f"{asked}{refusal}")
        if found.restore_id is None:
            advice = (
                f" to restore. Remove {RESTORE_FROM_OPTION.name!r} to start from the beginning"
                if asked_by == RESTORE_FROM
                else ". Nothing was written; a checkpoint must complete first (barriered "
                "checkpoints PATH lists them)"
            )
            raise RestoreError(f"{asked}no completed checkpoint under {origin.root!r}{advice}")
        wanted = found.restore_id
    if wanted not in found.committed:
        raise RestoreError(f"{asked}{_not_restorable(found, wanted)}")
    version, meta = found.committed[wanted]
    config = read_json(origin.config_file, default=None)
    if config is None:
        raise RestoreError(
            f"cannot restore checkpoint {wanted} of {origin.root!r}: "
            f"{origin.config_file!r} is missing, so its configuration is unknown"
        )
    barrier = json.loads(meta.get("barriered.barrier") or "{}")
    inflight = json.loads(meta.get("barriered.inflight") or "{}")
    # the checkpoint's own channels: an upstream that grows had fewer when it started
    channels = len(barrier) or int(config.get("channels", 0))
    point = RestorePoint(
        origin=origin,
        checkpoint_id=wanted,
        kind=str(meta.get("barriered.kind", "checkpoint")),
        mode=str(meta.get("barriered.mode", "aligned")),
        state_version=version,
        barrier=tuple(int(barrier[str(c)]) for c in range(channels)),
        inflight=tuple(sorted((int(c), int(a), int(b)) for c, (a, b) in inflight.items() if b > a)),
        inflight_version=(
            None
            if meta.get("barriered.inflight_version") is None
            else int(meta["barriered.inflight_version"])
        ),
        config=config,
        savepoint=marker is not None,
        metadata={k: v for k, v in meta.items() if k.startswith("barriered.")},
    )
    log.info("restore: %s, state table version %d", point.describe(), version)
    return point
