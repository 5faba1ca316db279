"""The files of the keyed live state: what one holds, and how it is read and written in
chunks, so that neither a lookup nor a compaction ever holds a partition's whole state.

A state file (of the ``state`` table, or a partition's private spill) holds consecutive
ranges of key groups, each a *chunk* of at most about :data:`CHUNK_ROWS` rows (more when
a single key group holds more) in the order of the key hash, written as Parquet row
groups of :data:`ROW_GROUP_ROWS` rows whose first key hashes the footer keeps
(``barriered.hashes``): a lookup of a few keys in a chunk this machine has not cached
reads only the row groups their hashes fall in (:func:`row_groups_of`, :func:`load_rows`),
so the first batch after a restore costs what it touches, not the state. Its footer
says (:class:`FileNotes`) which of its rows no version holds (``barriered.hidden``:
deleted keys' markers), which rows of older table files it replaces
(``barriered.deletes``, by path), which key groups it holds whole
(``barriered.replaces``), which older table files it merged and its partition no longer
reads (``barriered.absorbs``: their rows it deletes are in ``barriered.deletes``), which
key groups it holds (``barriered.groups``) and its *chunks* (``barriered.chunks``: row
group ranges). A chunk is the unit of the machine's
local cache (:mod:`barriered.statestore.state_cache`): its rows sorted by key hash,
memory-mapped, named after the file and its row groups, so a restore into other
partitions reuses the chunks of the key groups it owns. A file of another writer (an
earlier layout's, one row group per key group; a bootstrap's) is chunked from its footer:
consecutive row groups of at most :data:`CHUNK_ROWS` rows.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from barriered.files.fileio import filesystem, make_parent
from barriered.statestore.deletion_vectors import deserialize, serialize, z85_decode, z85_encode
from barriered.statestore.state_cache import GONE, HASH, POS, StateCache, Unit, build_unit

log = logging.getLogger(__name__)

KEY_GROUP = "key_group"
CHECKPOINT_ID = "checkpoint_id"
#: The most rows of one chunk (several when a single key group holds more).
CHUNK_ROWS = 2_000_000
#: Rows of one Parquet row group of a chunk: what a cold lookup of one key reads.
ROW_GROUP_ROWS = 8192
#: Footer metadata of a file written here.
META_HIDDEN = b"barriered.hidden"
META_DELETES = b"barriered.deletes"
META_REPLACES = b"barriered.replaces"
META_GROUPS = b"barriered.groups"
META_CHUNKS = b"barriered.chunks"
META_ABSORBS = b"barriered.absorbs"
META_HASHES = b"barriered.hashes"


def encode_rows(rows: np.ndarray) -> list[Any]:
    """Row indices as ``[size, z85]`` (the bytes of a deletion vector)."""
    data = serialize(np.asarray(rows, np.int64))
    return [len(data), z85_encode(data)]


def decode_rows(encoded: Sequence[Any]) -> np.ndarray:
    """The row indices of :func:`encode_rows`."""
    return deserialize(z85_decode(str(encoded[1]), int(encoded[0])))


def _encode_hashes(hashes: np.ndarray) -> list[Any]:
    data = np.asarray(hashes, "<u8").tobytes()
    return [len(data), z85_encode(data)]


def _decode_hashes(encoded: Sequence[Any]) -> np.ndarray:
    return np.frombuffer(z85_decode(str(encoded[1]), int(encoded[0])), "<u8").astype(np.uint64)


@dataclass(frozen=True)
class FileNotes:
    """What a file written here says in its footer."""

    hidden: np.ndarray  # its own rows no version holds (deleted keys' markers)
    deletes: dict[str, np.ndarray]  # rows of older table files it replaces, by path
    replaces: tuple[int, ...]  # key groups whose every older row it replaces
    groups: tuple[int, ...] = ()  # the key groups it holds rows of
    chunks: tuple[tuple[int, int], ...] = ()  # row group ranges [first, end)
    absorbs: tuple[str, ...] = ()  # older table files merged into it, no longer read
    hashes: np.ndarray | None = None  # the first key hash of each row group

    def metadata(self) -> dict[bytes, bytes]:
        """The footer's key-value metadata."""
        deletes = {p: encode_rows(r) for p, r in self.deletes.items()}
        return {
            META_HIDDEN: json.dumps(encode_rows(self.hidden)).encode(),
            META_DELETES: json.dumps(deletes).encode(),
            META_REPLACES: json.dumps(list(self.replaces)).encode(),
            META_GROUPS: json.dumps(list(self.groups)).encode(),
            META_CHUNKS: json.dumps([list(c) for c in self.chunks]).encode(),
            META_ABSORBS: json.dumps(list(self.absorbs)).encode(),
            **(
                {}
                if self.hashes is None
                else {META_HASHES: json.dumps(_encode_hashes(self.hashes)).encode()}
            ),
        }

    @classmethod
    def read(cls, metadata: Mapping[bytes, bytes] | None, deletes: bool = True) -> FileNotes:
        """Parse a footer's metadata (a file of another writer says nothing); without the
        rows of older files it replaces when not ``deletes`` (a reader's footer: they are
        the commit's, and as large as the changes)."""
        meta = metadata or {}

        def get(key: bytes, default: Any) -> Any:
            return json.loads(meta[key]) if key in meta else default

        hidden = get(META_HIDDEN, None)
        hashes = get(META_HASHES, None)
        return cls(
            decode_rows(hidden) if hidden else np.empty(0, np.int64),
            {p: decode_rows(r) for p, r in (get(META_DELETES, {}) if deletes else {}).items()},
            tuple(int(g) for g in get(META_REPLACES, [])),
            tuple(int(g) for g in get(META_GROUPS, [])),
            tuple((int(a), int(b)) for a, b in get(META_CHUNKS, [])),
            tuple(str(p) for p in get(META_ABSORBS, [])),
            None if hashes is None else _decode_hashes(hashes),
        )


