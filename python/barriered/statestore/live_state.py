"""The live keyed state of one partition: changes in Spark's state store over immutable files.

A partition's keyed state (the key groups it owns) is a log-structured merge of

* **the buffered changes**: the keys changed since the last file was written (their new
  state, or a deletion), kept as one Arrow value in Spark's state store
  (``applyInPandasWithState``), so a retried micro-batch starts from its own version;
  spilled to a private file (``_live/``) beyond ``keyed.writeBufferSize``;
* **runs**: immutable Parquet files, newest first: the ``state`` table files this
  partition wrote at cuts, the spilled files since the last cut, and after a restore the
  restored checkpoint's files (the table's files *are* the state). Each is read through
  the machine's :mod:`~barriered.statestore.state_cache`, so a batch reads the keys it
  touches, not the state.

A key's state is its newest entry: the buffered changes first, then each run in order; a
deleted key's marker row (hidden from every table version) ends the search. A restored
run carries the restored version's deletion vector: rows in it are not the state.

At a cut (:meth:`LiveState.flush`) the buffered changes and the spilled files become one
new file of the ``state`` table holding the changed keys only. Its footer names what the
coordinator turns into deletion vectors in the checkpoint's single commit
(:mod:`barriered.statestore.state_log`): the rows of older table files it replaces
(``barriered.deletes``, from each changed key's previous entry) and its own marker rows
(``barriered.hidden``). The first cut after a restore, and a cut that finds more than
``keyed.maxRuns`` table files, writes the partition's whole state instead, one file
that replaces every older row of its key groups (``barriered.replaces``). A file stays
*pending*, reported again at every cut, until a checkpoint at or after the cut that
wrote it has completed (the ``base`` of a marker): an aborted checkpoint loses nothing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from barriered import wall_time
from barriered.datasource.options import RESTORE_FROM
from barriered.errors import KeyedStateError
from barriered.statestore.deletion_vectors import (
    DeletionVector,
    deserialize,
    serialize,
    union,
    z85_decode,
    z85_encode,
)
from barriered.statestore.evolution import conform
from barriered.statestore.fileio import filesystem, join, make_parent
from barriered.statestore.key_groups import partition_key_groups
from barriered.statestore.state_cache import (
    GONE,
    HASH,
    POS,
    StateCache,
    Unit,
    build_unit,
    key_hashes,
    keys_equal,
)

log = logging.getLogger(__name__)

KEY_GROUP = "key_group"
CHECKPOINT_ID = "checkpoint_id"
#: Columns of the buffered changes beyond the state's: the run and row the key's
#: previous entry is in (-1: none).
ORIGIN_RUN, ORIGIN_ROW = "__origin_run", "__origin_row"
#: Footer metadata of a file written here.
META_HIDDEN = b"barriered.hidden"
META_DELETES = b"barriered.deletes"
META_REPLACES = b"barriered.replaces"
META_GROUPS = b"barriered.groups"
#: The format of the value in Spark's state store.
FORMAT = 2


def encode_rows(rows: np.ndarray) -> list[Any]:
    """Row indices as ``[size, z85]`` (the bytes of a deletion vector)."""
    data = serialize(np.asarray(rows, np.int64))
    return [len(data), z85_encode(data)]


def decode_rows(encoded: Sequence[Any]) -> np.ndarray:
    """The row indices of :func:`encode_rows`."""
    return deserialize(z85_decode(str(encoded[1]), int(encoded[0])))


@dataclass(frozen=True)
class FileNotes:
    """What a file written here says in its footer."""

    hidden: np.ndarray  # its own rows no version holds (deleted keys' markers)
    deletes: dict[str, np.ndarray]  # rows of older table files it replaces, by path
    replaces: tuple[int, ...]  # key groups whose every older row it replaces
    groups: tuple[int, ...]  # the key group of each row group

    def metadata(self) -> dict[bytes, bytes]:
        """The footer's key-value metadata."""
        return {
            META_HIDDEN: json.dumps(encode_rows(self.hidden)).encode(),
            META_DELETES: json.dumps({p: encode_rows(r) for p, r in self.deletes.items()}).encode(),
            META_REPLACES: json.dumps(list(self.replaces)).encode(),
            META_GROUPS: json.dumps(list(self.groups)).encode(),
        }

    @classmethod
    def read(cls, metadata: Mapping[bytes, bytes] | None) -> FileNotes:
        """Parse a footer's metadata (a file of another writer says nothing)."""
        meta = metadata or {}

        def get(key: bytes, default: Any) -> Any:
            return json.loads(meta[key]) if key in meta else default

        hidden = get(META_HIDDEN, None)
        return cls(
            decode_rows(hidden) if hidden else np.empty(0, np.int64),
            {p: decode_rows(r) for p, r in get(META_DELETES, {}).items()},
            tuple(int(g) for g in get(META_REPLACES, [])),
            tuple(int(g) for g in get(META_GROUPS, [])),
        )


