"""The "barriered" data source: ``spark.readStream.format("barriered")``."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from functools import partial
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructField, StructType

from barriered import wall_time
from barriered.config import SNAPSHOT_PATH
from barriered.config.source_options import RESTORE_FROM
from barriered.config.upstream_options import FORMAT, SCHEMA, UPSTREAM
from barriered.control.columns import (
    BARRIER,
    META_MAX_PARALLELISM,
    META_RESTORE,
    META_SNAPSHOT_PATH,
    META_SOURCE_ID,
    output_schema,
)
from barriered.control.record import ControlRecord
from barriered.datasource import mirror, preflight
from barriered.datasource.options import SourceSettings
from barriered.datasource.reader import BarrieredStreamReader
from barriered.datasource.upstreams import make_upstream
from barriered.datasource.upstreams.base import Upstream
from barriered.datasource.upstreams.options import Options
from barriered.errors import ConfigError, RestoreError
from barriered.files.fileio import (
    copy_tree,
    ensure_dir,
    exists,
    list_names,
    read_json,
    write_json,
)
from barriered.files.storage import redact_conf
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import RestorePoint

log = logging.getLogger(__name__)


class BarrieredDataSource(DataSource):
    """A streaming source that takes Flink-style barrier checkpoints.

    Options are documented in datasource/README.md; invalid ones fail the query at
    start with a :class:`~barriered.errors.ConfigError` naming them. With
    ``restoreFrom``, the checkpoint is found and checked (configuration, channels, data
    files, upstream manifest) when the stream is loaded, before anything is written.
    Loading (:meth:`schema`) and :meth:`streamReader` write nothing; the run writes the
    upstream's manifest and the configuration only once every check passed and it took
    the snapshot path (:func:`_start_run`, from the reader's first planning call).
    """

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        #: Spark creates and pickles a data source once per ``load()``: every instance of
        #: this stream in a query (one per side of a self-join) carries this id.
        self.source_id = mirror.new_source_id()

    @classmethod
    def name(cls) -> str:
        return "barriered"

    def _setup(
        self, pinned: dict[str, Any] | None = None
    ) -> tuple[SourceSettings, Upstream, SnapshotLayout, RestorePoint | None]:
        """Parse and check everything; read only. A restore into another snapshot path
        reads the upstream's manifest from the restore point's (:func:`_start_run` copies
        it). ``pinned`` is the restore point :meth:`schema` resolved."""
        settings, layout, point = preflight.checked(self.options, pinned)
        source_dir = layout.source_dir
        if point is None:
            required_by = _positions_recorded(layout, settings.upstream)
        else:
            required_by = point.describe()
            if _adopts_manifest(point, layout):
                source_dir = point.origin.source_dir
        upstream = upstream_of(settings, source_dir, required_by)
        if point is not None:
            point.check_upstream(upstream.channel_count(), upstream.name, upstream.grows)
        return settings, upstream, layout, point

    def schema(self) -> StructType:
        settings, upstream, layout, point = self._setup()
        spark_schema = from_arrow_schema(output_schema(upstream.schema()))
        barrier_meta: dict[str, Any] = {
            META_SNAPSHOT_PATH: layout.root,
            META_MAX_PARALLELISM: settings.conf.max_parallelism,
            META_SOURCE_ID: self.source_id,
        }
        if point is not None:
            barrier_meta[META_RESTORE] = point.to_meta()
        fields = [
            StructField(
                f.name,
                f.dataType,
                True,
                barrier_meta if f.name == BARRIER else None,
            )
            for f in spark_schema.fields
        ]
        return StructType(fields)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # Spark calls this in more than one Python worker of a run (the long-lived one
        # that plans batches, and the ones that plan reads): no file is written here.
        # The planning reader takes the snapshot path on its first call and only then
        # starts the run (_start_run, from BarrieredStreamReader._own).
        barrier = next((f for f in schema.fields if f.name == BARRIER), None)
        pinned = None if barrier is None else (barrier.metadata or {}).get(META_RESTORE)
        settings, upstream, layout, point = self._setup(pinned)
        _check_schema(schema, upstream)
        previous = read_json(layout.config_file, default=None) or {}
        channels = upstream.channel_count()
        recorded = int(previous.get("channels", channels))
        if recorded != channels and not (upstream.grows and channels > recorded):
            raise ConfigError(
                f"the snapshot path {layout.root!r} was written by a source with "
                f"{recorded} channels, this one has {channels}; channels are fixed for the "
                "life of a snapshot path (use a new snapshotPath)"
            )
        return BarrieredStreamReader(
            settings,
            upstream,
            layout,
            point,
            partial(_start_run, settings, layout, point),
            source_id=self.source_id,
        )


def _start_run(
    settings: SourceSettings, layout: SnapshotLayout, point: RestorePoint | None, upstream: Upstream
) -> Upstream:
    """What a run writes once it owns the snapshot path (every check passed): the
    upstream's manifest (a savepoint's, when one is restored into a new path) and the
    resolved configuration (a previous run's fatal error is its own: the control record
    names the run it fails). Returns the upstream to read."""
    ensure_dir(
        layout.root,
        f"Set {SNAPSHOT_PATH.key} (or the source option {SNAPSHOT_PATH.name!r}) to a folder "
        "the driver and executors can write",
    )
    if point is not None and _adopts_manifest(point, layout):
        copy_tree(point.origin.source_dir, layout.source_dir)
        upstream = upstream_of(settings, layout.source_dir, point.describe())
    upstream.persist()
    write_json(layout.config_file, config_record(settings, upstream))
    control = ControlRecord.read(layout)
    if control.fatal is not None:
        log.warning("a previous run failed: %s; starting a new run", control.fatal.message)
    return upstream


def config_record(settings: SourceSettings, upstream: Upstream) -> dict[str, Any]:
    """The ``_coordinator/config.json`` of a run (or a bootstrapped savepoint): the resolved
    configuration, the channels and the upstream it reads."""
    return {
        "conf": redact_conf(settings.conf.to_dict()),
        "channels": upstream.channel_count(),
        "upstream": dict(upstream.describe()),
        "written_ms": wall_time.now_ms(),
    }


def upstream_of(settings: SourceSettings, state_dir: str, required_by: str | None) -> Upstream:
    """The upstream the source options name, keeping its manifest in ``state_dir``.

    Its folders get the query's storage settings in this process
    (:func:`~barriered.datasource.preflight.register_folders`)."""
    preflight.register_folders(settings)
    return make_upstream(
        Options({**settings.upstream_options, UPSTREAM.name: settings.upstream}),
        state_dir,
        required_by,
    )


def _positions_recorded(layout: SnapshotLayout, upstream: str) -> str | None:
    """What under ``layout`` already refers to positions of upstream ``upstream`` (so its
    manifest must exist), or None for a new snapshot path.

    The configuration a query wrote at start names its upstream (the upstream's manifest
    is always written before it); without it, a control record (or a previous version's
    trigger log) or checkpoints tell.
    """
    config = read_json(layout.config_file, default=None)
    if config is not None:
        recorded = dict(config.get("upstream") or {}).get("upstream")
        if recorded != upstream:
            return None
        return f"{layout.config_file!r} (a query read upstream {upstream!r} into this path)"
    legacy_triggers, _ = layout.legacy_control_files
    for uri in (layout.control_file, legacy_triggers, layout.checkpoints_table, layout.state_table):
        if exists(uri):
            return f"{uri!r} (this snapshot path has been used)"
    return None


def _adopts_manifest(point: RestorePoint, layout: SnapshotLayout) -> bool:
    """Restoring another snapshot path's checkpoint (a savepoint) into ``layout``: whether
    the upstream's state folder is taken from it (so positions mean the same records).
    ``layout`` must not hold checkpoints of its own (they would mix with the restored ones).

    Raises
    ------
    RestoreError
        When ``layout`` holds checkpoints of another run.
    """
    if point.origin.root == layout.root:
        return False
    if checkpoints_table.read_rows(layout) or exists(layout.state_table):
        raise RestoreError(
            f"option {RESTORE_FROM.name!r} names {point.describe()}, but snapshotPath "
            f"{layout.root!r} already holds checkpoints of another run. Restore into a new, "
            "empty snapshotPath, or use restoreFrom=latest to continue this one"
        )
    return not list_names(layout.source_dir)


def _check_schema(schema: StructType, upstream: Upstream) -> None:
    """Refuse to start when the upstream's columns differ from the stream's schema (a
    schema inferred again at start from files that changed since the stream was loaded)."""
    expected = from_arrow_schema(output_schema(upstream.schema()))
    given = [(f.name, f.dataType) for f in schema.fields]
    if given != [(f.name, f.dataType) for f in expected.fields]:
        raise ConfigError(
            f"the {upstream.name} upstream now has the columns "
            f"{expected.simpleString()}, but the stream was loaded with "
            f"{schema.simpleString()} (the files its schema was inferred from changed in "
            f"between); set options {FORMAT.name!r} and {SCHEMA.name!r} and load the stream again"
        )