@dataclass(frozen=True)
class Chunk:
    """Consecutive row groups of a file, the unit of the local cache."""

    first: int  # the first row group
    end: int  # one past the last
    low: int  # the key groups it may hold
    high: int

    @property
    def part(self) -> str:
        """Its name in the local cache."""
        return f"rg:{self.first}-{self.end}"


@dataclass(frozen=True)
class FileInfo:
    """A state file's footer, as its readers need it."""

    starts: np.ndarray  # the first row of each row group, and the row count last
    chunks: tuple[Chunk, ...]
    hidden: np.ndarray
    key_group: int | None  # an earlier layout's file: its one key group, no column
    hashes: np.ndarray | None = None  # the first key hash of each row group (None: unknown)


def chunk_ranges(rows: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive row groups (their row counts ``rows``) of at most :data:`CHUNK_ROWS`
    rows, each at least one row group."""
    ranges, first, total = [], 0, 0
    for i, n in enumerate(rows):
        if i > first and total + n > CHUNK_ROWS:
            ranges.append((first, i))
            first, total = i, 0
        total += n
    if len(rows):
        ranges.append((first, len(rows)))
    return ranges


_INFOS: dict[str, FileInfo] = {}


def file_info(uri: str, key_group: int | None = None) -> FileInfo:
    """The footer of the state file at ``uri`` (``key_group``: an earlier layout's file,
    whose one key group is in its path); read once per process (files never change)."""
    found = _INFOS.get(uri)
    if found is not None:
        return found
    fs, path = filesystem(uri)
    with fs.open_input_file(path) as f:
        meta = pq.ParquetFile(f).metadata
    leaves = [meta.schema.column(j).path for j in range(meta.num_columns)]
    column = leaves.index(KEY_GROUP) if KEY_GROUP in leaves else None
    sizes, bounds = [], []
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        sizes.append(rg.num_rows)
        stats = rg.column(column).statistics if column is not None else None
        if key_group is not None:
            bounds.append((key_group, key_group))
        elif stats is not None and stats.has_min_max:
            bounds.append((int(stats.min), int(stats.max)))
        else:
            bounds.append((0, 1 << 30))
    notes = FileNotes.read(meta.metadata, deletes=False)
    ranges = notes.chunks or tuple(chunk_ranges(sizes))
    chunks = tuple(
        Chunk(a, b, min(lo for lo, _ in bounds[a:b]), max(hi for _, hi in bounds[a:b]))
        for a, b in ranges
    )
    hashes = notes.hashes if notes.hashes is not None and len(notes.hashes) == len(sizes) else None
    found = _INFOS[uri] = FileInfo(
        np.cumsum([0, *sizes]).astype(np.int64), chunks, notes.hidden, key_group, hashes
    )
    _remember_footer(uri, meta)
    return found


#: The parsed footers of the files read last (a large file's lists every row group).
_FOOTERS: OrderedDict[str, pq.FileMetaData] = OrderedDict()
_KEEP_FOOTERS = 16


def _remember_footer(uri: str, meta: pq.FileMetaData) -> None:
    _FOOTERS[uri] = meta
    _FOOTERS.move_to_end(uri)
    while len(_FOOTERS) > _KEEP_FOOTERS:
        _FOOTERS.popitem(last=False)


def read_notes(uri: str) -> FileNotes:
    """The footer notes of a state file."""
    fs, path = filesystem(uri)
    with fs.open_input_file(path) as f:
        return FileNotes.read(pq.ParquetFile(f).metadata.metadata)


def _exact(kind: pa.DataType) -> bool:
    """Whether values of ``kind`` are equal exactly when Arrow's ``is_in`` says so (no
    -0.0 / NaN or decimal-scale subtleties): a key column a lookup may prefilter on."""
    t = pa.types
    exact = (t.is_string, t.is_large_string, t.is_binary, t.is_integer, t.is_boolean, t.is_temporal)
    return any(test(kind) for test in exact)


def candidates(table: pa.Table, keys: pa.Table, key_columns: Sequence[str]) -> np.ndarray | None:
    """Per row of ``table``, whether each of its key columns holds a value of that column
    in ``keys`` (a superset of the rows holding one of ``keys``); None when a key
    column's type is not compared exactly (then every row is a candidate)."""
    mask = None
    for name in key_columns:
        column, wanted = table[name], keys[name]
        if not _exact(column.type) or column.type != wanted.type:
            return None
        hit = pc.is_in(column, value_set=wanted.combine_chunks(), skip_nulls=False)
        mask = hit if mask is None else pc.and_(mask, hit)
    return None if mask is None else mask.to_numpy(zero_copy_only=False)