@dataclass
class Run:
    """One immutable file of the live state (an entry of the manifest)."""

    id: int
    uri: str  # absolute
    rel: str | None  # path in this snapshot path's state table; None: private or restored
    groups: list[int]  # the key group of each row group; [] to read from its footer
    key_group: int | None = None  # an earlier layout's file: one key group, no column
    dv: dict[str, Any] | None = None  # restored: the version's deletion vector
    private: bool = False  # spilled buffered changes, not in the table


@dataclass
class Pending:
    """A table file written at a cut that no completed checkpoint holds yet."""

    rel: str
    size: int
    rows: int
    modification_time: int
    stats: str
    rows_by_group: dict[str, int]
    first_cut: int

    @property
    def groups(self) -> set[int]:
        """The key groups it holds rows of."""
        return {int(g) for g in self.rows_by_group}


@dataclass
class Manifest:
    """The JSON part of the value in Spark's state store."""

    partition: int
    partitions: int
    runs: list[Run] = field(default_factory=list)  # newest first
    pending: list[Pending] = field(default_factory=list)
    next_run: int = 1
    full_next: bool = False  # the next cut writes the whole state (after a restore)
    format: int = FORMAT

    def to_json(self) -> str:
        """Serialize (compact JSON)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse :meth:`to_json`."""
        d = json.loads(text)
        return cls(
            partition=int(d["partition"]),
            partitions=int(d["partitions"]),
            runs=[Run(**r) for r in d["runs"]],
            pending=[Pending(**p) for p in d["pending"]],
            next_run=int(d["next_run"]),
            full_next=bool(d["full_next"]),
            format=int(d["format"]),
        )

    def add_run(self, **kwargs: Any) -> Run:
        """A new run with the next id (not yet placed in :attr:`runs`)."""
        run = Run(id=self.next_run, **kwargs)
        self.next_run += 1
        return run


@dataclass(frozen=True)
class LiveConfig:
    """What a partition's live state needs to know of its operator."""

    operator: str
    key_columns: tuple[str, ...]
    schema: pa.Schema  # key columns, then state fields
    max_parallelism: int
    table_uri: str  # this snapshot path's state table
    private_uri: str  # where spilled changes go
    write_buffer: int  # bytes of buffered changes before they are spilled
    max_runs: int  # table files of the partition before a cut compacts them
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def buffer_schema(self) -> pa.Schema:
        """The schema of the buffered changes."""
        origin = [pa.field(ORIGIN_RUN, pa.int32()), pa.field(ORIGIN_ROW, pa.int64())]
        return pa.schema([*self.merge_schema, *origin])

    @property
    def merge_schema(self) -> pa.Schema:
        """Entries as merged at a cut: the state, the key group, the hash, deleted."""
        extra = [
            pa.field(KEY_GROUP, pa.int32()),
            pa.field(HASH, pa.uint64()),
            pa.field(GONE, pa.bool_()),
        ]
        return pa.schema([*self.schema, *extra])

    @property
    def file_schema(self) -> pa.Schema:
        """The columns of a file written here (the ``state`` table's but ``operator``)."""
        extra = [pa.field(KEY_GROUP, pa.int32()), pa.field(CHECKPOINT_ID, pa.int64())]
        return pa.schema([*self.schema, *extra])


