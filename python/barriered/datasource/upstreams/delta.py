"""The ``delta`` upstream: an append-only Delta table, its data files split into channels.

The table's commits are taken in version order from ``startingVersion`` on; the data
files each commit adds (ordered by path within the commit) are appended to their channel
(``channelBy=file``: ``zlib.crc32(file path) % channels``; or the name of a partition
column: one channel per partition value, in first-seen order). A channel's records are the
concatenation of its files. The manifest ``delta_manifest.jsonl`` under the upstream's
``state_dir`` records every file with its channel, row count, start position and the
version that added it, plus the last version processed, so :meth:`DeltaUpstream.available`
only reads the commits that appeared since (one file check when the table is idle), and
positions survive driver restarts.

Like Spark's Delta source without ``ignoreChanges``, the table must be append-only: a
commit that removes data files (DELETE, UPDATE, MERGE, overwrite) stops the stream with an
error naming the version. Commits that rearrange files without changing data (OPTIMIZE,
``dataChange=false``) are skipped. Data files are read straight from the table's storage
(``storageOptions.*`` as for ``deltalake``, over the ``snapshotStorageOptions`` of the
table's store when it is the snapshot path's), so VACUUM must not remove files that a
retained checkpoint may still replay.
"""

from __future__ import annotations

import json
import urllib.parse
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from barriered.config import upstream_options as opt
from barriered.datasource.upstreams.arrow_rows import cast_column, read_parquet_rows
from barriered.datasource.upstreams.input_folder import is_local, normalize
from barriered.datasource.upstreams.manifest import (
    ChannelIndex,
    ManifestUpstream,
    describe_schema,
    schema_from_text,
    schema_to_text,
)
from barriered.datasource.upstreams.options import (
    Options,
    delta_channel_column,
    prefixed_options,
    starting_version,
)
from barriered.errors import ConfigError, SnapshotStoreError
from barriered.files.fileio import join
from barriered.files.storage import delta_options
from barriered.statestore.source_manifest import DELTA_MANIFEST

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def _commit_name(version: int) -> str:
    return f"_delta_log/{version:020d}.json"


def _not_found(exc: OSError) -> bool:
    text = str(exc).lower()
    return isinstance(exc, FileNotFoundError) or "not found" in text or "no such file" in text


def partition_array(raw: str | None, rows: int, data_type: pa.DataType) -> pa.Array:
    """Return ``rows`` copies of a partition value (Delta's string form) as ``data_type``.

    Delta writes a null partition value as null (or the empty string).
    """
    if raw is None or raw == "":
        return pa.nulls(rows, data_type)
    value = cast_column(pa.chunked_array([pa.array([raw], pa.string())]), data_type)[0]
    return pa.repeat(value, rows)


