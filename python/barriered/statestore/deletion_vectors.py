"""Delta deletion vectors: which rows of a data file a table version no longer holds.

The ``state`` table is merge-on-read (``statestore/README.md``): a checkpoint adds the
keys that changed in new files and marks the rows they replace as deleted in the files
that held them, with a deletion vector on that file's ``add`` action, so every version
still reads as exactly its checkpoint's state (any Delta reader with deletion vectors:
Spark, Databricks, delta-rs ``DeltaTable.scan``, DuckDB). delta-rs reads deletion vectors
but does not write them, so they are written here, in the format of the Delta protocol
("Deletion Vector Format"):

* a ``RoaringBitmapArray`` in its portable form: the magic number ``1681511377``
  (int32, little endian), the number of 32-bit bitmaps (int64), then per bitmap its key
  (the high 32 bits of the row index, int32) and the bitmap in CRoaring's portable
  serialization (array containers for up to 4,096 rows of a 65,536-row chunk, bitmap
  containers above; run containers are read, not written);
* stored inline in the log (storage type ``i``): the bytes in Z85, Base85 with the
  ZeroMQ alphabet, padded to a multiple of 4 bytes; or in a deletion vector file
  (``u``: ``deletion_vector_<uuid>.bin`` in the table's folder, named by the Z85 of the
  UUID, with an optional prefix folder; ``p``: an absolute path) at ``offset``: the
  size (int32, big endian), the bytes, their CRC-32 (int32, big endian). Which form a
  commit writes, and the file itself, is :mod:`barriered.statestore.dv_files`.

A deletion vector is handled here as a sorted ``numpy`` array of distinct row indices.
"""

from __future__ import annotations

import base64
import struct
import uuid
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from barriered.errors import SnapshotStoreError

MAGIC = 1681511377
_NO_RUNS = 12346
_RUNS = 12347
_ARRAY_MAX = 4096
_B85 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_Z85 = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_FROM_Z85 = bytes.maketrans(_Z85, _B85)
_Z85_DIGITS = np.frombuffer(_Z85, np.uint8)
_Z85_VALUES = np.full(256, 255, np.uint8)
_Z85_VALUES[_Z85_DIGITS] = np.arange(85, dtype=np.uint8)

#: No row deleted.
EMPTY = np.empty(0, np.int64)


def z85_encode(data: bytes) -> str:
    """Z85 text of ``data`` (zero-padded to a multiple of 4 bytes first)."""
    padded = data + b"\0" * (-len(data) % 4)
    words = np.frombuffer(padded, ">u4").astype(np.uint64)
    digits = np.empty((len(words), 5), np.uint8)
    for i in range(4, -1, -1):
        digits[:, i] = words % np.uint64(85)
        words //= np.uint64(85)
    return _Z85_DIGITS[digits].tobytes().decode("ascii")


def z85_decode(text: str, size: int) -> bytes:
    """The first ``size`` bytes encoded by ``text`` (Z85)."""
    raw = text.encode("ascii")
    if len(raw) % 5:  # not this project's (padded) encoding: the standard library's way
        return base64.b85decode(raw.translate(_FROM_Z85))[:size]
    digits = _Z85_VALUES[np.frombuffer(raw, np.uint8)].reshape(-1, 5)
    words = digits[:, 0].astype(np.uint64)
    for i in range(1, 5):  # vectorized: a megabyte-sized vector in milliseconds
        words = words * np.uint64(85) + digits[:, i]
    if (digits > 84).any() or (words > 0xFFFFFFFF).any():
        raise ValueError("not Z85 text: a character outside the alphabet or a group over 2^32")
    return words.astype(">u4").tobytes()[:size]


