"""The "barriered" data source: ``spark.readStream.format("barriered")``."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructField, StructType

from barriered.config import check_restore_compatible
from barriered.datasource.columns import (
    BARRIER,
    META_MAX_PARALLELISM,
    META_RESTORE,
    META_SNAPSHOT_PATH,
    output_schema,
)
from barriered.datasource.options import SourceSettings, parse_source_options
from barriered.datasource.reader import BarrieredStreamReader
from barriered.datasource.upstreams import make_upstream
from barriered.datasource.upstreams.base import Upstream
from barriered.datasource.upstreams.options import Options
from barriered.errors import ConfigError, RestoreError
from barriered.statestore import checkpoints_table
from barriered.statestore.fileio import copy_tree, ensure_dir, exists, read_json
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import RestorePoint, resolve

log = logging.getLogger(__name__)


class BarrieredDataSource(DataSource):
    """A streaming source that takes Flink-style barrier checkpoints.

    Options are documented in datasource/README.md; invalid ones fail the query at
    start with a :class:`~barriered.errors.ConfigError` naming them. With
    ``restoreFrom``, the checkpoint is found and checked (configuration, channels, data
    files) when the stream is loaded, before anything is written.
    """

    @classmethod
    def name(cls) -> str:
        return "barriered"

    def _setup(
        self, pinned: dict[str, Any] | None = None
    ) -> tuple[SourceSettings, Upstream, SnapshotLayout, RestorePoint | None]:
        settings = parse_source_options(self.options)
        layout = SnapshotLayout.at(
            settings.conf.require_snapshot_path(), settings.conf.storage_options
        )
        point = None
        if settings.restore_from is not None:
            spec = settings.restore_from
            if pinned is not None and pinned.get("root") == layout.root:
                # The checkpoint schema() resolved, whose state barriered.keyed loads: a
                # run still writing the path may have completed a later one since.
                spec = str(pinned["checkpoint_id"])
            point = resolve(layout, spec)
            point.check_config(settings.conf)
            point.check_files()
            if point.origin.root != layout.root:
                _adopt_upstream_manifest(point, layout)
        upstream = make_upstream(
            Options({**settings.upstream_options, "upstream": settings.upstream}),
            layout.source_dir,
        )
        if point is not None:
            point.check_upstream(upstream.channel_count(), upstream.name)
        return settings, upstream, layout, point

    def schema(self) -> StructType:
        settings, upstream, layout, point = self._setup()
        spark_schema = from_arrow_schema(output_schema(upstream.schema()))
        barrier_meta: dict[str, Any] = {
            META_SNAPSHOT_PATH: layout.root,
            META_MAX_PARALLELISM: settings.conf.max_parallelism,
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
        # The planning reader takes the snapshot path on its first call (see
        # BarrieredStreamReader.initialOffset/latestOffset).
        barrier = next((f for f in schema.fields if f.name == BARRIER), None)
        pinned = None if barrier is None else (barrier.metadata or {}).get(META_RESTORE)
        settings, upstream, layout, point = self._setup(pinned)
        ensure_dir(layout.root)  # fails early when the path cannot be written
        previous = read_json(layout.config_file, default=None)
        if previous is not None:
            check_restore_compatible(previous.get("conf", {}), settings.conf)
            if int(previous.get("channels", upstream.channel_count())) != upstream.channel_count():
                raise ConfigError(
                    f"the snapshot path {layout.root!r} was written by a source with "
                    f"{previous['channels']} channels, this one has "
                    f"{upstream.channel_count()}; channels are fixed for the life of a "
                    "snapshot path (use a new snapshotPath)"
                )
        return BarrieredStreamReader(settings, upstream, layout, point)


def _adopt_upstream_manifest(point: RestorePoint, layout: SnapshotLayout) -> None:
    """Restoring another snapshot path's checkpoint (a savepoint) into ``layout``: start
    from its upstream manifest, so positions mean the same records. ``layout`` must not
    hold checkpoints of its own (they would mix with the restored ones)."""
    if checkpoints_table.read_rows(layout) or exists(layout.state_table):
        raise RestoreError(
            f"option 'restoreFrom' names {point.describe()}, but snapshotPath "
            f"{layout.root!r} already holds checkpoints of another run. Restore into a new, "
            "empty snapshotPath, or use restoreFrom=latest to continue this one"
        )
    if not exists(layout.source_dir):
        copy_tree(point.origin.source_dir, layout.source_dir)
