"""The executor's local copy of state files, indexed by key: the keyed operator's reads.

The files of the ``state`` table (and a live run's private files) are the keyed state;
local disk only caches them, as in Flink's disaggregated state (ForSt): a file never
changes once written, so a cached copy named after it is valid on any executor and needs
no invalidation. The row groups of a file that hold a partition's key groups (one key
group per row group in the files written here) are cached as one *unit*: an Arrow IPC
file sorted by a 64-bit hash of the key (:func:`key_hashes`), with each row's position
in the source file (``__pos``, what a deletion vector names) and whether the row is a
deleted key's marker (``__gone``).
Units are memory-mapped: a lookup of the keys of a batch is a binary search over the
sorted hashes and a ``take`` of the rows found, so it reads the pages it touches, not
the file, and the page cache (not the Python worker's heap) holds what is hot. State
larger than memory stays on disk.

A unit is built on first use (the file's row group read once on this machine) or when
the operator writes the file (write-through: its own new files are cached as they are
written, on a background thread of the process so that a cut does not wait for the
copy; until it is on disk, the process serves the unit from memory). The cache folder
holds at most ``keyed.localCacheSize`` bytes; the least recently opened units go first.
Two Python workers on one machine share it (a unit is written to a temporary name and
renamed).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from barriered.errors import KeyedStateError
from barriered.statestore.deletion_vectors import contains

log = logging.getLogger(__name__)

#: Columns a unit adds to the file's: the key hash, the row's position in the file, and
#: whether it marks a deleted key.
HASH, POS, GONE = "__hash", "__pos", "__gone"
#: Bump when the unit format or the hash changes: older units are then never found.
FORMAT = "1"
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
_NULL = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, vectorized (uint64 in, uint64 out)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        out: np.ndarray = x ^ (x >> np.uint64(31))
        return out


def _column_hash(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A 64-bit hash per value of one key column (equal values, equal hashes)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = array.type
    nulls = array.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_dictionary(kind):
        array = array.cast(kind.value_type)
        kind = array.type
    if pa.types.is_floating(kind):
        values = array.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        values = np.where(values == 0.0, 0.0, values)  # -0.0 == 0.0
        values = np.where(np.isnan(values), np.nan, values)
        out = _mix(values.view(np.uint64).copy())
    elif pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_temporal(kind):
        if pa.types.is_temporal(kind):
            array = array.cast(pa.int64()) if kind.bit_width == 64 else array.cast(pa.int32())
        values = array.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        out = _mix(values.astype(np.int64).view(np.uint64))
    else:  # strings, binary, decimals: pandas' SipHash of the (text) values
        if pa.types.is_decimal(kind):
            array = array.cast(pa.string())
        objects = np.asarray(array.to_numpy(zero_copy_only=False), dtype=object)
        objects[nulls] = ""
        out = np.asarray(pd.util.hash_array(objects, categorize=False), np.uint64)
    return np.where(nulls, _NULL, out)


def key_hashes(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """A 64-bit hash per row of ``table``'s key ``columns`` (uint64).

    Equal keys (as values of their Arrow types) have equal hashes whatever the chunking;
    different keys may collide, so a match is confirmed on the keys themselves.
    """
    out = np.zeros(table.num_rows, np.uint64)
    with np.errstate(over="ignore"):
        for name in columns:
            out = _mix(out * np.uint64(31) + _column_hash(table[name]))
    return out


def keys_equal(left: pa.Table, right: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Per row, whether ``left`` and ``right`` hold the same key (nulls equal nulls)."""
    same = np.ones(left.num_rows, bool)
    for name in columns:
        a, b = left[name], right[name]
        if a.type != b.type:
            a = a.cast(b.type)
        equal = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b)).to_numpy(zero_copy_only=False)
        same &= equal | both_null
    return same


