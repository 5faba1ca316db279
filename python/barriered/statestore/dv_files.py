"""Deletion vector files: where a commit's large deletion vectors go, and how every
reader gets a deletion vector's rows.

A deletion vector inline in the log (:mod:`barriered.statestore.deletion_vectors`,
storage type ``i``) is copied into every later commit that deletes one more row of its
file, and replayed by every reader of the log: a bulk update's vector of a million rows
is megabytes of Z85 text per commit. So, as Delta and Spark do, a vector above
:data:`INLINE_MAX` bytes goes to a file (storage type ``u``): one file per commit,
``deletion_vector_<uuid>.bin`` in the table's folder, written whole (one PUT on an
object store) before the log entry that references it, in the Delta protocol's
"Deletion Vector File Storage Format": the version byte ``1``, then per vector at its
``offset`` its size (int32, big endian), its ``RoaringBitmapArray`` bytes and their
CRC-32 (int32, big endian). A small vector stays inline (the log entry is smaller than a
file's request).

A deletion vector file is read by the versions from the commit that wrote it up to the
first that no longer references it (every vector in it replaced, or its data files
removed): the commit reports it then (:attr:`~barriered.statestore.state_log.StateCommit.
vectors_dropped`) and retention deletes it like a removed data file. It is read longer
by a partition whose live state holds a restored file with the restored version's
vector (:mod:`barriered.statestore.live_state`, until a compaction absorbs the file):
each cut reports the vector files its restored runs read (:data:`VECTORS_READ`), the
checkpoint's commit lists them (:data:`VECTORS_READ_KEY`), and retention keeps a file
a retained checkpoint lists. A file of a commit that lost its version's race is deleted
at once; one left by a crash between the file and the log entry is deleted by
maintenance (:mod:`barriered.statestore.maintenance`).

:func:`vector_rows` reads one vector's record (a ranged read, not the file) and keeps
the decoded rows in a per-process cache keyed by the descriptor (bounded by
:data:`CACHE_BYTES`): a partition reads a restored file's vector once per process, and
the coordinator reads a vector it wrote from memory.
"""

from __future__ import annotations

import logging
import struct
import threading
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Hashable, Iterable

import numpy as np

from barriered.files.fileio import filesystem, join, write_atomic
from barriered.statestore.deletion_vectors import DeletionVector, serialize, z85_encode

log = logging.getLogger(__name__)

#: The largest serialized vector (bytes) kept inline in the log; a larger one goes to
#: the commit's deletion vector file.
INLINE_MAX = 1024
#: How a deletion vector file's name starts (``deletion_vector_<uuid>.bin``).
PREFIX, SUFFIX = "deletion_vector_", ".bin"
#: Bytes of decoded rows (8 per row) the per-process cache holds at most.
CACHE_BYTES = 512 << 20
#: The acknowledgement's ``extra`` key listing the vector files a partition's restored
#: runs read (absolute paths), and the ``state`` commit metadata key listing those of the
#: table (relative): retention keeps them while a retained checkpoint lists them.
VECTORS_READ, VECTORS_READ_KEY = "vectors_read", "barriered.vectors_read"

_CACHE: OrderedDict[Hashable, np.ndarray] = OrderedDict()
_CACHED = [0]
_LOCK = threading.Lock()


def is_vector_file(name: str) -> bool:
    """Whether a file name (or path) is a deletion vector file's."""
    base = name.rsplit("/", 1)[-1]
    return base.startswith(PREFIX) and base.endswith(SUFFIX)


