"""The "barriered" data source: ``spark.readStream.format("barriered")``."""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructField, StructType

from barriered.config import check_restore_compatible
from barriered.datasource import preflight
from barriered.datasource.columns import (
    BARRIER,
    META_MAX_PARALLELISM,
    META_RESTORE,
    META_SNAPSHOT_PATH,
    output_schema,
)
from barriered.datasource.options import SourceSettings
from barriered.datasource.reader import BarrieredStreamReader
from barriered.datasource.triggers import TriggerLog
from barriered.datasource.upstreams import make_upstream
from barriered.datasource.upstreams.base import Upstream
from barriered.datasource.upstreams.options import Options
from barriered.errors import ConfigError, RestoreError
from barriered.statestore import checkpoints_table
from barriered.statestore.fileio import copy_tree, ensure_dir, exists, read_json, write_json
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import RestorePoint

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

    def _setup(self) -> tuple[SourceSettings, Upstream, SnapshotLayout, RestorePoint | None]:
        settings, layout, point = preflight.checked(self.options)
        if point is not None and point.origin.root != layout.root:
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
        settings, upstream, layout, point = self._setup()
        ensure_dir(layout.root)
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
        write_json(
            layout.config_file,
            {
                "conf": settings.conf.to_dict(),
                "channels": upstream.channel_count(),
                "upstream": dict(upstream.describe()),
                "written_ms": int(time.time() * 1000),
            },
        )
        triggers = TriggerLog.read(layout.triggers_file)
        if triggers.fatal:
            log.warning("a previous run failed: %s; starting a new run", triggers.fatal)
            triggers.with_fatal(None).write(layout.triggers_file)
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