@dataclass
class DataFile:
    """One data file of the manifest: where its records sit in its channel."""

    channel: int
    path: str
    rows: int
    start: int
    version: int
    size: int
    partition: dict[str, str | None] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """Return the manifest line of this file."""
        return {
            "kind": "file",
            "channel": self.channel,
            "path": self.path,
            "rows": self.rows,
            "start": self.start,
            "version": self.version,
            "size": self.size,
            "partitionValues": self.partition,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str) -> DataFile:
        """Parse a manifest line (``where`` names the manifest in errors)."""
        try:
            return cls(
                channel=int(record["channel"]),
                path=str(record["path"]),
                rows=int(record["rows"]),
                start=int(record["start"]),
                version=int(record["version"]),
                size=int(record.get("size", -1)),
                partition=dict(record.get("partitionValues") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotStoreError(
                f"upstream manifest {where!r} has a malformed file entry {dict(record)!r} "
                f"({exc}); restore it from a backup, or start on a new snapshot path"
            ) from exc


class DeltaUpstream(ManifestUpstream[DataFile]):
    """Records of an append-only Delta table, in commit order, split into channels.

    Build it with :meth:`from_options`, which checks the table, fixes the schema and
    channel layout and continues the manifest in ``state_dir`` (a new one is written by
    :meth:`persist` or the first listing that finds commits).

    Parameters
    ----------
    path : str
        Table location: a local path (made absolute) or a URI (``s3://...``).
    channels : int
        Number of channels.
    channel_by : str
        ``"file"`` or the name of a partition column.
    storage_options : Mapping[str, str]
        Passed to ``deltalake`` and its file system for remote tables.
    starting_version : int
        First table version whose added files are read.
    schema : pyarrow.Schema
        The table schema at ``schema_version`` (fixed for the life of the stream).
    partition_columns : list[str]
        The table's partition columns (their values are not in the data files).
    schema_version : int
        The version the schema was taken from; later schema changes are checked.
    state_dir : str
        Folder holding ``delta_manifest.jsonl``.
    """

    name = "delta"
    manifest_name = DELTA_MANIFEST
    manifest_version = 1
    header_keys = ("path", "channels", "channelBy", "startingVersion", "schema", "lastVersion")

    def __init__(
        self,
        path: str,
        channels: int,
        channel_by: str,
        storage_options: Mapping[str, str],
        starting_version: int,
        schema: pa.Schema,
        partition_columns: list[str],
        schema_version: int,
        state_dir: str,
    ) -> None:
        self.path = path
        self.channels = channels
        self.channel_by = channel_by
        self.storage_options = dict(storage_options)
        self.starting_version = starting_version
        self._schema = schema
        self.partition_columns = list(partition_columns)
        self.schema_version = schema_version
        self.state_dir = state_dir
        self._init_manifest(state_dir)
        self._values: list[str | None] = []
        self._last_version = starting_version - 1
        self._fs: tuple[pafs.FileSystem, str] | None = None

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], state_dir: str, required_by: str | None = None
    ) -> DeltaUpstream:
        """Build from source options (``path``, ``channels``, ``channelBy``,
        ``startingVersion``, ``storageOptions.*``; names in any case), continuing the
        manifest in ``state_dir``. Writes nothing.

        Parameters
        ----------
        options : Mapping[str, str]
            The source options.
        state_dir : str
            The folder of ``delta_manifest.jsonl``.
        required_by : str or None
            What already refers to positions of this stream (see
            :func:`~barriered.datasource.upstreams.manifest.open_manifest`): the manifest
            must exist, it is never rebuilt from the table's log.
        """
        options = Options(options)
        raw_path = opt.PATH.read_str(options)
        if raw_path is None:
            raise ConfigError(
                f"{opt.PATH.where} is required by upstream 'delta': set it to the Delta "
                "table's location (a folder or a URI such as s3://bucket/table)"
            )
        path = normalize(raw_path)
        storage_options = prefixed_options(options, opt.STORAGE_OPTIONS.name)
        if not is_local(path):  # the store's registered settings, overridden by the options
            storage_options = delta_options(path, storage_options)
        channel_by = opt.DELTA_CHANNEL_BY.read_str(options)
        if channel_by is not None and channel_by.lower() == "file":
            channel_by = "file"
        channels = opt.DELTA_CHANNELS.read_int(options)
        starting = starting_version(options)

        from deltalake import DeltaTable

        try:
            exists = DeltaTable.is_deltatable(path, storage_options or None)
        except Exception as exc:  # deltalake raises several types for storage errors
            raise ConfigError(
                f"{opt.PATH.where}: cannot check for a Delta table at {path!r}: {exc}. Check "
                "the path and the 'storageOptions.*' options (credentials, region)"
            ) from exc
        if not exists:
            raise ConfigError(
                f"{opt.PATH.where}: there is no Delta table at {path!r} (no _delta_log with "
                "commits); check the path, or create the table before starting the stream"
            )

        given = {
            "path": path,
            "channelBy": channel_by,
            "channels": channels,
            "startingVersion": starting if isinstance(starting, int) else None,
        }
        start = partial(cls._start, path, storage_options, channel_by, channels, starting)
        return cls._resume_or_start(
            state_dir, required_by, given, start, storage_options=storage_options
        )

    @classmethod
    def _start(
        cls,
        path: str,
        storage_options: dict[str, str],
        channel_by: str | None,
        channels: int | None,
        starting: int | str | None,
        state_dir: str,
    ) -> DeltaUpstream:
        """A new stream of the Delta table at ``path``: its schema and channels fixed now,
        from ``starting`` (a version, ``"latest"`` or None: the first)."""
        from deltalake import DeltaTable

        table = DeltaTable(path, storage_options=storage_options or None)
        latest = table.version()
        mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
        if mapping not in ("none", None):
            raise ConfigError(
                f"{opt.PATH.where}: Delta table {path!r} uses column mapping ({mapping!r}), "
                "which the delta upstream does not support; read a table without column "
                "mapping"
            )
        schema = pa.schema(table.schema().to_arrow())
        partition_columns = list(table.metadata().partition_columns)
        if channel_by is None or (channel_by == "file" and "file" not in partition_columns):
            channel_by = "file"
            channels = channels or opt.DEFAULT_CHANNELS
        else:
            column = delta_channel_column(channel_by, partition_columns, path)
            channel_by = column
            values = {p.get(column) for p in table.partitions()}
            if channels is None:
                channels = len(values) or opt.DEFAULT_CHANNELS
            elif channels < len(values):
                raise ConfigError(
                    f"{opt.DELTA_CHANNELS.where} is {channels} but partition column "
                    f"{column!r} of {path!r} already has {len(values)} values (one channel "
                    f"each); omit {opt.DELTA_CHANNELS.name!r} or set it to at least {len(values)}"
                )
        if starting is None:
            starting = 0
        elif starting == "latest":
            starting = latest + 1
        elif isinstance(starting, int) and starting > latest:
            raise ConfigError(
                f"{opt.STARTING_VERSION.where} is {starting} but Delta table {path!r} is at "
                f"version {latest}; use a version <= {latest}, or 'latest' to read only "
                "new commits"
            )
        assert isinstance(starting, int)
        upstream = cls(
            path,
            channels,
            channel_by,
            storage_options,
            starting,
            schema,
            partition_columns,
            latest,
            state_dir,
        )
        if starting <= latest and upstream._read_commit(starting) is None:
            raise ConfigError(
                f"{opt.STARTING_VERSION.where}: commit {starting} of Delta table {path!r} "
                "is no longer in its _delta_log (log retention removed it); set "
                f"{opt.STARTING_VERSION.name!r} "
                "to a version whose commit file is still there"
            )
        return upstream

    @classmethod
    def _from_header(
        cls, header: Mapping[str, Any], state_dir: str, **context: Any
    ) -> DeltaUpstream:
        return cls(
            str(header["path"]),
            int(header["channels"]),
            str(header["channelBy"]),
            context.get("storage_options") or {},
            int(header["startingVersion"]),
            schema_from_text(str(header["schema"]), join(state_dir, DELTA_MANIFEST)),
            [str(c) for c in header.get("partitionColumns", [])],
            int(header.get("schemaVersion", -1)),
            state_dir,
        )

    # ------------------------------------------------------------------ manifest

    def _header_record(self) -> dict[str, Any]:
        return {
            "kind": "header",
            "manifest": self.manifest_version,
            "upstream": self.name,
            "path": self.path,
            "channels": self.channels,
            "channelBy": self.channel_by,
            "startingVersion": self.starting_version,
            "schemaVersion": self.schema_version,
            "schema": schema_to_text(self._schema),
            "columns": describe_schema(self._schema),
            "partitionColumns": self.partition_columns,
            "lastVersion": self._last_version,
            "values": self._values,
        }

    def _identity(self) -> dict[str, object]:
        return {"path": self.path, "channels": self.channels}

    def _adopt(self, records: list[dict[str, Any]]) -> None:
        header = self._header(records)
        self._index_records(records, DataFile.from_record)
        self._values = list(header.get("values") or [])
        self._last_version = int(header["lastVersion"])

    def _reset(self) -> None:
        super()._reset()
        self._values = []
        self._last_version = self.starting_version - 1

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_fs"] = None
        return state

    # ------------------------------------------------------------------ storage

    def _filesystem(self) -> tuple[pafs.FileSystem, str]:
        """Return the table's file system and the prefix of its relative paths."""
        if self._fs is None:
            if is_local(self.path):
                self._fs = (pafs.LocalFileSystem(), normalize(self.path) + "/")
            else:
                from deltalake.fs import DeltaStorageHandler

                handler = DeltaStorageHandler(self.path, self.storage_options or None)
                self._fs = (pafs.PyFileSystem(handler), "")
        return self._fs

    def _read_commit(self, version: int) -> bytes | None:
        """Return the commit file of ``version``, None when it does not exist (yet)."""
        fs, prefix = self._filesystem()
        try:
            with fs.open_input_stream(prefix + _commit_name(version)) as f:
                data: bytes = f.read()
                return data
        except OSError as exc:
            if _not_found(exc):
                return None
            raise SnapshotStoreError(
                f"cannot read commit {version} of Delta table {self.path!r}: {exc}"
            ) from exc

    def _resumed(self) -> None:
        """Fail when log retention removed commits this stream has not processed yet."""
        if self._read_commit(self._last_version + 1) is not None:
            return
        fs, prefix = self._filesystem()
        try:
            infos = fs.get_file_info(pafs.FileSelector(prefix + "_delta_log"))
        except OSError:
            return
        versions = [
            int(i.base_name[:20])
            for i in infos
            if i.base_name.endswith(".json") and i.base_name[:20].isdigit()
        ]
        if versions and min(versions) > self._last_version + 1:
            raise SnapshotStoreError(
                f"Delta table {self.path!r}: this stream processed up to version "
                f"{self._last_version}, but the _delta_log now starts at version "
                f"{min(versions)} (log retention removed the commits in between); their "
                "files cannot be replayed. Start the stream on a new snapshot path"
            )

    # ------------------------------------------------------------------ protocol

    def schema(self) -> pa.Schema:
        return self._schema

    def channel_count(self) -> int:
        return self.channels

    def is_finite(self) -> bool:
        return False

    def _channel_of(self, add: Mapping[str, Any], version: int) -> int:
        if self.channel_by == "file":
            return zlib.crc32(str(add["path"]).encode("utf-8")) % self.channels
        raw = (add.get("partitionValues") or {}).get(self.channel_by)
        value = None if raw in (None, "") else str(raw)
        if value in self._values:
            return self._values.index(value)
        if len(self._values) >= self.channels:
            raise ConfigError(
                f"Delta table {self.path!r} version {version} adds partition value {value!r} "
                f"of column {self.channel_by!r}, but all {self.channels} channels are taken "
                f"by {self._values}; channels are fixed for the life of the stream: start it "
                f"on a new snapshot path with a larger option {opt.DELTA_CHANNELS.name!r}"
            )
        self._values.append(value)
        return len(self._values) - 1

    def _check_metadata(self, version: int, meta: Mapping[str, Any]) -> None:
        """Fail on a schema change that the fixed schema cannot absorb."""
        if version <= self.schema_version:
            return
        from deltalake import Schema

        problem = None
        columns = list(meta.get("partitionColumns") or [])
        if columns != self.partition_columns:
            problem = f"changes the partition columns to {columns}"
        else:
            try:
                new = pa.schema(Schema.from_json(str(meta["schemaString"])).to_arrow())
            except Exception as exc:  # unparsable schema: report, do not guess
                problem = f"has a schema this reader cannot parse ({exc})"
            else:
                for fld in self._schema:
                    index = new.get_field_index(fld.name)
                    if index < 0:
                        problem = f"drops or renames column {fld.name!r}"
                        break
                    if not new.field(index).type.equals(fld.type):
                        problem = (
                            f"changes column {fld.name!r} from {fld.type} to "
                            f"{new.field(index).type}"
                        )
                        break
        if problem:
            raise SnapshotStoreError(
                f"Delta table {self.path!r} version {version} {problem}; the delta "
                "upstream reads the schema fixed when the stream started (added columns are "
                "ignored). Start the stream on a new snapshot path to read the new schema"
            )

    def _row_count(self, add: Mapping[str, Any]) -> int:
        stats = add.get("stats")
        if stats:
            try:
                return int(json.loads(stats)["numRecords"])
            except (ValueError, KeyError, TypeError):
                pass
        fs, prefix = self._filesystem()
        location = prefix + urllib.parse.unquote(str(add["path"]))
        try:
            with fs.open_input_file(location) as f:
                return int(pq.ParquetFile(f).metadata.num_rows)
        except (OSError, *_ARROW_ERRORS) as exc:
            raise SnapshotStoreError(
                f"cannot read the row count of data file {location!r} of Delta table "
                f"{self.path!r}: {exc}"
            ) from exc

    def _apply_commit(self, version: int, raw: bytes, index: ChannelIndex[DataFile]) -> None:
        actions = [json.loads(line) for line in raw.splitlines() if line.strip()]
        operation = next(
            (a["commitInfo"].get("operation") for a in actions if "commitInfo" in a), None
        )
        adds: list[Mapping[str, Any]] = []
        for action in actions:
            if "remove" in action and action["remove"].get("dataChange", True):
                removed = action["remove"].get("path")
                raise SnapshotStoreError(
                    f"Delta table {self.path!r} version {version} "
                    f"({operation or 'unknown operation'}) removes data file {removed!r}: the "
                    "delta upstream is append-only (like Spark's Delta source without "
                    "ignoreChanges), so deletes, updates, merges and overwrites cannot be "
                    "streamed. Only append to the table, or start the stream on a new "
                    f"snapshot path with option {opt.STARTING_VERSION.name!r} after this version"
                )
            if "metaData" in action:
                self._check_metadata(version, action["metaData"])
            if "add" in action and action["add"].get("dataChange", True):
                adds.append(action["add"])
        for add in sorted(adds, key=lambda a: str(a["path"])):
            rel = str(add["path"])
            if rel in self._known:
                continue
            if add.get("deletionVector"):
                raise SnapshotStoreError(
                    f"Delta table {self.path!r} version {version} adds data file {rel!r} with "
                    "a deletion vector, which the delta upstream cannot read; disable "
                    "deletion vectors on the table (delta.enableDeletionVectors=false)"
                )
            if "://" in rel or rel.startswith("/"):
                raise SnapshotStoreError(
                    f"Delta table {self.path!r} version {version} adds data file {rel!r} "
                    "outside the table folder (shallow clone?), which the delta upstream "
                    "does not read"
                )
            channel = self._channel_of(add, version)
            partition = {
                str(k): (None if v is None else str(v))
                for k, v in (add.get("partitionValues") or {}).items()
            }
            entry = DataFile(
                channel=channel,
                path=rel,
                rows=self._row_count(add),
                start=index.ends[channel],
                version=version,
                size=int(add.get("size", -1)),
                partition=partition,
            )
            index.add(entry, self.manifest_path)
            self._known[rel] = entry

    def available(self) -> list[int]:
        index = self._load()
        version = self._last_version + 1
        processed = False
        try:
            while (raw := self._read_commit(version)) is not None:
                self._apply_commit(version, raw, index)
                self._last_version = version
                processed = True
                version += 1
        except BaseException:
            # Forget the half-applied commit: the next call re-reads the manifest.
            self._index = None
            self._signature = None
            raise
        if processed:
            self._save()
        return list(index.ends)

    def _read_entry(self, entry: DataFile, lo: int, hi: int) -> pa.Table:
        fs, prefix = self._filesystem()
        location = prefix + urllib.parse.unquote(entry.path)
        data_columns = [n for n in self._schema.names if n not in self.partition_columns]
        try:
            with fs.open_input_file(location) as f:
                parquet = pq.ParquetFile(f)
                total = int(parquet.metadata.num_rows)
                if total != entry.rows:
                    raise SnapshotStoreError(
                        f"data file {location!r} of Delta table {self.path!r} has {total} "
                        f"records, the commit of version {entry.version} said {entry.rows}; "
                        "Delta data files must never be rewritten in place"
                    )
                table = read_parquet_rows(parquet, lo, hi, data_columns)
        except OSError as exc:
            if isinstance(exc, SnapshotStoreError):
                raise
            if _not_found(exc):
                raise SnapshotStoreError(
                    f"data file {location!r} of Delta table {self.path!r} (added in version "
                    f"{entry.version}) is gone, probably removed by VACUUM; a retained "
                    "checkpoint still needs it. Keep VACUUM's retention longer than the "
                    "oldest retained checkpoint"
                ) from exc
            raise SnapshotStoreError(f"cannot read data file {location!r}: {exc}") from exc
        rows = hi - lo
        names = set(table.column_names)
        columns: list[pa.Array | pa.ChunkedArray] = []
        try:
            for fld in self._schema:
                if fld.name in self.partition_columns:
                    columns.append(partition_array(entry.partition.get(fld.name), rows, fld.type))
                elif fld.name in names:
                    columns.append(cast_column(table.column(fld.name), fld.type))
                else:
                    columns.append(pa.nulls(rows, fld.type))
        except _ARROW_ERRORS as exc:
            raise SnapshotStoreError(
                f"data file {location!r} of Delta table {self.path!r} does not match the "
                f"table schema ({exc})"
            ) from exc
        return pa.Table.from_arrays(columns, schema=self._schema)

    def describe(self) -> Mapping[str, object]:
        self._load()
        return {
            "upstream": self.name,
            "path": self.path,
            "channels": self.channels,
            "channelBy": self.channel_by,
            "startingVersion": self.starting_version,
            "version": self._last_version,
            "files": len(self._known),
        }