class VectorFile:
    """The deletion vector file of one commit, built in memory and written once.

    :meth:`vector` returns the descriptor of each vector: inline up to
    :data:`INLINE_MAX` bytes, else a record of this file.
    """

    def __init__(self) -> None:
        self.id = uuid.uuid4()
        self._parts: list[bytes] = [b"\x01"]
        self._size = 1
        self._decoded: list[tuple[DeletionVector, np.ndarray]] = []

    @property
    def name(self) -> str:
        """The file's path relative to its table (no prefix folder)."""
        return f"{PREFIX}{self.id}{SUFFIX}"

    @property
    def records(self) -> int:
        """How many vectors the file holds."""
        return len(self._decoded)

    def vector(self, rows: np.ndarray) -> DeletionVector:
        """The descriptor of the deletion vector of ``rows`` (sorted, distinct)."""
        data = serialize(rows)
        if len(data) <= INLINE_MAX:
            return DeletionVector("i", z85_encode(data), len(data), len(rows))
        record = struct.pack(">I", len(data)) + data + struct.pack(">I", zlib.crc32(data))
        offset = self._size
        self._parts.append(record)
        self._size += len(record)
        dv = DeletionVector("u", z85_encode(self.id.bytes), len(data), len(rows), offset)
        self._decoded.append((dv, np.asarray(rows, np.int64)))
        return dv

    def write(self, table_uri: str) -> str | None:
        """Write the file into the table's folder (nothing when it holds no vector);
        return its path relative to the table.

        Raises
        ------
        SnapshotStoreError
            When it cannot be written (naming the file).
        """
        if not self._decoded:
            return None
        write_atomic(join(table_uri, self.name), b"".join(self._parts), "deletion vector file")
        for dv, rows in self._decoded:  # the next commit reads them from here
            _remember(_key(dv, table_uri), rows)
        log.debug(
            "%s: deletion vector file %s, %d vector(s), %d bytes",
            table_uri,
            self.name,
            len(self._decoded),
            self._size,
        )
        return self.name


def read_range(path: str, start: int, length: int) -> bytes:
    """``length`` bytes of the file at ``path`` from ``start`` (fewer at its end)."""
    fs, local = filesystem(path)
    with fs.open_input_file(local) as f:
        data: bytes = f.read_at(length, start)
    return data


def referenced(vectors: Iterable[DeletionVector | None]) -> set[str]:
    """The deletion vector files (relative to their table) ``vectors`` are in."""
    return {dv.relative_file() for dv in vectors if dv is not None and dv.storage_type == "u"}


def _key(dv: DeletionVector, table_uri: str) -> Hashable:
    if dv.storage_type == "i":
        return ("i", dv.path_or_inline_dv, dv.size_in_bytes)
    return ("f", dv.file_path(table_uri), dv.offset, dv.size_in_bytes)


def _remember(key: Hashable, rows: np.ndarray) -> None:
    with _LOCK:
        if key in _CACHE or rows.nbytes > CACHE_BYTES // 4:
            return
        _CACHE[key] = rows
        _CACHED[0] += rows.nbytes
        while _CACHED[0] > CACHE_BYTES and _CACHE:
            _, old = _CACHE.popitem(last=False)
            _CACHED[0] -= old.nbytes


def vector_rows(dv: DeletionVector, table_uri: str = "", where: str = "") -> np.ndarray:
    """The rows a deletion vector deletes (sorted), inline or in a file, cached.

    Parameters
    ----------
    dv : DeletionVector
    table_uri : str
        The table the descriptor belongs to (a ``u`` vector's file is in its folder).
    where : str, optional
        What the vector belongs to, for messages (a data file and version).

    Raises
    ------
    SnapshotStoreError
        When it cannot be read (its file missing, truncated, or with another checksum),
        naming the table, ``where`` and the file.
    """
    key = _key(dv, table_uri)
    with _LOCK:
        rows = _CACHE.get(key)
        if rows is not None:
            _CACHE.move_to_end(key)
            return rows
    rows = dv.rows(read_range, table_uri, where)
    rows.flags.writeable = False
    _remember(key, rows)
    return rows


def clear_cache() -> None:
    """Forget every decoded vector (tests)."""
    with _LOCK:
        _CACHE.clear()
        _CACHED[0] = 0