@dataclass(frozen=True)
class Found:
    """What :meth:`LiveState.lookup` found for a set of distinct keys.

    ``origin_run`` and ``origin_row`` name, per key, the table file (run id) and row
    that a change of the key replaces: :data:`NO_FILE` when no file holds it,
    :data:`SPILLED` when a spilled file does (whose notes name the table row).
    """

    hashes: np.ndarray  # per key asked for
    index: np.ndarray  # the keys that have a state (positions, ascending)
    state: pa.Table  # their state (key columns and fields), in that order
    origin_run: np.ndarray
    origin_row: np.ndarray
    in_buffer: np.ndarray  # per key: whether its newest entry is a buffered change


@dataclass(frozen=True)
class Flushed:
    """What a cut leaves for the checkpoint: every pending file, the key groups they
    hold, and the file this cut wrote (None: nothing changed)."""

    files: list[Pending]
    changed: set[int]
    written: Pending | None


#: Origins of a buffered change (``__origin_run``): no file holds the key; a spilled file
#: holds it.
NO_FILE, SPILLED = -1, -2

_FOOTERS: dict[str, list[tuple[int, int, int, int]]] = {}
_DVS: dict[tuple[str, str], np.ndarray] = {}


def footer_groups(uri: str, key_group: int | None = None) -> list[tuple[int, int, int, int]]:
    """Per row group of a state file: (index, first row, key group min, max), from its
    footer (an earlier layout's file: ``key_group`` for all); cached per process."""
    found = _FOOTERS.get(uri)
    if found is None:
        fs, path = filesystem(uri)
        with fs.open_input_file(path) as f:
            meta = pq.ParquetFile(f).metadata
        leaves = [meta.schema.column(j).path for j in range(meta.num_columns)]
        column = leaves.index(KEY_GROUP) if KEY_GROUP in leaves else None
        found, first = [], 0
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            stats = rg.column(column).statistics if column is not None else None
            if key_group is not None:
                lo = hi = key_group
            elif stats is not None and stats.has_min_max:
                lo, hi = int(stats.min), int(stats.max)
            else:
                lo, hi = 0, 1 << 30
            found.append((i, first, lo, hi))
            first += rg.num_rows
        _FOOTERS[uri] = found
    return found


def read_notes(uri: str) -> tuple[FileNotes, int]:
    """The footer notes of a state file and its row count."""
    fs, path = filesystem(uri)
    with fs.open_input_file(path) as f:
        meta = pq.ParquetFile(f).metadata
    return FileNotes.read(meta.metadata), meta.num_rows


def newest_first(tables: Sequence[pa.Table], columns: Sequence[str]) -> pa.Table:
    """One row per key of ``tables`` (each with :data:`HASH`, one schema): the row of
    the earliest table holding it (tables are given newest first)."""
    table = pa.concat_tables(tables).combine_chunks()
    rank = np.concatenate([np.full(t.num_rows, i, np.int32) for i, t in enumerate(tables)])
    hashes = table[HASH].to_numpy()
    order = np.lexsort((rank, hashes))
    ordered = hashes[order]
    later = np.flatnonzero(ordered[1:] == ordered[:-1]) + 1
    drop = np.zeros(len(order), bool)
    if len(later):
        same = keys_equal(
            table.take(pa.array(order[later])), table.take(pa.array(order[later - 1])), columns
        )
        drop[later[same]] = True
        for h in np.unique(ordered[later[~same]]):  # a hash collision: compare by value
            seen: set[tuple[Any, ...]] = set()
            for i in np.flatnonzero(ordered == h):
                key = tuple(table[c][int(order[i])].as_py() for c in columns)
                drop[i] = key in seen
                seen.add(key)
    return table.take(pa.array(order[~drop]))


