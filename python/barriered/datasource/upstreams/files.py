"""The ``files`` upstream: a directory of JSON-lines, CSV or Parquet files as channels.

Files are grouped into channels either by sub-folder (``channelBy=folder``: each
immediate sub-folder of ``path`` is one channel) or by a hash of their relative path
(``channelBy=hash``). A channel's records are the concatenation of its files in
*discovery order*: every :meth:`FilesUpstream.available` lists the directory and appends
the files it has not seen yet (sorted by relative path) to the end of their channel. The
order is kept in a manifest under the upstream's ``state_dir`` (``files_manifest.jsonl``),
so positions never move, not even after a driver restart.

Producers must write files under a hidden or ``.tmp`` name and rename them into place
when complete, and must never modify a file once it is visible: new records go into a new
file. The manifest records each file's size and modification time (and, on an object store,
its ETag); every listing checks them for the known files, and a changed file (rows
appended, or rewritten even at the same size) fails the query naming it, instead of
leaving its new rows unread or returning other records on a replay. With ``archiveTo``
set, :meth:`FilesUpstream.release` moves files whose records are all before the oldest
retained checkpoint into that folder; they stay readable there.

The folder, ``archiveTo`` and the manifest may each be local or on an object store
(``s3://bucket/events``): every file operation goes through
:mod:`~barriered.datasource.upstreams.input_folder`.
"""

from __future__ import annotations

import datetime
import logging
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow.fs import FileType

from barriered.config import upstream_options as opt
from barriered.datasource.upstreams import input_folder as folder_io
from barriered.datasource.upstreams.arrow_rows import conform, read_parquet_rows
from barriered.datasource.upstreams.file_formats import (
    READ_ERRORS,
    infer_format,
    infer_schema,
    read_text,
)
from barriered.datasource.upstreams.input_folder import FileState, listing
from barriered.datasource.upstreams.manifest import (
    ChannelIndex,
    ManifestUpstream,
    check_range,
    describe_schema,
    schema_from_text,
    schema_to_text,
)
from barriered.datasource.upstreams.options import (
    Options,
    archive_option,
    input_path,
    schema_option,
)
from barriered.errors import ConfigError, SnapshotStoreError
from barriered.files.fileio import join
from barriered.statestore.source_manifest import FILES_MANIFEST

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------
# The files upstream
# --------------------------------------------------------------------------------------