@dataclass(frozen=True)
class Unit:
    """One cached row group: rows sorted by key hash, memory-mapped."""

    table: pa.Table  # the file's columns + HASH, POS, GONE

    @property
    def hashes(self) -> np.ndarray:
        """The sorted key hashes (a view of the mapped file)."""
        return self.table[HASH].chunk(0).to_numpy() if self.table.num_rows else _EMPTY_U64

    def find(
        self, hashes: np.ndarray, keys: pa.Table, columns: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The keys of ``keys`` (their ``hashes``) held here: positions in ``keys`` and
        in this unit, pairwise (a key is held at most once in a unit)."""
        mine = self.hashes
        if not len(mine) or not len(hashes):
            return _EMPTY_I64, _EMPTY_I64
        order = np.argsort(hashes)  # a sorted search touches the pages in order
        wanted = hashes[order]
        lo = np.minimum(np.searchsorted(mine, wanted, "left"), len(mine) - 1)
        hit = mine[lo] == wanted
        after = np.minimum(lo + 1, len(mine) - 1)
        if not (hit & (after != lo) & (mine[after] == wanted)).any():
            query, here = order[hit], lo[hit]
        else:  # equal hashes in this unit (a collision): every pair is a candidate
            hi = np.searchsorted(mine, wanted, "right")
            counts = np.where(hit, hi - lo, 0)
            query = np.repeat(order, counts)
            here = np.concatenate(
                [np.arange(a, a + c) for a, c in zip(lo, counts, strict=True) if c]
            )
        if not len(query):
            return _EMPTY_I64, _EMPTY_I64
        same = keys_equal(keys.take(query), self.table.take(here), columns)
        return query[same].astype(np.int64), here[same].astype(np.int64)


_EMPTY_U64 = np.empty(0, np.uint64)
_EMPTY_I64 = np.empty(0, np.int64)


def build_unit(
    table: pa.Table,
    columns: Sequence[str],
    positions: np.ndarray | None = None,
    gone: np.ndarray | None = None,
) -> pa.Table:
    """The unit table of ``table`` (rows of a file at ``positions`` in it, default from
    0; ``gone``: positions of deleted keys' marker rows, sorted)."""
    hashes = key_hashes(table, columns)
    order = np.argsort(hashes)
    if positions is None:
        positions = np.arange(table.num_rows, dtype=np.int64)
    marked = contains(gone, positions) if gone is not None and len(gone) else None
    out = table.take(pa.array(order))
    out = out.append_column(HASH, pa.array(hashes[order], pa.uint64()))
    out = out.append_column(POS, pa.array(positions[order], pa.int64()))
    flags = np.zeros(table.num_rows, bool) if marked is None else marked[order]
    return out.append_column(GONE, pa.array(flags, pa.bool_()))


def default_folder() -> str:
    """The cache folder: under Spark's local directories on an executor
    (``SPARK_LOCAL_DIRS``), else the system's temporary folder."""
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0]
    return os.path.join(local or tempfile.gettempdir(), f"barriered-state-cache-{os.getuid()}")


class StateCache:
    """The local units of one machine, bounded in bytes.

    Parameters
    ----------
    folder : str
        Where units are kept (shared by the machine's Python workers).
    budget : int
        Bytes the folder may hold; the least recently opened units are deleted beyond.
    setting : str
        The setting of ``budget``, named when one unit alone does not fit.
    """

    def __init__(self, folder: str, budget: int, setting: str = "the cache's budget") -> None:
        self.folder = folder
        self.budget = budget
        self.setting = setting
        self._open: OrderedDict[str, Unit] = OrderedDict()
        self._bytes_written = 0
        self._writing: dict[str, tuple[pa.Table, Future[None]]] = {}
        self._lock = threading.Lock()
        self._writer: ThreadPoolExecutor | None = None

    def _path(self, source: str, part: str) -> str:
        digest = hashlib.sha1(f"{FORMAT}|{source}|{part}".encode()).hexdigest()
        return os.path.join(self.folder, digest[:2], f"{digest}.arrow")

    def unit(self, source: str, part: str, load: Callable[[], pa.Table]) -> Unit:
        """The unit of ``part`` of file ``source`` (its row groups, named), built from
        ``load()`` (a unit table, :func:`build_unit`) when this machine has none yet."""
        path = self._path(source, part)
        unit = self._open.get(path)
        if unit is not None:
            self._open.move_to_end(path)
            return unit
        with self._lock:
            writing = self._writing.get(path)
        if writing is not None:
            return Unit(writing[0].combine_chunks())
        try:
            unit = self._map(path)
        except FileNotFoundError:
            began = time.perf_counter()
            self._write(path, load())
            unit = self._map(path)
            log.debug(
                "state cache: %s (%s) cached (%d rows, %.0f ms)",
                source,
                part,
                unit.table.num_rows,
                (time.perf_counter() - began) * 1000,
            )
        self._open[path] = unit
        if len(self._open) > 4096:
            self._open.popitem(last=False)
        return unit

    def has(self, source: str, part: str) -> bool:
        """Whether this machine has ``part`` of ``source`` cached."""
        path = self._path(source, part)
        with self._lock:
            if path in self._writing:
                return True
        return path in self._open or os.path.exists(path)

    def put(self, source: str, part: str, unit_table: pa.Table) -> None:
        """Cache ``part`` of a file this process just wrote (write-through), on the
        cache's background thread; until then :meth:`unit` serves it from memory.

        Raises
        ------
        KeyedStateError
            When the unit alone is larger than the budget (nothing is written).
        """
        self._check_fits(unit_table)
        path = self._path(source, part)
        with self._lock:
            if self._writer is None:  # made in the process that writes (Spark forks workers)
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="barriered-cache")
            future = self._writer.submit(self._write_through, path, unit_table)
            self._writing[path] = (unit_table, future)

    def flush(self) -> None:
        """Wait until every unit :meth:`put` handed over is on disk."""
        with self._lock:
            pending = [future for _, future in self._writing.values()]
        for future in pending:
            future.result()

    def _write_through(self, path: str, table: pa.Table) -> None:
        try:
            self._write(path, table)
        except OSError as exc:  # a full or lost disk: the unit is built again on use
            log.warning("state cache %s: a unit was not written (%s)", self.folder, exc)
        finally:
            with self._lock:
                self._writing.pop(path, None)

    def _map(self, path: str) -> Unit:
        source = pa.memory_map(path, "r")
        table = pa.ipc.open_file(source).read_all()
        os.utime(path)  # opened: the last to go
        return Unit(table.combine_chunks() if table.num_rows else table)

    def _check_fits(self, table: pa.Table) -> None:
        if table.nbytes > self.budget:
            raise KeyedStateError(
                f"a state file of a keyed partition needs {table.nbytes:,} bytes of local "
                f"cache in {self.folder!r}, more than {self.setting}={self.budget:,}: raise "
                "it (or spread the state over more shuffle partitions, with a restore into "
                "a new checkpoint location); nothing was written"
            )

    def _write(self, path: str, table: pa.Table) -> None:
        self._check_fits(table)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=max(table.num_rows, 1))
        os.replace(tmp, path)
        self._bytes_written += os.path.getsize(path)
        if self._bytes_written > self.budget // 16:
            self._bytes_written = 0
            self.evict()

    def evict(self) -> int:
        """Delete the least recently opened units beyond the budget; return how many."""
        entries = []
        for root, _, names in os.walk(self.folder):
            for name in names:
                full = os.path.join(root, name)
                try:
                    info = os.stat(full)
                except FileNotFoundError:
                    continue
                entries.append((info.st_mtime, info.st_size, full))
        total = sum(size for _, size, _ in entries)
        deleted = 0
        for _, size, full in sorted(entries):
            if total <= self.budget:
                break
            with contextlib.suppress(FileNotFoundError):
                os.remove(full)  # a worker that mapped it keeps reading its pages
            self._open.pop(full, None)
            total -= size
            deleted += 1
        if deleted:
            log.info(
                "state cache %s: %d unit(s) evicted to stay within %d bytes",
                self.folder,
                deleted,
                self.budget,
            )
        return deleted


_CACHES: dict[tuple[str, int], StateCache] = {}


def cache(folder: str | None, budget: int, setting: str = "the cache's budget") -> StateCache:
    """This process's cache of ``folder`` (default: :func:`default_folder`)."""
    key = (folder or default_folder(), budget)
    found = _CACHES.get(key)
    if found is None:
        found = _CACHES[key] = StateCache(*key, setting)
    return found