def load_rows(
    uri: str,
    info: FileInfo,
    row_groups: Sequence[int],
    key_columns: Sequence[str],
    keys: pa.Table | None = None,
) -> pa.Table:
    """The unit table (:func:`~barriered.statestore.state_cache.build_unit`) of the row
    groups ``row_groups`` (ascending) of a state file: their rows, each with its position
    in the file, its key group and whether it marks a deleted key; only the rows that may
    hold one of ``keys`` (:func:`candidates`) when given: a lookup's, not cached."""
    fs, path = filesystem(uri)
    with fs.open_input_file(path) as f:
        parquet = pq.ParquetFile(f, metadata=_FOOTERS.get(uri))
        _remember_footer(uri, parquet.metadata)
        table = parquet.read_row_groups(list(row_groups))
    if KEY_GROUP not in table.column_names and info.key_group is not None:
        table = table.append_column(
            KEY_GROUP, pa.array(np.full(table.num_rows, info.key_group, np.int32))
        )
    starts, ends = info.starts[list(row_groups)], info.starts[[g + 1 for g in row_groups]]
    positions = np.concatenate(
        [np.arange(a, b, dtype=np.int64) for a, b in zip(starts, ends, strict=True)]
        or [np.empty(0, np.int64)]
    )
    mask = None if keys is None else candidates(table, keys, key_columns)
    if mask is not None:  # hash the few rows that may hold the keys, not the row groups
        table, positions = table.filter(pa.array(mask)), positions[mask]
    return build_unit(table, key_columns, positions, info.hidden)


