"""What the file-backed upstreams (``files``, ``delta``) share: their manifests.

A manifest is a JSON-lines file written atomically: a header line (the options that fix
positions), then one line per data file. Here: reading and writing it, resuming a stream
from it, and the per-channel index that maps positions onto files. The manifest's folder
may be local or on an object store: every read and write goes through
:mod:`barriered.files.fileio`.
"""

from __future__ import annotations

import base64
import bisect
import json
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, NoReturn, Protocol, TypeVar

import pyarrow as pa

from barriered.datasource.upstreams.arrow_rows import ARROW_ERRORS
from barriered.datasource.upstreams.base import Upstream
from barriered.datasource.upstreams.input_folder import Signature, file_signature
from barriered.errors import ConfigError, SnapshotStoreError
from barriered.files.fileio import join, to_local_or_uri, write_atomic
from barriered.statestore.source_manifest import read_records

#: Manifests with at most this many files travel inside the pickled upstream; larger
#: ones are re-read from ``state_dir`` on the executor.
PICKLE_MANIFEST_LIMIT = 2000


def open_manifest(
    manifest_path: str, upstream: str, required_by: str | None
) -> tuple[list[dict[str, Any]] | None, Signature | None]:
    """Read the manifest a stream continues: its records (None: a new stream) and signature.

    Parameters
    ----------
    manifest_path : str
        The manifest file.
    upstream : str
        The upstream's name, for the message.
    required_by : str or None
        What already refers to positions in this manifest (a restore point, the snapshot
        path's configuration or checkpoints); None when the stream may start anew.

    Raises
    ------
    SnapshotStoreError
        When the manifest is missing (or empty) although ``required_by`` refers to it:
        positions are fixed by the manifest, and rebuilding it from what the upstream holds
        now could move them (a restore would replay counted records and skip others).
    """
    signature = file_signature(manifest_path)
    records = read_records(manifest_path)
    if records:
        return records, signature
    if required_by is not None:
        raise SnapshotStoreError(
            f"upstream manifest {manifest_path!r} is missing, but {required_by} refers to "
            f"positions of the {upstream} upstream, which only that manifest fixes; it is "
            "not rebuilt from what the upstream holds now, since records could move to "
            "other positions (a restore would replay counted records and skip others). "
            "Nothing was written. Put the manifest back (from a backup or a savepoint's "
            "_source folder), or start the stream on a new snapshot path and "
            "checkpointLocation"
        )
    return None, None


def dumps(record: Mapping[str, Any]) -> str:
    """Serialize one manifest record (compact, stable key order)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def schema_to_text(schema: pa.Schema) -> str:
    """Serialize an Arrow schema for a manifest (base64 of its IPC form)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str, where: str) -> pa.Schema:
    """Inverse of :func:`schema_to_text`; ``where`` names the manifest in errors."""
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
    except (ValueError, TypeError, *ARROW_ERRORS) as exc:
        raise SnapshotStoreError(
            f"upstream manifest {where!r} holds an unreadable schema ({exc}); restore it "
            "from a backup, or start the stream on a new snapshot path"
        ) from exc


def describe_schema(schema: pa.Schema) -> list[str]:
    """Return ``["name type", ...]`` for a manifest header (human-readable copy)."""
    return [f"{field.name} {field.type}" for field in schema]


def check_range(channel: int, start: int, end: int, channels: int) -> None:
    """Reject a channel or position range that no upstream can serve."""
    if not 0 <= channel < channels:
        raise ValueError(f"channel {channel} is out of range [0, {channels})")
    if start < 0 or end < start:
        raise ValueError(f"position range [{start}, {end}) is invalid")


class _Positioned(Protocol):
    @property
    def channel(self) -> int: ...

    @property
    def start(self) -> int: ...

    @property
    def rows(self) -> int: ...


E = TypeVar("E", bound=_Positioned)