@dataclass
class FileEntry:
    """One file of the manifest: where its records sit in its channel."""

    channel: int
    path: str
    rows: int
    start: int
    size: int
    #: Modification time in ns when recorded; None in manifests written before it was
    #: kept (recorded at the next listing, the size being checked meanwhile).
    mtime_ns: int | None
    archived_to: str | None = None
    #: The object store's ETag at discovery (None: a local file).
    etag: str | None = None

    def record(self) -> dict[str, Any]:
        """Return the manifest line of this file."""
        return {
            "kind": "file",
            "channel": self.channel,
            "path": self.path,
            "rows": self.rows,
            "start": self.start,
            "size": self.size,
            "mtimeNs": self.mtime_ns,
            "archivedTo": self.archived_to,
        } | ({} if self.etag is None else {"etag": self.etag})

    def unchanged(self, st: FileState) -> bool:
        """Whether ``st`` (of the file at its original place) matches what was recorded:
        the size, and the ETag when both are known (an object opened, not listed), else
        the modification time."""
        if self.etag is not None and st.etag is not None:
            return st.size == self.size and st.etag == self.etag
        return st.size == self.size and self.mtime_ns in (None, st.mtime_ns)

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str) -> FileEntry:
        """Parse a manifest line (``where`` names the manifest in errors)."""
        try:
            return cls(
                channel=int(record["channel"]),
                path=str(record["path"]),
                rows=int(record["rows"]),
                start=int(record["start"]),
                size=int(record["size"]),
                mtime_ns=None if record.get("mtimeNs") is None else int(record["mtimeNs"]),
                archived_to=record.get("archivedTo"),
                etag=None if record.get("etag") is None else str(record["etag"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotStoreError(
                f"upstream manifest {where!r} has a malformed file entry {dict(record)!r} "
                f"({exc}); restore it from a backup, or start on a new snapshot path"
            ) from exc


class FilesUpstream(ManifestUpstream[FileEntry]):
    """Records of the JSON-lines, CSV or Parquet files of a directory.

    Build it with :meth:`from_options`, which validates the options, infers what is not
    given and continues the manifest in ``state_dir`` (a new one is written by
    :meth:`persist` or the first listing that finds files).

    Parameters
    ----------
    path : str
        The directory to read: an absolute local path or a URI (``s3://bucket/events``).
    fmt : str
        ``json`` (JSON lines), ``csv`` (with a header line) or ``parquet``.
    channels : int
        Number of channels.
    channel_by : str
        ``folder`` (channel = index of the sub-folder in ``folders``) or ``hash``
        (channel = ``zlib.crc32(relative path) % channels``).
    folders : Sequence[str]
        The channel sub-folders, sorted (``folder`` mode only).
    schema : pyarrow.Schema
        The fixed schema every file is cast to.
    archive_to : str or None
        Folder to move released files to; None keeps them in place.
    state_dir : str
        Folder holding ``files_manifest.jsonl``.
    """

    name = "files"
    manifest_name = FILES_MANIFEST
    manifest_version = 1
    header_keys = ("path", "format", "channels", "channelBy", "schema", "columns")

    def __init__(
        self,
        path: str,
        fmt: str,
        channels: int,
        channel_by: str,
        folders: Sequence[str],
        schema: pa.Schema,
        archive_to: str | None,
        state_dir: str,
    ) -> None:
        self.path = path
        self.format = fmt
        self.channels = channels
        self.channel_by = channel_by
        self.folders = list(folders)
        self._schema = schema
        self.archive_to = archive_to
        self.state_dir = state_dir
        self._init_manifest(state_dir)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], state_dir: str, required_by: str | None = None
    ) -> FilesUpstream:
        """Build from source options (``path``, ``format``, ``channels``, ``channelBy``,
        ``schema``, ``archiveTo``; names in any case), continuing the manifest found in
        ``state_dir``. Writes nothing.

        Parameters
        ----------
        options : Mapping[str, str]
            The source options.
        state_dir : str
            The folder of ``files_manifest.jsonl``.
        required_by : str or None
            What already refers to positions of this stream (see
            :func:`~barriered.datasource.upstreams.manifest.open_manifest`): the manifest
            must exist, it is never rebuilt from the listing.
        """
        options = Options(options)
        path = input_path(options)
        fmt = opt.FORMAT.read_str(options)
        channel_by = opt.CHANNEL_BY.read_str(options)
        channels = opt.FILES_CHANNELS.read_int(options)
        schema = schema_option(options)
        archive_to = archive_option(options, path)
        given = {
            "path": path,
            "format": fmt,
            "channelBy": channel_by,
            "channels": channels,
            "schema": None if schema is None else ", ".join(describe_schema(schema)),
        }
        start = partial(cls._start, path, fmt, channel_by, channels, schema, archive_to)
        return cls._resume_or_start(state_dir, required_by, given, start, archive_to=archive_to)

    @classmethod
    def _start(
        cls,
        path: str,
        fmt: str | None,
        channel_by: str | None,
        channels: int | None,
        schema: pa.Schema | None,
        archive_to: str | None,
        state_dir: str,
    ) -> FilesUpstream:
        """A new stream of the files under ``path``: what the options leave open is
        inferred from the listing."""
        folders, listed = listing(path)
        files = list(listed)
        if not files and (fmt is None or schema is None):
            raise ConfigError(
                f"{opt.PATH.where}: directory {path!r} has no data files yet, so the format "
                f"and schema cannot be inferred; set options {opt.FORMAT.name!r} and "
                f"{opt.SCHEMA.name!r} (e.g. 'id long, name string') to start on an empty directory"
            )
        top_files = [f for f in files if "/" not in f]
        if channel_by is None:
            channel_by = "folder" if folders and not top_files else "hash"
        if channel_by == "folder":
            if not folders:
                raise ConfigError(
                    f"{opt.CHANNEL_BY.where} is 'folder' but {path!r} has no sub-folders; "
                    f"create one sub-folder per channel or use {opt.CHANNEL_BY.name} 'hash'"
                )
            if top_files:
                raise ConfigError(
                    f"{opt.CHANNEL_BY.where} is 'folder' but file {top_files[0]!r} lies "
                    f"directly in {path!r}; put every file in a channel sub-folder or use "
                    f"{opt.CHANNEL_BY.name} 'hash'"
                )
            if channels is not None and channels != len(folders):
                raise ConfigError(
                    f"{opt.FILES_CHANNELS.where} is {channels} but {opt.CHANNEL_BY.name} 'folder' "
                    f"found {len(folders)} sub-folders in {path!r} ({', '.join(folders)}); "
                    f"omit {opt.FILES_CHANNELS.name!r} or make them equal"
                )
            channels = len(folders)
        else:
            folders = []
            channels = channels or opt.DEFAULT_CHANNELS
        if fmt is None:
            fmt = infer_format(files[0])
        if schema is None:
            schema = infer_schema(join(path, files[0]), listed[files[0]].size, fmt)
        return cls(path, fmt, channels, channel_by, folders, schema, archive_to, state_dir)

    @classmethod
    def _saved_option(cls, header: Mapping[str, Any], option: str) -> object:
        return ", ".join(header["columns"]) if option == "schema" else header[option]

    @classmethod
    def _from_header(
        cls, header: Mapping[str, Any], state_dir: str, **context: Any
    ) -> FilesUpstream:
        return cls(
            str(header["path"]),
            str(header["format"]),
            int(header["channels"]),
            str(header["channelBy"]),
            [str(f) for f in header.get("folders", [])],
            schema_from_text(str(header["schema"]), join(state_dir, FILES_MANIFEST)),
            context.get("archive_to"),
            state_dir,
        )

    # ------------------------------------------------------------------ manifest

    def _header_record(self) -> dict[str, Any]:
        return {
            "kind": "header",
            "manifest": self.manifest_version,
            "upstream": self.name,
            "path": self.path,
            "format": self.format,
            "channels": self.channels,
            "channelBy": self.channel_by,
            "folders": self.folders,
            "schema": schema_to_text(self._schema),
            "columns": describe_schema(self._schema),
        }

    def _identity(self) -> dict[str, object]:
        return {"path": self.path, "channels": self.channels, "format": self.format}

    def _adopt(self, records: list[dict[str, Any]]) -> None:
        """Rebuild the in-memory index from manifest records."""
        self._header(records)
        self._index_records(records, FileEntry.from_record)

    # ------------------------------------------------------------------ protocol

    def schema(self) -> pa.Schema:
        return self._schema

    def channel_count(self) -> int:
        return self.channels

    def is_finite(self) -> bool:
        return False

    def _channel_of(self, rel: str) -> int:
        if self.channel_by == "folder":
            folder = rel.split("/", 1)[0]
            if "/" not in rel or folder not in self.folders:
                raise ConfigError(
                    f"channelBy 'folder': {join(self.path, rel)!r} is not in one of "
                    f"the channel sub-folders {self.folders} fixed when the stream started; "
                    "the channels of a stream cannot change: move it into an existing "
                    "sub-folder, or start the stream on a new snapshot path"
                )
            return self.folders.index(folder)
        return zlib.crc32(rel.encode("utf-8")) % self.channels

    def _count_rows(self, file_path: str, size: int) -> int:
        """Learn a new file's row count, checking that it can be cast to the schema."""
        try:
            if self.format == "parquet":
                with folder_io.open_random(file_path) as f:
                    parquet = pq.ParquetFile(f)
                    present = [f for f in self._schema if f.name in parquet.schema_arrow.names]
                    conform(
                        parquet.schema_arrow.empty_table().select([f.name for f in present]),
                        pa.schema(present),
                    )
                    return int(parquet.metadata.num_rows)
            return int(self._read_text(file_path, size).num_rows)
        except READ_ERRORS as exc:
            raise ConfigError(
                f"file {file_path!r} cannot be read as {self.format} with the stream's "
                f"schema ({', '.join(describe_schema(self._schema))}): {exc}. Fix or remove "
                f"the file (before it is picked up), or set option {opt.SCHEMA.name!r} on a new "
                "snapshot path"
            ) from exc

    def _read_text(self, location: str, size: int) -> pa.Table:
        """A whole JSON-lines or CSV file (``size`` bytes), conformed to the schema."""
        if size == 0:
            return self._schema.empty_table()
        return read_text(folder_io.read_bytes(location), self.format, self._schema)

    def available(self) -> list[int]:
        index = self._load()
        try:
            folders, files = listing(self.path)
        except FileNotFoundError:
            raise ConfigError(
                f"{opt.PATH.where}: directory {self.path!r} no longer exists; the files "
                "upstream needs it for the life of the stream"
            ) from None
        if self.channel_by == "folder":
            extra = [f for f in folders if f not in self.folders]
            if extra:
                raise ConfigError(
                    f"channelBy 'folder': new sub-folder {join(self.path, extra[0])!r}"
                    f" appeared, but the channels {self.folders} are fixed for the life of "
                    "the stream; move its files into an existing sub-folder, or start the "
                    "stream on a new snapshot path"
                )
        recorded = self._check_known(files)
        new = [rel for rel in files if rel not in self._known]
        if not new and not recorded:
            return list(index.ends)
        try:
            for rel in new:
                self._discover(index, rel)
            self._save()
        except BaseException:
            # Forget the files added in memory: the next call re-reads the manifest and
            # discovers them again, so positions are only handed out once saved.
            self._index = None
            self._signature = None
            raise
        return list(index.ends)

    def _check_known(self, files: Mapping[str, FileState]) -> bool:
        """Fail on a listed file that the manifest knows and that changed since (size or
        modification time, as listed; an object of the same size whose time changed is
        compared by its ETag). Records the modification time of entries of older
        manifests that lack it, or of objects put again with the same content; returns
        whether it did (the manifest is then saved)."""
        recorded = False
        for rel, st in files.items():
            entry = self._known.get(rel)
            if entry is None:
                continue
            file_path = join(self.path, rel)
            if not entry.unchanged(st) and entry.etag is not None and st.size == entry.size:
                st = folder_io.state(file_path) or st
            if not entry.unchanged(st):
                raise self._changed(file_path, entry, st)
            if entry.mtime_ns != st.mtime_ns:
                entry.mtime_ns = st.mtime_ns
                recorded = True
                log.info(
                    "files upstream: recorded the modification time of %s in %s",
                    file_path,
                    self.manifest_path,
                )
        return recorded

    def _changed(self, location: str, entry: FileEntry, st: FileState) -> SnapshotStoreError:
        """The error for a known file that changed after it was recorded."""
        then = "" if entry.mtime_ns is None else f", modified {_when(entry.mtime_ns)}"
        etags = (
            f"; ETag {st.etag}, recorded {entry.etag}"
            if None not in (entry.etag, st.etag) and entry.etag != st.etag
            else ""
        )
        same = "same bytes" if entry.etag else "same bytes and modification time"
        return SnapshotStoreError(
            f"file {location!r} changed after the files upstream recorded it (records "
            f"{entry.start}..{entry.start + entry.rows} of channel {entry.channel}, "
            f"{entry.size} bytes{then}; now {st.size} bytes, modified "
            f"{_when(st.mtime_ns)}{etags}). Its records' positions are fixed in "
            f"{self.manifest_path!r} and each file is read once, so rows appended to it "
            "would never be read and a rewrite would replay other records. The upstream "
            "must not modify files in place: append new records as a new file (written "
            "under a hidden or .tmp name, renamed when complete). To go on, put the "
            f"original file back ({same}) and write the new rows to a new file, or start "
            "the stream on a new snapshot path"
        )

    def _discover(self, index: ChannelIndex[FileEntry], rel: str) -> None:
        """Append new file ``rel`` at the end of its channel."""
        file_path = join(self.path, rel)
        channel = self._channel_of(rel)
        st = folder_io.state(file_path)
        if st is None:
            return  # renamed or removed since the listing: seen next time, if ever
        entry = FileEntry(
            channel=channel,
            path=rel,
            rows=self._count_rows(file_path, st.size),
            start=index.ends[channel],
            size=st.size,
            mtime_ns=st.mtime_ns,
            etag=st.etag,
        )
        index.add(entry, self.manifest_path)
        self._known[rel] = entry

    def _locations(self, entry: FileEntry) -> list[str]:
        original = join(self.path, entry.path)
        archived = [
            join(root, entry.path)
            for root in (entry.archived_to, self.archive_to)
            if root is not None
        ]
        if entry.archived_to is not None:
            return [*archived, original]
        return [original, *archived]

    def _open(self, entry: FileEntry) -> tuple[str, FileState]:
        """Return where ``entry`` can be read and its state there, checking that it was
        not modified."""
        found = self._find(entry)
        if found is None:
            # Our copy of the manifest may predate the file's archiving: look again.
            fresh = self._load(force=True)
            latest = next((e for e in fresh.items[entry.channel] if e.path == entry.path), None)
            if latest is not None:
                found = self._find(latest)
        if found is not None:
            return found
        raise SnapshotStoreError(
            f"file {join(self.path, entry.path)!r} (records {entry.start}.."
            f"{entry.start + entry.rows} of channel {entry.channel}) disappeared before it "
            f"was released. The upstream must not modify or delete files in place; set "
            f"{opt.ARCHIVE_TO.where} to let the source move files it no longer needs"
        )

    def _find(self, entry: FileEntry) -> tuple[str, FileState] | None:
        """The first place ``entry`` is found and its state there, checking its size (and,
        at its original place, its modification time and ETag: a move to ``archiveTo``
        may not keep them)."""
        original = join(self.path, entry.path)
        for location in self._locations(entry):
            st = folder_io.state(location)
            if st is None:
                continue
            if st.size != entry.size or (location == original and not entry.unchanged(st)):
                raise self._changed(location, entry, st)
            return location, st
        return None

    def _read_entry(self, entry: FileEntry, lo: int, hi: int) -> pa.Table:
        location, st = self._open(entry)
        try:
            if self.format == "parquet":
                with folder_io.open_random(location) as f:
                    parquet = pq.ParquetFile(f)
                    total = int(parquet.metadata.num_rows)
                    if total == entry.rows:
                        rows = read_parquet_rows(parquet, lo, hi, self._schema.names)
                        return conform(rows, self._schema, num_rows=hi - lo)
            else:
                table = self._read_text(location, st.size)
                total = table.num_rows
                if total == entry.rows:
                    return table.slice(lo, hi - lo)
        except READ_ERRORS as exc:
            raise SnapshotStoreError(
                f"file {location!r} cannot be read any more ({exc}); it was readable when "
                "the files upstream discovered it. The upstream must not modify files in "
                "place"
            ) from exc
        raise SnapshotStoreError(
            f"file {location!r} now has {total} records, {entry.rows} when the files "
            "upstream discovered it. The upstream must not modify files in place: write "
            "new files (under a .tmp or hidden name, renamed when complete)"
        )

    def release(self, channel: int, before: int) -> None:
        """With ``archiveTo`` set, move the files of ``channel`` whose records all lie before
        ``before`` into that folder (same relative path) and mark them archived in the
        manifest; reads then find them there. Without ``archiveTo``, keep everything."""
        check_range(channel, 0, max(before, 0), self.channels)
        if self.archive_to is None:
            return
        index = self._load()
        changed = False
        for entry in index.items[channel]:
            if entry.start + entry.rows > before:
                break
            if entry.archived_to is not None:
                continue
            source = join(self.path, entry.path)
            target = join(self.archive_to, entry.path)
            if folder_io.kind(source) != FileType.NotFound:
                folder_io.move(source, target)
            if folder_io.kind(target) != FileType.NotFound:
                entry.archived_to = self.archive_to
                changed = True
        if changed:
            self._save()

    def describe(self) -> Mapping[str, object]:
        return {
            "upstream": self.name,
            "path": self.path,
            "format": self.format,
            "channels": self.channels,
            "channelBy": self.channel_by,
            "files": self._file_count(),
            "archiveTo": self.archive_to,
        }

    def _file_count(self) -> int:
        self._load()
        return len(self._known)


def _when(mtime_ns: int) -> str:
    """A modification time for messages: UTC ISO-8601 and the exact ns value."""
    moment = datetime.datetime.fromtimestamp(mtime_ns / 1e9, tz=datetime.timezone.utc)
    return f"{moment.isoformat(timespec='microseconds')} (mtime_ns {mtime_ns})"
