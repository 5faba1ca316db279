"""``writeStream.format("barriered-delta")``: the sink's Python data source.

``write`` runs on executors: it writes the task's rows as Parquet data files into the
output table's folder (one per partition value with ``partitionBy``) and returns their
paths, sizes and rows. ``commit`` runs in a Python worker on the driver once every task
of the batch succeeded: it records the batch as staged (:mod:`barriered.sink.staging`),
named by the epoch of the run that owns the snapshot path. Nothing is visible in the
table until the coordinator commits the checkpoint covering the batch
(:mod:`barriered.sink.committer`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from barriered import wall_time
from barriered.config import PREFIX
from barriered.config.sink_options import UPDATE
from barriered.control.columns import BARRIER
from barriered.errors import ConfigError, SinkError
from barriered.sink import committer, options
from barriered.sink import owner as table_owner
from barriered.sink import schema as output_schema
from barriered.sink.options import SinkSettings
from barriered.sink.staging import StagedBatch, stage
from barriered.statestore.acks import DataFile, write_data_file
from barriered.statestore.delta_tables import open_table
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.ownership import current_owner

log = logging.getLogger(__name__)

#: Prefix of every data file the sink writes (retention deletes only such files).
FILE_PREFIX = "barriered-sink"


@dataclass
class StagedFiles(WriterCommitMessage):
    """What one task wrote: its data files, not yet in the table."""

    files: list[DataFile] = field(default_factory=list)


def partitioned(
    table: pa.Table, partition_by: tuple[str, ...]
) -> Iterator[tuple[dict[str, str | None], pa.Table]]:
    """Split ``table`` by the values of ``partition_by``: (partition values as strings,
    rows without the partition columns). One part without partition columns."""
    if not partition_by:
        yield {}, table
        return
    keys = table.select(list(partition_by)).group_by(list(partition_by)).aggregate([])
    for values in keys.to_pylist():
        mask = None
        for column, value in values.items():
            cond = pc.is_null(table[column]) if value is None else pc.equal(table[column], value)
            mask = cond if mask is None else pc.and_(mask, cond)
        part = table.filter(mask).drop_columns(list(partition_by))
        yield {c: None if v is None else str(v) for c, v in values.items()}, part


def write_files(settings: SinkSettings, table: pa.Table) -> list[DataFile]:
    """Write one task's rows into the output table's folder (not committed).

    Mode update stages whole rows (the merge reads them back); append writes one file
    per partition value, without the partition columns (Delta keeps them in the log).
    """
    if table.num_rows == 0:
        return []
    by = () if settings.mode == UPDATE else settings.partition_by
    return [
        write_data_file(settings.path, values, FILE_PREFIX, part)
        for values, part in partitioned(table, by)
    ]


def _no_source(
    sink_id: str, layout: SnapshotLayout, why: str, sink: str = "barriered-delta"
) -> SinkError:
    return SinkError(
        f"{sink} sink {sink_id!r}: {why}. The sink writes the output of a stream "
        "read with spark.readStream.format('barriered') (its coordinator commits the "
        "output with the checkpoints), and its snapshotPath must be that source's (the "
        f"session key {PREFIX}snapshotPath or the option snapshotPath, now "
        f"{layout.root!r}). Write other streams with another sink (e.g. format('delta'))"
    )


def run_epoch(
    layout: SnapshotLayout, sink_id: str, batch_id: int, sink: str = "barriered-delta"
) -> int:
    """The epoch of the run that owns the snapshot path (the one staging this batch).

    Raises
    ------
    SinkError
        When no barriered source took the snapshot path, or its run has ended.
    """
    owner = current_owner(layout)
    if owner is None:
        raise _no_source(
            sink_id,
            layout,
            f"no barriered source ever read with snapshot path {layout.root!r}",
            sink,
        )
    if not owner.alive(wall_time.now_ms(), sys.maxsize):  # released, or its process gone
        raise _no_source(
            sink_id,
            layout,
            f"batch {batch_id} was not read by a running barriered source: the last run on "
            f"snapshot path {layout.root!r} (epoch {owner.epoch}) has ended; the batch's "
            "data files are left unreferenced in the output folder",
            sink,
        )
    return owner.epoch


def before_start(sink_options: Mapping[str, str], schema: StructType) -> None:
    """The checks that need no running source, run by ``start()`` on a classic session
    (this process is the driver) before the query starts, so their refusal writes
    nothing, not even under the snapshot path: the options, their columns against the
    output's, the output's column types, an existing table's columns.

    Raises
    ------
    ConfigError
        An unknown or bad option, key or partition columns the output lacks, a column of
        a type Delta cannot store.
    SinkError
        The output table has other columns or partitioning.
    """
    settings = options.parse(sink_options)
    settings.check_columns(schema.fieldNames())
    arrow = output_schema.arrow_schema(schema)
    table = open_table(settings.path)
    if table is not None:
        output_schema.check_table(settings.path, table, arrow, settings.partition_by)


def check_start(settings: SinkSettings, schema: StructType) -> pa.Schema:
    """Refuse, before anything is written, a sink that cannot write the query's output;
    return the Arrow schema of its data files.

    Runs on the driver when the query's first batch starts (Spark creates the sink's
    writer then, after the source planned the batch).

    Raises
    ------
    ConfigError
        Key or partition columns the output lacks, a column of a type Delta cannot store.
    SinkError
        No barriered source took the snapshot path (a stream from another source), or
        the output table is not this sink's to write (another query's, another schema:
        :func:`barriered.sink.committer.guard`).
    """
    settings.check_columns(schema.fieldNames())
    arrow = output_schema.arrow_schema(schema)
    layout = SnapshotLayout.configured(settings.snapshot_path)
    owner = current_owner(layout)
    if owner is None:
        raise _no_source(
            settings.sink_id,
            layout,
            f"no barriered source ever read with snapshot path {layout.root!r}. Nothing "
            "was written",
        )
    lineage = table_owner.lineage(layout.root, {"from": owner.restore_from})
    committer.guard(layout.root, settings, arrow, lineage)
    return arrow


class BarrieredDeltaWriter(DataSourceStreamArrowWriter):
    """Stages each micro-batch's output for the checkpoint that will cover it."""

    def __init__(self, settings: SinkSettings, schema: pa.Schema) -> None:
        self.settings = settings
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFiles:
        """Write this task's rows as data files; return them (executor side)."""
        self.settings.register_storage()
        batches = list(iterator)
        table = pa.Table.from_batches(batches) if batches else self.schema.empty_table()
        if BARRIER in table.column_names:  # a query that wrote its input's marker rows
            table = table.filter(pc.is_null(table[BARRIER]))
        table = table.cast(self.schema)  # the session's time zone, large types: as declared
        return StagedFiles(write_files(self.settings, table))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Record the batch as staged (driver side); nothing becomes visible."""
        layout = SnapshotLayout.configured(self.settings.snapshot_path)
        files = tuple(f for m in messages if isinstance(m, StagedFiles) for f in m.files)
        epoch = run_epoch(layout, self.settings.sink_id, batchId)
        now = wall_time.now_ms()
        stage(layout, StagedBatch(self.settings, epoch, batchId, self.schema, files, now))
        log.debug(
            "sink %s: batch %d staged (%d files, epoch %d)",
            self.settings.sink_id,
            batchId,
            len(files),
            epoch,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A failed batch stages nothing; its files are left to retention."""
        log.warning(
            "sink %s: batch %d aborted; its data files stay unreferenced",
            self.settings.sink_id,
            batchId,
        )


class BarrieredDeltaSink(DataSource):
    """``writeStream.format("barriered-delta")``: a Delta table committed with the checkpoints.

    Options (declared in ``barriered.sink.options.SINK_OPTIONS``): ``path`` (or
    ``start(path)``), ``snapshotPath`` (default: the session key), ``mode``
    (``append``/``update``), ``keyColumns``, ``partitionBy``, ``sinkId``, ``adoptTable``.
    The stream must come from a barriered source; the table must be the sink's own
    (:mod:`barriered.sink.owner`) with the output's columns (:mod:`barriered.sink.schema`).
    """

    @classmethod
    def name(cls) -> str:
        return "barriered-delta"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Check the options against the output schema; return the writer."""
        if overwrite:
            raise ConfigError(
                "the barriered-delta sink does not support outputMode 'complete'; use "
                "append (with the sink option mode=update to merge by keyColumns)"
            )
        settings = options.parse(dict(self.options))
        return BarrieredDeltaWriter(settings, check_start(settings, schema))

    def schema(self) -> Any:
        raise ConfigError("the barriered-delta sink is write-only: read its table as Delta")