class ChannelIndex(Generic[E]):
    """Per channel, the files in position order, with the end of the last one.

    Parameters
    ----------
    channels : int
        Number of channels.
    """

    def __init__(self, channels: int) -> None:
        self.ends = [0] * channels
        self.items: list[list[E]] = [[] for _ in range(channels)]
        self._starts: list[list[int]] = [[] for _ in range(channels)]

    def add(self, entry: E, where: str) -> None:
        """Append ``entry``; its start must be the channel's current end."""
        if not 0 <= entry.channel < len(self.ends) or entry.start != self.ends[entry.channel]:
            raise SnapshotStoreError(
                f"upstream manifest {where!r} is inconsistent: an entry of channel "
                f"{entry.channel} starts at {entry.start}, expected "
                f"{self.ends[entry.channel] if 0 <= entry.channel < len(self.ends) else '?'}. "
                "Restore it from a backup, or start the stream on a new snapshot path"
            )
        self.items[entry.channel].append(entry)
        self._starts[entry.channel].append(entry.start)
        self.ends[entry.channel] += entry.rows

    def locate(self, channel: int, start: int, end: int) -> Iterator[tuple[E, int, int]]:
        """Yield ``(entry, lo, hi)``: the rows ``[lo, hi)`` of each file covering the range.

        The caller checks that ``end`` is at most ``ends[channel]``.
        """
        items = self.items[channel]
        index = max(0, bisect.bisect_right(self._starts[channel], start) - 1)
        while index < len(items) and items[index].start < end:
            entry = items[index]
            lo = max(start, entry.start) - entry.start
            hi = min(end, entry.start + entry.rows) - entry.start
            if hi > lo:
                yield entry, lo, hi
            index += 1


def read_header(
    records: list[dict[str, Any]], where: str, required: Sequence[str], version: int
) -> dict[str, Any]:
    """Return the header line of a manifest, checking its keys and format version."""
    header = records[0] if records else {}
    if header.get("kind") != "header" or any(k not in header for k in required):
        raise SnapshotStoreError(
            f"upstream manifest {where!r} has no valid header line; restore it from a "
            "backup, or start the stream on a new snapshot path"
        )
    if header.get("manifest", version) > version:
        raise SnapshotStoreError(
            f"upstream manifest {where!r} was written by a newer spark-barriered "
            f"(manifest version {header.get('manifest')}); upgrade spark-barriered"
        )
    return header


def refuse_changed_option(
    upstream: str, option: str, given: object, saved: object, manifest_path: str
) -> NoReturn:
    """Fail because an option that fixes positions differs from the manifest's."""
    raise ConfigError(
        f"option {option!r} is {given!r} but this stream's {upstream} upstream was "
        f"started with {saved!r} (manifest {manifest_path!r}); positions depend on "
        f"it, so it cannot change: use {saved!r} again, or start the stream on a "
        "new snapshot path"
    )


class _ManifestEntry(_Positioned, Protocol):
    @property
    def path(self) -> str: ...

    def record(self) -> dict[str, Any]: ...


M = TypeVar("M", bound=_ManifestEntry)
U = TypeVar("U", bound="ManifestUpstream[Any]")