def _unchanged(new: pa.Table, old: pa.Table, fields: Sequence[str]) -> np.ndarray:
    """Per row, whether ``new`` holds the same state as ``old`` (rows compared pairwise;
    a nested field counts as changed)."""
    same = np.ones(new.num_rows, bool)
    for name in fields:
        a, b = new[name], old[name]
        if pa.types.is_nested(a.type) or a.type != b.type:
            return np.zeros(new.num_rows, bool)
        equal = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b)).to_numpy(zero_copy_only=False)
        same &= equal | both_null
    return same


def _with_columns(table: pa.Table, columns: Mapping[str, pa.Array]) -> pa.Table:
    for name, values in columns.items():
        table = table.append_column(name, values)
    return table


@dataclass(frozen=True)
class RestoredFile:
    """A file of a restored checkpoint's ``state`` table, for the partitions that own
    some of its key groups."""

    uri: str
    first_group: int  # the key groups it holds rows of, at most (its statistics)
    last_group: int
    key_group: int | None = None  # an earlier layout's file (one key group, no column)
    dv: dict[str, Any] | None = None  # the restored version's deletion vector


def new_manifest(
    partition: int, partitions: int, max_parallelism: int, restored: Sequence[RestoredFile] = ()
) -> Manifest:
    """The manifest of a partition's first call: empty, or after a restore the restored
    files that may hold its key groups (their deletion vectors name what is not state),
    and a first cut that writes the whole state (Flink's first checkpoint after a restore
    in ``NO_CLAIM`` mode: the restored files belong to the snapshot)."""
    mine = partition_key_groups(partition, partitions, max_parallelism)
    manifest = Manifest(partition, partitions, full_next=bool(restored))
    for f in restored:
        if f.first_group <= mine[-1] and f.last_group >= mine[0] if len(mine) else False:
            manifest.runs.append(
                manifest.add_run(uri=f.uri, rel=None, groups=[], key_group=f.key_group, dv=f.dv)
            )
    return manifest