def runs_of(sorted_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of a sorted array and where each first appears (a sort-free
    ``numpy.unique(..., return_index=True)``, which hashes in numpy 2 and is slow)."""
    if not len(sorted_values):
        return sorted_values[:0], np.empty(0, np.int64)
    first = np.flatnonzero(np.concatenate(([True], sorted_values[1:] != sorted_values[:-1])))
    return sorted_values[first], first


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``values`` (by sorting)."""
    return runs_of(np.sort(values))[0]


def contains(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per value, whether the sorted row indices ``rows`` hold it (binary search:
    ``O(len(values) log len(rows))``, where ``numpy.isin`` sorts both)."""
    if not len(rows):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(rows, values), len(rows) - 1)
    return np.asarray(rows[at] == values)


def _bitmap32(low: np.ndarray) -> bytes:
    """CRoaring's portable serialization of sorted, distinct 32-bit values (no runs)."""
    high = (low >> 16).astype(np.uint16)
    keys, starts = runs_of(high)
    ends = np.append(starts[1:], len(low))
    bodies = []
    for start, end in zip(starts, ends, strict=True):
        chunk = (low[start:end] & 0xFFFF).astype(np.uint16)
        if len(chunk) <= _ARRAY_MAX:
            bodies.append(chunk.astype("<u2").tobytes())
        else:
            bits = np.zeros(1 << 16, dtype=bool)
            bits[chunk] = True
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
    count = len(keys)
    header = struct.pack("<II", _NO_RUNS, count)
    descriptive = np.empty(2 * count, "<u2")
    descriptive[0::2] = keys
    descriptive[1::2] = (ends - starts - 1).astype(np.uint16)
    offset = len(header) + 4 * count + 4 * count
    offsets = np.empty(count, "<u4")
    for i, body in enumerate(bodies):
        offsets[i] = offset
        offset += len(body)
    return header + descriptive.tobytes() + offsets.tobytes() + b"".join(bodies)


def serialize(rows: np.ndarray) -> bytes:
    """The ``RoaringBitmapArray`` bytes (portable form) of ``rows`` (sorted, distinct)."""
    rows = np.asarray(rows, np.int64)
    if len(rows) and rows[0] < 0:
        raise ValueError(f"a deletion vector holds row indices >= 0, got {int(rows[0])}")
    keys, starts = runs_of(rows >> 32)
    ends = np.append(starts[1:], len(rows))[: len(keys)]
    parts = [struct.pack("<iq", MAGIC, len(keys))]
    for key, start, end in zip(keys, starts, ends, strict=True):
        parts.append(struct.pack("<I", int(key)))
        parts.append(_bitmap32((rows[start:end] & 0xFFFFFFFF).astype(np.uint32)))
    return b"".join(parts)


def _read_bitmap32(data: memoryview, at: int) -> tuple[np.ndarray, int]:
    """Decode one portable 32-bit bitmap at ``at``; return its values and its end."""
    (cookie,) = struct.unpack_from("<I", data, at)
    pos = at + 4
    runs = b""
    if cookie & 0xFFFF == _RUNS:
        count = (cookie >> 16) + 1
        flags = (count + 7) // 8
        runs = bytes(data[pos : pos + flags])
        pos += flags
    elif cookie == _NO_RUNS:
        (count,) = struct.unpack_from("<I", data, pos)
        pos += 4
    else:
        raise ValueError(f"not a portable roaring bitmap (cookie {cookie})")
    keys = np.frombuffer(data, "<u2", 2 * count, pos)
    pos += 4 * count
    if not runs or count >= 4:  # the offset header
        pos += 4 * count
    values = []
    for i in range(count):
        key, cardinality = int(keys[2 * i]), int(keys[2 * i + 1]) + 1
        if runs and runs[i // 8] >> (i % 8) & 1:
            (n_runs,) = struct.unpack_from("<H", data, pos)
            pairs = np.frombuffer(data, "<u2", 2 * n_runs, pos + 2).astype(np.int64)
            pos += 2 + 4 * n_runs
            spans = [
                np.arange(s, s + length + 1)
                for s, length in zip(pairs[0::2], pairs[1::2], strict=True)
            ]
            low = np.concatenate(spans) if spans else EMPTY
        elif cardinality <= _ARRAY_MAX:
            low = np.frombuffer(data, "<u2", cardinality, pos).astype(np.int64)
            pos += 2 * cardinality
        else:
            bits = np.unpackbits(np.frombuffer(data, np.uint8, 8192, pos), bitorder="little")
            low = np.flatnonzero(bits).astype(np.int64)
            pos += 8192
        values.append((key << 16) | low)
    return (np.concatenate(values) if values else EMPTY), pos


def deserialize(data: bytes) -> np.ndarray:
    """The row indices of ``RoaringBitmapArray`` bytes (portable form), sorted."""
    view = memoryview(data)
    magic, count = struct.unpack_from("<iq", view, 0)
    if magic != MAGIC:
        raise ValueError(f"not a portable RoaringBitmapArray (magic number {magic})")
    pos, parts = 12, []
    for _ in range(count):
        (key,) = struct.unpack_from("<I", view, pos)
        values, pos = _read_bitmap32(view, pos + 4)
        parts.append((np.int64(key) << 32) | values)
    return np.concatenate(parts) if parts else EMPTY


@dataclass(frozen=True)
class DeletionVector:
    """The deletion vector descriptor of one ``add`` action (Delta's JSON form)."""

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    @classmethod
    def inline(cls, rows: np.ndarray) -> DeletionVector:
        """An inline deletion vector of ``rows`` (sorted, distinct)."""
        data = serialize(rows)
        return cls("i", z85_encode(data), len(data), len(rows))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DeletionVector:
        """Parse the ``deletionVector`` object of an ``add`` action."""
        return cls(
            str(d["storageType"]),
            str(d["pathOrInlineDv"]),
            int(d["sizeInBytes"]),
            int(d["cardinality"]),
            None if d.get("offset") is None else int(d["offset"]),
        )

    def to_json(self) -> dict[str, Any]:
        """The ``deletionVector`` object of an ``add`` action."""
        out: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
            "sizeInBytes": self.size_in_bytes,
            "cardinality": self.cardinality,
        }
        if self.offset is not None:
            out["offset"] = self.offset
        return out

    def relative_file(self) -> str:
        """The path of a ``u`` deletion vector's file relative to its table."""
        if self.storage_type != "u":
            raise ValueError(f"a {self.storage_type!r} deletion vector has no table-relative file")
        encoded = self.path_or_inline_dv
        prefix, z85 = encoded[:-20], encoded[-20:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(z85, 16))}.bin"
        return f"{prefix.strip('/')}/{name}" if prefix.strip("/") else name

    def file_path(self, table_uri: str) -> str:
        """Where an on-disk deletion vector is (``u``: relative to the table, ``p``)."""
        if self.storage_type == "p":
            return self.path_or_inline_dv
        return table_uri.rstrip("/") + "/" + self.relative_file()

    def absolute(self, table_uri: str) -> DeletionVector:
        """The same deletion vector with its file named by an absolute path (``p``), to
        be read without its table (an inline one is returned as it is)."""
        if self.storage_type != "u":
            return self
        path = self.file_path(table_uri)
        return DeletionVector("p", path, self.size_in_bytes, self.cardinality, self.offset)

    @property
    def stored_bytes(self) -> tuple[int, int]:
        """Where an on-disk deletion vector's record is in its file: start and length
        (the size, the bytes and the checksum)."""
        return (1 if self.offset is None else self.offset), 4 + self.size_in_bytes + 4

    def rows(self, read: Any = None, table_uri: str = "", where: str = "") -> np.ndarray:
        """The deleted row indices, sorted.

        Parameters
        ----------
        read : callable, optional
            ``read(path, start, length) -> bytes`` for an on-disk deletion vector (``u``,
            ``p``): the bytes of the file at ``start`` (fewer at its end).
        table_uri : str
            The table the descriptor belongs to (for ``u``).
        where : str, optional
            What the deletion vector belongs to, for messages (a data file, a version).

        Raises
        ------
        SnapshotStoreError
            When the deletion vector cannot be read or does not match its descriptor,
            naming the table, ``where`` and the deletion vector's file.
        """
        table = table_uri or "a state table"
        at = f" ({where})" if where else ""
        try:
            if self.storage_type == "i":
                rows = deserialize(z85_decode(self.path_or_inline_dv, self.size_in_bytes))
            else:
                if read is None:
                    raise ValueError("an on-disk deletion vector needs a reader")
                path = self.file_path(table_uri)
                start, length = self.stored_bytes
                try:
                    record = read(path, start, length)
                except OSError as exc:
                    raise SnapshotStoreError(
                        f"the deletion vector file {path!r} of table {table}{at} cannot be "
                        f"read: {exc}. The version that references it cannot be read; put "
                        "the file back or restore a newer checkpoint"
                    ) from exc
                if len(record) < length:
                    raise ValueError(
                        f"its file {path!r} ends {length - len(record)} byte(s) before the "
                        "deletion vector does (truncated)"
                    )
                (size,) = struct.unpack_from(">I", record, 0)
                data = record[4 : 4 + self.size_in_bytes]
                (checksum,) = struct.unpack_from(">I", record, 4 + self.size_in_bytes)
                if size != self.size_in_bytes or zlib.crc32(data) != checksum:
                    raise ValueError(
                        f"its size or checksum in {path!r} (offset {start}) does not match "
                        "its descriptor"
                    )
                rows = deserialize(data)
        except (ValueError, struct.error) as exc:
            raise SnapshotStoreError(
                f"deletion vector {self.storage_type}:{self.path_or_inline_dv[:40]!r} of "
                f"table {table}{at} cannot be read: {exc}"
            ) from exc
        if len(rows) != self.cardinality:
            raise SnapshotStoreError(
                f"deletion vector of table {table}{at} holds {len(rows)} rows, its "
                f"descriptor says {self.cardinality}"
            )
        return rows


def union(*parts: np.ndarray) -> np.ndarray:
    """Sorted, distinct row indices of all ``parts``."""
    arrays = [np.asarray(p, np.int64) for p in parts if len(p)]
    return distinct(np.concatenate(arrays)) if arrays else EMPTY