class ManifestUpstream(Upstream, Generic[M]):
    """An upstream whose channels are sequences of files recorded in a manifest.

    The manifest (JSON lines: a header, then one line per file with its channel, start
    position and row count) fixes every record's position for the life of the stream.
    Subclasses set ``channels``, ``manifest_path`` and ``_schema``, write the header
    (:meth:`_header_record`), adopt a manifest's records (:meth:`_adopt`), start empty
    (:meth:`_reset`) and read the rows of one file (:meth:`_read_entry`); loading,
    reading ranges, saving and pickling are shared here.

    A new stream's manifest is written by :meth:`persist` (at query start) or by the
    first :meth:`~barriered.datasource.upstreams.base.Upstream.available` that finds
    files, never while a stream is only loaded: a refused query leaves nothing behind.
    Once written, it must stay: its disappearance is an error, not a fresh start.
    """

    #: The manifest's file name in the upstream's state folder, its format version and
    #: the header keys every manifest of that version has.
    manifest_name: ClassVar[str]
    manifest_version: ClassVar[int]
    header_keys: ClassVar[tuple[str, ...]]

    channels: int
    manifest_path: str
    _schema: pa.Schema
    _index: ChannelIndex[M] | None
    _known: dict[str, M]
    _signature: Signature | None
    #: True once the manifest was read or written by this instance (or its original).
    _persisted: bool = False

    def _init_manifest(self, state_dir: str) -> None:
        """Set the manifest's path in ``state_dir``; nothing read or written yet."""
        self.manifest_path = join(state_dir, self.manifest_name)
        self._index = None
        self._known = {}
        self._signature = None

    @classmethod
    def _resume_or_start(
        cls: type[U],
        state_dir: str,
        required_by: str | None,
        given: Mapping[str, object],
        start: Callable[[str], U],
        **context: Any,
    ) -> U:
        """The one way a manifest upstream is built: continue the stream whose manifest is
        in ``state_dir`` (checked by :meth:`_resumed`), or start a new one, empty. Writes
        nothing.

        Parameters
        ----------
        state_dir : str
            The upstream's state folder.
        required_by : str or None
            What already refers to positions of this stream (see :func:`open_manifest`).
        given : mapping
            Each option that fixes positions with the value set now (None: not set, the
            manifest's value is kept), compared with :meth:`_saved_option`.
        start : callable
            Builds a new stream's upstream, given the state folder (no manifest yet).
        **context
            Passed to :meth:`_from_header` (what the manifest does not hold).

        Raises
        ------
        ConfigError
            When a given option differs from the manifest's (:func:`refuse_changed_option`).
        """
        state_dir = to_local_or_uri(state_dir)
        manifest_path = join(state_dir, cls.manifest_name)
        records, signature = open_manifest(manifest_path, cls.name, required_by)
        if not records:
            upstream = start(state_dir)
            upstream._reset()
            return upstream
        header = read_header(records, manifest_path, cls.header_keys, cls.manifest_version)
        for option, value in given.items():
            saved = cls._saved_option(header, option)
            if value is not None and value != saved:
                refuse_changed_option(cls.name, option, value, saved, manifest_path)
        upstream = cls._from_header(header, state_dir, **context)
        upstream._adopt(records)
        upstream._signature = signature
        upstream._persisted = True
        upstream._resumed()
        return upstream

    def _resumed(self) -> None:
        """Check a continued stream against its upstream as it is now (nothing here).

        Raises
        ------
        ConfigError
            When the upstream can no longer deliver the stream's positions.
        """

    @classmethod
    def _saved_option(cls, header: Mapping[str, Any], option: str) -> object:
        """The value option ``option`` had when the manifest was written."""
        return header[option]

    @classmethod
    @abstractmethod
    def _from_header(cls: type[U], header: Mapping[str, Any], state_dir: str, **context: Any) -> U:
        """Build the upstream a manifest's header describes (its records not adopted yet)."""

    @abstractmethod
    def _header_record(self) -> dict[str, Any]:
        """The manifest's first line."""

    @abstractmethod
    def _identity(self) -> dict[str, object]:
        """Header values a manifest must have to be this stream's (path, channels, ...)."""

    def _header(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The header of manifest ``records``, checked to be this stream's.

        Raises
        ------
        SnapshotStoreError
            When the manifest belongs to another stream (:meth:`_identity` differs).
        """
        where = self.manifest_path
        header = read_header(records, where, self.header_keys, self.manifest_version)
        identity = self._identity()
        if any(header[key] != value for key, value in identity.items()):
            found = ", ".join(f"{key} {header[key]!r}" for key in identity)
            raise SnapshotStoreError(
                f"upstream manifest {where!r} belongs to another stream ({found}); the "
                "upstream state folder must not be shared"
            )
        return header

    @abstractmethod
    def _adopt(self, records: list[dict[str, Any]]) -> None:
        """Rebuild the in-memory state from manifest records (checking the header)."""

    def _reset(self) -> None:
        """Start the in-memory state empty: a new stream, nothing found yet."""
        self._index = ChannelIndex(self.channels)
        self._known = {}

    def _load(self, force: bool = False) -> ChannelIndex[M]:
        """Return the index, re-reading the manifest when it changed on disk (driver) or
        when ``force`` is set (an executor whose copy does not cover a range).

        Raises
        ------
        SnapshotStoreError
            When a manifest this stream read or wrote disappeared.
        """
        signature = file_signature(self.manifest_path)
        if self._index is not None and not force and signature == self._signature:
            return self._index
        records = read_records(self.manifest_path)
        if not records:
            if self._persisted:
                raise SnapshotStoreError(
                    f"upstream manifest {self.manifest_path!r} disappeared; the upstream "
                    "state folder must be kept for the life of the snapshot path"
                )
            if self._index is None:
                self._reset()
            assert self._index is not None
            return self._index
        self._adopt(records)
        self._signature = signature
        self._persisted = True
        assert self._index is not None
        return self._index

    def persist(self) -> None:
        """Write the manifest of a new stream (its header: the options that fix positions);
        a stream that has one keeps it as it is."""
        self._load()
        if not self._persisted:
            self._save()

    @abstractmethod
    def _read_entry(self, entry: M, lo: int, hi: int) -> pa.Table:
        """Rows ``[lo, hi)`` of one file, in the upstream's schema."""

    def _index_records(
        self, records: list[dict[str, Any]], parse: Callable[[Mapping[str, Any], str], M]
    ) -> None:
        """Rebuild the in-memory index from the file lines of a manifest."""
        index: ChannelIndex[M] = ChannelIndex(self.channels)
        known: dict[str, M] = {}
        for record in records[1:]:
            if record.get("kind") != "file":
                continue
            entry = parse(record, self.manifest_path)
            index.add(entry, self.manifest_path)
            known[entry.path] = entry
        self._index = index
        self._known = known

    def _save(self) -> None:
        """Write the manifest atomically: the header, then every known file."""
        lines = [dumps(self._header_record())]
        lines.extend(dumps(entry.record()) for entry in self._known.values())
        text = "".join(f"{line}\n" for line in lines)
        write_atomic(self.manifest_path, text.encode("utf-8"), "upstream manifest")
        self._signature = file_signature(self.manifest_path)
        self._persisted = True

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if len(self._known) > PICKLE_MANIFEST_LIMIT:
            state["_index"] = None
            state["_known"] = {}
            state["_signature"] = None
        return state

    def read(self, channel: int, start: int, end: int) -> pa.Table:
        check_range(channel, start, end, self.channels)
        if start == end:
            return self._schema.empty_table()
        # On executors: trust the pickled copy when it covers the range, else re-read the
        # manifest (a copy may also be stale in other ways; _read_entry copes with that).
        index = self._index
        if index is None or end > index.ends[channel]:
            index = self._load(force=True)
        if end > index.ends[channel]:
            raise SnapshotStoreError(
                f"channel {channel} of the {self.name} upstream has {index.ends[channel]} "
                f"records in {self.manifest_path!r}, but records [{start}, {end}) were asked "
                "for: the upstream state folder does not belong to this stream or was lost"
            )
        pieces = [self._read_entry(e, lo, hi) for e, lo, hi in index.locate(channel, start, end)]
        table = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
        if table.num_rows != end - start:  # pragma: no cover - guarded by the checks above
            raise SnapshotStoreError(
                f"channel {channel}: read {table.num_rows} records for [{start}, {end})"
            )
        return table