def load_chunk(uri: str, info: FileInfo, chunk: Chunk, key_columns: Sequence[str]) -> pa.Table:
    """The unit table of one chunk (all its row groups)."""
    return load_rows(uri, info, range(chunk.first, chunk.end), key_columns)


def row_groups_of(info: FileInfo, chunk: Chunk, hashes: np.ndarray) -> np.ndarray:
    """The row groups of ``chunk`` that may hold keys of key hashes ``hashes`` (the file
    knows each row group's first hash; a chunk's rows are in hash order): ascending."""
    assert info.hashes is not None
    firsts = info.hashes[chunk.first : chunk.end]
    at = np.maximum(np.searchsorted(firsts, hashes, "right") - 1, 0)
    # keys of one hash (a collision) may run on from the row group before
    before = at[(at > 0) & (firsts[at] == hashes)] - 1
    return np.unique(np.concatenate([at, before])) + chunk.first


def overlapping(info: FileInfo, low: int, high: int) -> list[Chunk]:
    """The chunks of a file that may hold key groups ``low..high``."""
    return [c for c in info.chunks if c.low <= high and c.high >= low]


def chunk_units(
    cache: StateCache, uri: str, info: FileInfo, low: int, high: int, key_columns: Sequence[str]
) -> list[Unit]:
    """The cached unit of each chunk of the file at ``uri`` that may hold key groups
    ``low..high`` (built from the file on this machine's first use)."""

    def load(chunk: Chunk) -> Callable[[], pa.Table]:
        return lambda: load_chunk(uri, info, chunk, key_columns)

    return [cache.unit(uri, c.part, load(c)) for c in overlapping(info, low, high)]


#: (file, chunk) -> row groups read row group by row group in this process.
_SPARSE: dict[tuple[str, str], int] = {}


def lookup_unit(
    cache: StateCache,
    uri: str,
    info: FileInfo,
    chunk: Chunk,
    key_columns: Sequence[str],
    hashes: np.ndarray,
    keys: pa.Table,
) -> Unit:
    """Rows of ``chunk`` holding every key of ``keys`` (their key hashes ``hashes``) that
    it holds: its cached unit when this machine has one; else, for a file that knows its
    row groups' first hashes, the rows of the row groups those hashes fall in that may
    hold them, read now and not cached, until this process has read as many row groups
    of the chunk so as it has (then the chunk is cached whole, as for a file that does
    not know them). Reading costs little next to hashing: a sparse read hashes only the
    rows that may hold the keys, a cached chunk every row once, so a restore's first
    batch, which touches a chunk once, hashes its keys' rows, not its chunks'."""
    if info.hashes is not None and not cache.has(uri, chunk.part):
        groups = row_groups_of(info, chunk, hashes)
        read = _SPARSE.get((uri, chunk.part), 0) + len(groups)
        if read <= chunk.end - chunk.first:
            _SPARSE[(uri, chunk.part)] = read
            return Unit(load_rows(uri, info, groups.tolist(), key_columns, keys))
    return cache.unit(uri, chunk.part, lambda: load_chunk(uri, info, chunk, key_columns))