class LiveState:
    """One partition's live keyed state during one call (see the module docstring).

    Parameters
    ----------
    config : LiveConfig
    cache : StateCache
        The machine's cache of state files.
    buffer : pyarrow.Table
        The buffered changes (:attr:`LiveConfig.buffer_schema`), sorted by :data:`HASH`.
    manifest : Manifest
    """

    def __init__(
        self, config: LiveConfig, cache: StateCache, buffer: pa.Table, manifest: Manifest
    ) -> None:
        self.config = config
        self.cache = cache
        self.buffer = buffer
        self.manifest = manifest

    @property
    def key_groups(self) -> range:
        """The key groups of this partition."""
        m = self.manifest
        return partition_key_groups(m.partition, m.partitions, self.config.max_parallelism)

    # -- the value in Spark's state store ----------------------------------------------------

    @classmethod
    def from_value(
        cls, config: LiveConfig, cache: StateCache, blob: bytes, manifest_json: str
    ) -> LiveState:
        """The live state stored by :meth:`value`.

        Raises
        ------
        KeyedStateError
            When the value was written in another format.
        """
        manifest = Manifest.from_json(manifest_json)
        if manifest.format != FORMAT:
            raise KeyedStateError(
                f"keyed operator {config.operator!r}: partition {manifest.partition}'s live "
                f"state in Spark's checkpoint has format {manifest.format}, this version "
                f"reads {FORMAT}. Restore the latest checkpoint into a new checkpoint "
                f'location (.option("{RESTORE_FROM.name}", "latest")); nothing was written'
            )
        buffer = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
        if buffer.schema != config.buffer_schema:  # the state fields evolved on resume
            state = conform(buffer, config.schema, config.defaults)
            rest = {n: buffer[n] for n in config.buffer_schema.names if n not in state.column_names}
            buffer = _with_columns(state, rest).cast(config.buffer_schema)
        return cls(config, cache, buffer.combine_chunks(), manifest)

    def value(self) -> tuple[bytes, str]:
        """The buffered changes (Arrow IPC) and the manifest (JSON), for Spark's store."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.buffer.schema) as writer:
            writer.write_table(self.buffer)
        return bytes(sink.getvalue().to_pybytes()), self.manifest.to_json()

    # -- reads ---------------------------------------------------------------------------

    def _row_groups(self, run: Run) -> list[int]:
        """The row groups of ``run`` that may hold this partition's key groups."""
        mine = self.key_groups
        if run.groups:  # a file written here: one row group per key group, in order
            return [i for i, g in enumerate(run.groups) if g in mine]
        return [
            i
            for i, _, lo, hi in footer_groups(run.uri, run.key_group)
            if lo <= mine[-1] and hi >= mine[0]
        ]

    def _unit(self, run: Run) -> Unit:
        """The cached rows of ``run`` that may hold this partition's keys (one unit)."""
        row_groups = self._row_groups(run)
        whole = bool(run.groups) and len(row_groups) == len(run.groups)
        part = "all" if whole else "rg:" + ",".join(map(str, row_groups))
        return self.cache.unit(run.uri, part, lambda: self._load(run, row_groups))

    def _load(self, run: Run, row_groups: list[int]) -> pa.Table:
        fs, path = filesystem(run.uri)
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            meta = parquet.metadata
            notes = FileNotes.read(meta.metadata)
            table = (
                parquet.read_row_groups(row_groups)
                if row_groups
                else parquet.schema_arrow.empty_table()
            )
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        starts = np.cumsum([0, *sizes])
        positions = [np.arange(starts[i], starts[i + 1], dtype=np.int64) for i in row_groups]
        if KEY_GROUP not in table.column_names and run.key_group is not None:
            groups = np.full(table.num_rows, run.key_group, np.int32)
            table = table.append_column(KEY_GROUP, pa.array(groups))
        return build_unit(
            table,
            self.config.key_columns,
            np.concatenate(positions) if positions else np.empty(0, np.int64),
            notes.hidden,
        )

    def _not_state(self, run: Run) -> np.ndarray | None:
        """A restored run's deleted rows (the restored version's deletion vector)."""
        if run.dv is None:
            return None
        key = (run.uri, json.dumps(run.dv, sort_keys=True))
        rows = _DVS.get(key)
        if rows is None:
            rows = _DVS[key] = DeletionVector.from_json(run.dv).rows()
        return rows

    def lookup(self, keys: pa.Table, key_groups: np.ndarray) -> Found:
        """The state of ``keys`` (distinct; the key columns) of ``key_groups``: the
        newest entry of each (buffered changes, then the runs in order)."""
        n = keys.num_rows
        cols = self.config.key_columns
        hashes = key_hashes(keys, cols)
        known = np.zeros(n, bool)
        in_buffer = np.zeros(n, bool)
        origin_run = np.full(n, NO_FILE, np.int32)
        origin_row = np.full(n, -1, np.int64)
        pieces: list[tuple[np.ndarray, pa.Table]] = []

        def take(asked: np.ndarray, rows: pa.Table) -> None:
            alive = ~rows[GONE].to_numpy(zero_copy_only=False)
            if alive.any():
                pieces.append((asked[alive], rows.filter(pa.array(alive))))

        if self.buffer.num_rows:
            query, here = Unit(self.buffer).find(hashes, keys, cols)
            hit = self.buffer.take(pa.array(here))
            known[query] = in_buffer[query] = True
            origin_run[query] = hit[ORIGIN_RUN].to_numpy()
            origin_row[query] = hit[ORIGIN_ROW].to_numpy()
            take(query, hit)
        for run in self.manifest.runs:
            todo = np.flatnonzero(~known)
            if not len(todo):
                break
            unit = self._unit(run)
            query, here = unit.find(hashes[todo], keys.take(pa.array(todo)), cols)
            rows = unit.table.take(pa.array(here))
            positions = rows[POS].to_numpy()
            not_state = self._not_state(run)
            if not_state is not None and len(positions):
                current = ~np.isin(positions, not_state)
                query, positions = query[current], positions[current]
                rows = rows.filter(pa.array(current))
            asked = todo[query]
            known[asked] = True
            origin_run[asked] = SPILLED if run.private else run.id
            origin_row[asked] = positions
            take(asked, rows)
        index = np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, np.int64)
        state = (
            pa.concat_tables([self._conformed(t) for _, t in pieces])
            if pieces
            else self.config.schema.empty_table()
        )
        order = np.argsort(index, kind="stable")
        return Found(
            hashes,
            index[order].astype(np.int64),
            state.take(pa.array(order)),
            origin_run,
            origin_row,
            in_buffer,
        )

    def _conformed(self, table: pa.Table) -> pa.Table:
        columns = [c for c in table.column_names if c in self.config.schema.names]
        return conform(table.select(columns), self.config.schema, self.config.defaults)

    # -- writes --------------------------------------------------------------------------

    def apply(
        self, keys: pa.Table, key_groups: np.ndarray, found: Found, new: pa.Table, keep: np.ndarray
    ) -> set[int]:
        """Buffer the changes of one call; return the key groups that changed.

        Parameters
        ----------
        keys : pyarrow.Table
            The keys the call decided on (distinct; the key columns), as given to
            :meth:`lookup`, which returned ``found``.
        key_groups : numpy.ndarray
            Their key groups.
        found : Found
        new : pyarrow.Table
            Their new state (key columns and fields), row for row with ``keys``.
        keep : numpy.ndarray
            Per key, True: ``new`` is its state; False: it has none any more.
        """
        had = np.zeros(keys.num_rows, bool)
        had[found.index] = True
        unchanged = np.zeros(keys.num_rows, bool)
        both = np.flatnonzero(keep[found.index])
        if len(both):  # a state rewritten as it was is no change
            at = found.index[both]
            same = _unchanged(
                new.take(pa.array(at)), found.state.take(pa.array(both)), new.column_names
            )
            unchanged[at[same]] = True
        upsert = keep & ~unchanged
        only_buffered = found.in_buffer & (found.origin_run == NO_FILE)
        marker = ~keep & had & ~only_buffered  # a file holds it: mark it deleted
        touched = np.flatnonzero(upsert | (~keep & had))
        if not len(touched):
            return set()
        kept = self.buffer
        if kept.num_rows:  # the keys' earlier buffered entries go
            _, here = Unit(kept).find(
                found.hashes[touched], keys.take(pa.array(touched)), self.config.key_columns
            )
            mask = np.ones(kept.num_rows, bool)
            mask[here] = False
            kept = kept.filter(pa.array(mask))
        entries = np.flatnonzero(upsert | marker)
        gone = marker[entries]
        rows = new.take(pa.array(entries))
        if gone.any():  # a marker holds the key and no state
            rows = pa.Table.from_arrays(
                [
                    rows[c]
                    if c in self.config.key_columns
                    else pc.if_else(pa.array(gone), pa.nulls(len(entries), rows[c].type), rows[c])
                    for c in rows.column_names
                ],
                schema=rows.schema,
            )
        added = _with_columns(
            rows,
            {
                KEY_GROUP: pa.array(key_groups[entries], pa.int32()),
                HASH: pa.array(found.hashes[entries], pa.uint64()),
                GONE: pa.array(gone, pa.bool_()),
                ORIGIN_RUN: pa.array(found.origin_run[entries], pa.int32()),
                ORIGIN_ROW: pa.array(found.origin_row[entries], pa.int64()),
            },
        )
        merged = pa.concat_tables([kept, added.cast(self.config.buffer_schema)])
        order = np.argsort(merged[HASH].to_numpy(), kind="stable")
        self.buffer = merged.take(pa.array(order)).combine_chunks()
        return {int(g) for g in np.unique(key_groups[touched])}

    def spill_if_full(self) -> bool:
        """Write the buffered changes to a private file when they pass
        ``keyed.writeBufferSize``; True when it did."""
        if self.buffer.nbytes <= self.config.write_buffer:
            return False
        rows, notes = self._changes()
        name = f"p{self.manifest.partition}-{uuid.uuid4().hex}.parquet"
        uri = join(self.config.private_uri, name)
        groups, _ = self._write(uri, rows, notes, None)
        run = self.manifest.add_run(uri=uri, rel=None, groups=groups, private=True)
        self.manifest.runs.insert(0, run)
        log.info(
            "keyed operator %s: partition %d spilled %d buffered change(s) (%d bytes, "
            "keyed.writeBufferSize %d) to %s",
            self.config.operator,
            self.manifest.partition,
            rows.num_rows,
            self.buffer.nbytes,
            self.config.write_buffer,
            uri,
        )
        self.buffer = self.config.buffer_schema.empty_table()
        return True

    def _changes(self) -> tuple[pa.Table, FileNotes]:
        """The buffered changes as entries (:attr:`LiveConfig.merge_schema`) and the
        rows of table files they replace."""
        by_id = {r.id: r for r in self.manifest.runs}
        runs = self.buffer[ORIGIN_RUN].to_numpy()
        rows = self.buffer[ORIGIN_ROW].to_numpy()
        deletes = {}
        for run_id in np.unique(runs[runs >= 0]):
            run = by_id.get(int(run_id))
            if run is not None and run.rel is not None:
                deletes[run.rel] = np.unique(rows[runs == run_id])
        entries = self.buffer.drop_columns([ORIGIN_RUN, ORIGIN_ROW])
        return entries, FileNotes(np.empty(0, np.int64), deletes, (), ())

    def _run_entries(self, run: Run) -> pa.Table:
        """Every entry of this partition's key groups in ``run`` (merge schema)."""
        mine = self.key_groups
        not_state = self._not_state(run)
        rows = self._unit(run).table
        groups = rows[KEY_GROUP].to_numpy()
        keep = (groups >= mine.start) & (groups < mine.stop)
        if not_state is not None:
            keep &= ~np.isin(rows[POS].to_numpy(), not_state)
        rows = rows.filter(pa.array(keep))
        extra = {KEY_GROUP: rows[KEY_GROUP].cast(pa.int32()), HASH: rows[HASH], GONE: rows[GONE]}
        return _with_columns(self._conformed(rows), extra)

    def _write(
        self, uri: str, entries: pa.Table, notes: FileNotes, checkpoint_id: int | None
    ) -> tuple[list[int], int]:
        """Write ``entries`` (merge schema) as a state file sorted by key group, one row
        group per key group, ``notes`` and its marker rows in its footer, and cache each
        row group (write-through); return the key group of each row group and the size."""
        order = np.lexsort((entries[HASH].to_numpy(), entries[KEY_GROUP].to_numpy()))
        entries = entries.take(pa.array(order))
        gone = entries[GONE].to_numpy(zero_copy_only=False)
        table = _with_columns(
            entries.select([*self.config.schema.names, KEY_GROUP]),
            {CHECKPOINT_ID: pa.array(np.full(entries.num_rows, checkpoint_id or 0), pa.int64())},
        ).cast(self.config.file_schema)
        groups, starts = np.unique(entries[KEY_GROUP].to_numpy(), return_index=True)
        ends = np.append(starts[1:], entries.num_rows)[: len(groups)]
        notes = FileNotes(
            np.flatnonzero(gone).astype(np.int64),
            notes.deletes,
            notes.replaces,
            tuple(int(g) for g in groups),
        )
        dictionary = [n for n in table.column_names if n not in self.config.key_columns]
        sink = pa.BufferOutputStream()
        schema = table.schema.with_metadata(notes.metadata())
        with pq.ParquetWriter(sink, schema, compression="zstd", use_dictionary=dictionary) as w:
            for start, end in zip(starts, ends, strict=True):
                w.write_table(table.slice(start, end - start), row_group_size=int(end - start))
        data = sink.getvalue()
        fs, path = filesystem(uri)
        make_parent(fs, path)
        with fs.open_output_stream(path) as out:
            out.write(data)
        unit = _with_columns(
            table,
            {
                HASH: entries[HASH],
                POS: pa.array(np.arange(entries.num_rows), pa.int64()),
                GONE: entries[GONE],
            },
        )
        sort = np.argsort(unit[HASH].to_numpy(), kind="stable")
        self.cache.put(uri, "all", unit.take(pa.array(sort)))
        return [int(g) for g in groups], int(data.size)

    def flush(self, checkpoint_id: int, base: int | None) -> Flushed:
        """Write what changed since the last cut as one file of the ``state`` table
        (the whole state after a restore or past ``keyed.maxRuns`` files) and return
        what the checkpoint must hold.

        Parameters
        ----------
        checkpoint_id : int
            The checkpoint cut in this batch.
        base : int or None
            The latest completed checkpoint when the cut was planned: the files of cuts
            up to it are committed.
        """
        manifest = self.manifest
        manifest.pending = [p for p in manifest.pending if base is None or p.first_cut > base]
        private = [r for r in manifest.runs if r.private]
        table_runs = [r for r in manifest.runs if not r.private]
        full = manifest.full_next or len(table_runs) >= self.config.max_runs
        written = None
        if full:
            entries = newest_first(
                [self._changes()[0], *(self._run_entries(r) for r in manifest.runs)],
                self.config.key_columns,
            )
            entries = entries.filter(pc.invert(entries[GONE]))
            notes = FileNotes(np.empty(0, np.int64), {}, tuple(self.key_groups), ())
            written, run = self._table_file(entries, notes, checkpoint_id)
            manifest.runs = [run]
        elif self.buffer.num_rows or private:
            entries, notes = self._changes()
            deletes = [notes.deletes]
            for spilled in private:
                deletes.append(read_notes(spilled.uri)[0].deletes)
            entries = newest_first(
                [entries, *(self._run_entries(r) for r in private)], self.config.key_columns
            )
            paths = {p for d in deletes for p in d}
            merged = {p: union(*(d[p] for d in deletes if p in d)) for p in paths}
            written, run = self._table_file(
                entries, FileNotes(notes.hidden, merged, (), ()), checkpoint_id
            )
            manifest.runs = [run, *table_runs]
        if written is not None:
            manifest.pending.append(written)
        manifest.full_next = False
        self.buffer = self.config.buffer_schema.empty_table()
        changed = {g for p in manifest.pending for g in p.groups}
        return Flushed(list(manifest.pending), changed, written)

    def _table_file(
        self, entries: pa.Table, notes: FileNotes, checkpoint_id: int
    ) -> tuple[Pending, Run]:
        """Write ``entries`` as a new file of the ``state`` table, written at the cut
        of ``checkpoint_id``."""
        partition = self.manifest.partition
        name = f"p{partition}-c{checkpoint_id}-{uuid.uuid4().hex}.parquet"
        rel = f"operator={self.config.operator}/{name}"
        uri = join(self.config.table_uri, rel)
        groups, size = self._write(uri, entries, notes, checkpoint_id)
        counts = np.bincount(entries[KEY_GROUP].to_numpy(), minlength=1)
        lo, hi = (min(groups), max(groups)) if groups else (0, 0)
        stats = {
            "numRecords": entries.num_rows,
            "minValues": {KEY_GROUP: lo, CHECKPOINT_ID: checkpoint_id},
            "maxValues": {KEY_GROUP: hi, CHECKPOINT_ID: checkpoint_id},
            "nullCount": {KEY_GROUP: 0, CHECKPOINT_ID: 0},
        }
        pending = Pending(
            rel=rel,
            size=size,
            rows=entries.num_rows,
            modification_time=wall_time.now_ms(),
            stats=json.dumps(stats, separators=(",", ":")),
            rows_by_group={str(g): int(counts[g]) for g in groups},
            first_cut=checkpoint_id,
        )
        run = self.manifest.add_run(uri=uri, rel=rel, groups=groups)
        return pending, run