class FileWriter:
    """Writes one state file a key-group range at a time, and caches each range as a
    chunk (write-through): at most one range's rows are held at a time.

    Parameters
    ----------
    uri : str
        The file.
    schema : pyarrow.Schema
        Its columns (key columns, state fields, ``key_group``, ``checkpoint_id``).
    key_columns : sequence of str
        The key columns (written without a dictionary: they never repeat).
    checkpoint_id : int
        The ``checkpoint_id`` of its rows (0 for a private spill).
    cache : StateCache
        The machine's cache.
    """

    def __init__(
        self,
        uri: str,
        schema: pa.Schema,
        key_columns: Sequence[str],
        checkpoint_id: int,
        cache: StateCache,
    ) -> None:
        self.uri = uri
        self.schema = schema
        self.key_columns = tuple(key_columns)
        self.checkpoint_id = checkpoint_id
        self.cache = cache
        self.sink = pa.BufferOutputStream()  # one PUT on an object store
        dictionary = [n for n in schema.names if n not in self.key_columns]
        # Statistics of the key group and checkpoint id only: readers prune by them; a
        # chunk's rows are in key-hash order, so other columns' bounds prune nothing.
        self.writer = pq.ParquetWriter(
            self.sink,
            schema,
            compression="zstd",
            use_dictionary=dictionary,
            write_statistics=[KEY_GROUP, CHECKPOINT_ID],
        )
        self.rows = 0
        self.groups: list[int] = []
        self.rows_by_group: dict[int, int] = {}
        self.chunks: list[tuple[int, int]] = []
        self.hidden: list[np.ndarray] = []
        self.hashes: list[np.ndarray] = []

    def add(self, entries: pa.Table) -> None:
        """Write ``entries`` (key columns, state fields, ``key_group``, :data:`HASH`,
        :data:`GONE`; sorted by :data:`HASH`; key groups above those written before) as
        one chunk, in their order, in row groups of :data:`ROW_GROUP_ROWS` rows: the
        cached unit is the file's rows as written."""
        if not entries.num_rows:
            return
        n = entries.num_rows
        ids = pa.array(np.full(n, self.checkpoint_id), pa.int64())
        columns = [c for c in self.schema.names if c != CHECKPOINT_ID]
        table = entries.select(columns).append_column(CHECKPOINT_ID, ids).cast(self.schema)
        self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        groups = entries[KEY_GROUP].to_numpy()
        for group, rows in zip(*np.unique(groups, return_counts=True), strict=True):
            self.groups.append(int(group))
            self.rows_by_group[int(group)] = int(rows)
        positions = self.rows + np.arange(n, dtype=np.int64)
        self.hidden.append(positions[entries[GONE].to_numpy(zero_copy_only=False)])
        unit = table.append_column(HASH, entries[HASH])
        unit = unit.append_column(POS, pa.array(positions, pa.int64()))
        unit = unit.append_column(GONE, entries[GONE])
        first = self.chunks[-1][1] if self.chunks else 0
        chunk = (first, first + -(-n // ROW_GROUP_ROWS))
        self.cache.put(self.uri, Chunk(*chunk, 0, 0).part, unit)
        self.chunks.append(chunk)
        self.hashes.append(entries[HASH].to_numpy()[::ROW_GROUP_ROWS])
        self.rows += n

    def close(
        self,
        deletes: Mapping[str, np.ndarray],
        replaces: Sequence[int],
        absorbs: Sequence[str] = (),
    ) -> tuple[int, FileNotes]:
        """Finish the file (its notes in the footer), write it; return its size and
        notes."""
        hidden = np.sort(np.concatenate(self.hidden)) if self.hidden else np.empty(0, np.int64)
        notes = FileNotes(
            hidden,
            dict(deletes),
            tuple(replaces),
            tuple(self.groups),
            tuple(self.chunks),
            tuple(absorbs),
            np.concatenate(self.hashes) if self.hashes else np.empty(0, np.uint64),
        )
        self.writer.add_key_value_metadata(
            {k.decode(): v.decode() for k, v in notes.metadata().items()}
        )
        self.writer.close()
        data = self.sink.getvalue()
        fs, path = filesystem(self.uri)
        make_parent(fs, path)
        with fs.open_output_stream(path) as out:
            out.write(data)
        return int(data.size), notes
