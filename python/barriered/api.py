"""The Spark-facing API of queries: ``keyed``, ``records``, ``await_termination``,
``savepoint`` (``install`` and ``read_stream``: :mod:`barriered.session`)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout
from pyspark.sql.types import StructType, _parse_datatype_string

from barriered.config.keys import (
    KEYED_LOCAL_CACHE_DIR,
    KEYED_LOCAL_CACHE_SIZE,
    KEYED_MAX_RUNS,
    KEYED_WRITE_BUFFER_SIZE,
)
from barriered.config.source_options import RESTORE_FROM
from barriered.control.columns import (
    BARRIER,
    KEY_GROUP,
    META_MAX_PARALLELISM,
    META_RESTORE,
    META_SNAPSHOT_PATH,
    META_SOURCE_ID,
    SEQ,
    SLOT,
)
from barriered.coordinator import deferred_registrations
from barriered.coordinator.driver import QueryCoordinator
from barriered.coordinator.listener import BarrieredListener
from barriered.errors import CheckpointError, ConfigError, KeyedStateError, unwrapped
from barriered.files.fileio import read_json
from barriered.files.storage import settings_for
from barriered.session import installed_listeners, listener_of
from barriered.statestore.delta_tables import open_table
from barriered.statestore.key_groups import group_values
from barriered.statestore.keyed import LIVE_STATE_DDL, KeyedOperator, LiveSettings, OperatorSpec
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restored_state import restored_files
from barriered.statestore.savepoints import Savepoint, export
from barriered.statestore.state_schema import struct_schema, table_schema

log = logging.getLogger(__name__)


def records(df: DataFrame) -> DataFrame:
    """Return ``df`` without barrier marker rows, for stateless processing."""
    return df.where(F.col(BARRIER).isNull())


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class KeyedStream:
    """A barriered stream partitioned into key groups by ``key_columns``."""

    def __init__(self, df: DataFrame, key_columns: tuple[str, ...]) -> None:
        if not key_columns:
            raise ConfigError("barriered.keyed() needs at least one key column")
        with unwrapped():  # a Spark Connect load() is lazy: the source's checks run here
            schema = df.schema
        if BARRIER not in schema.names:
            raise ConfigError(
                "barriered.keyed() needs a stream read with "
                'spark.readStream.format("barriered"): column _barrier is missing'
            )
        missing = [c for c in key_columns if c not in schema.names]
        if missing:
            raise ConfigError(f"barriered.keyed(): unknown key column(s) {missing}")
        meta = schema[BARRIER].metadata or {}
        if META_SNAPSHOT_PATH not in meta:
            raise ConfigError(
                "barriered.keyed(): the _barrier column lost its metadata (snapshot path); "
                "call keyed() on the stream the barriered source returned, before "
                "projections that drop column metadata"
            )
        self.df = df
        self.key_columns = key_columns
        self.snapshot_path = str(meta[META_SNAPSHOT_PATH])
        self.max_parallelism = int(meta[META_MAX_PARALLELISM])
        self.restore: dict[str, Any] | None = meta.get(META_RESTORE)
        #: The loaded stream (one per ``load()``): its run registers the operators
        #: declared on it (:mod:`barriered.coordinator.deferred_registrations`).
        self.source_id = str(meta.get(META_SOURCE_ID) or "")

    def process(self, processor: Any, name: str | None = None) -> DataFrame:
        """Run ``processor`` per key group with keyed state snapshotted at every checkpoint.

        Parameters
        ----------
        processor : object
            An object with ``state_schema``, ``output_schema`` (DDL strings) and either
            ``process_batch(rows, state) -> (output, new_state)`` (one call per Spark
            partition's key groups and micro-batch, all DataFrames: see
            :mod:`barriered.statestore.vectorized`) or ``process(key, rows, state)``
            (one call per key; ``state`` has ``get``/``update``/``clear``). State fields
            may be of any type Delta stores (arrays, maps, structs included). What they
            return is checked on every call (output columns, state columns and types,
            each key once): a breach fails the query with a
            :class:`~barriered.errors.ProcessorError` naming the processor, the method
            and the contract. Restored from a snapshot whose operator had other state
            fields, fields it adds get the values of an optional ``state_defaults``
            mapping (else null), removed ones are dropped and losslessly widened ones
            cast (:mod:`barriered.statestore.evolution`); other changes are refused.
        name : str, optional
            The operator id on the snapshot path (default: the class name in
            snake_case). It must stay the same across restores.

        Returns
        -------
        DataFrame
            The processor's output rows (``output_schema``).

        Notes
        -----
        Nothing is written here: the operator's registration on the snapshot path
        (``_coordinator/operators/<name>.json``) is written when a query over this
        stream has started, at its run's first progress
        (:mod:`barriered.coordinator.deferred_registrations`), and the run's checkpoints
        wait for the operators declared on the stream it reads, so a query refused by
        ``start()`` leaves nothing behind for its rerun to wait for.

        Raises
        ------
        ConfigError
            When the processor lacks an attribute, its state schema has a field of a
            type keyed state cannot hold (named), or its columns clash with another
            operator's on the snapshot path.
        KeyedStateError
            When the query resumes live state of an earlier version's format, or the
            snapshot path's state table has the earlier layout (one file per key group);
            nothing is written.
        RestoreError
            With ``restoreFrom``, when the processor's key columns or types differ from
            the snapshot's operator, or a state field changed in a way a restore cannot
            convert (named); nothing is written.
        """
        if not hasattr(processor, "process_batch") and not hasattr(processor, "process"):
            raise ConfigError(f"processor {processor!r} has neither 'process_batch' nor 'process'")
        spec = operator_spec(
            self.df.schema, self.key_columns, processor, name, self.max_parallelism
        )
        operator = spec.operator
        try:
            struct_schema(spec.to_dict()["state_type"])
        except ConfigError as exc:
            raise ConfigError(
                f"processor {type(processor).__name__} (operator {operator!r}): state_schema "
                f"{exc}; nothing was written"
            ) from None
        layout = SnapshotLayout.at(self.snapshot_path)
        _check_state_layout(layout, operator)
        others = [r for name, r in layout.registrations().items() if name != operator]
        table_schema([*others, spec.to_dict()])
        restored = None
        if self.restore is not None:
            same_path = SnapshotLayout.at(str(self.restore["root"])).root == layout.root
            defaults = dict(getattr(processor, "state_defaults", None) or {})
            restored = restored_files(self.restore, spec, defaults, same_path)
        path = layout.operator_file(operator)
        registered = read_json(path, default=None)
        spec = replace(spec, partitions=self._partitions(operator, registered))
        # Written once a run of this stream started (start() or the source may still
        # refuse it, and a refused query writes nothing); unchanged, not rewritten.
        deferred_registrations.declare(layout.root, self.source_id, operator, path, spec.to_dict())
        key_group = F.when(
            F.col(BARRIER).isNull(), key_group_column(self.key_columns, self.max_parallelism)
        ).otherwise(F.col(SEQ).cast("int"))
        grouped = (
            self.df.withColumn(KEY_GROUP, key_group)
            .withColumn(SLOT, group_column(spec.partitions, self.max_parallelism))
            .groupBy(SLOT)
        )
        storage = (layout.root, settings_for(layout.root).options)
        return grouped.applyInPandasWithState(
            KeyedOperator(spec, processor, layout.root, self._settings(), restored, storage),
            processor.output_schema,
            LIVE_STATE_DDL,
            "Append",
            GroupStateTimeout.NoTimeout,
        )

    def _partitions(self, operator: str, registered: dict[str, Any] | None) -> int:
        """The shuffle partitions the operator's live state is split into: those its
        registration on the snapshot path records (a resumed query's live state in
        Spark's checkpoint is per partition; Spark resumes with the partitions its
        checkpoint recorded, whatever the session says), unless a restore starts the
        live state afresh; else the session's ``spark.sql.shuffle.partitions``.

        Raises
        ------
        KeyedStateError
            When the registration is an earlier version's (live state of another
            format in Spark's checkpoint); nothing is written.
        """
        if registered is not None and self.restore is None:
            if "partitions" in registered:
                return int(registered["partitions"])
            raise KeyedStateError(
                f"keyed operator {operator!r} on snapshot path {self.snapshot_path!r} was "
                "started by an earlier version of barriered, whose live state in Spark's "
                "checkpoint this version cannot read; nothing was written. Restore the "
                "latest checkpoint into a new checkpoint location "
                f'(.option("{RESTORE_FROM.name}", "latest"))'
            )
        conf = self.df.sparkSession.conf
        partitions = int(conf.get("spark.sql.shuffle.partitions") or 200)
        log.info(
            "keyed operator %s: %d partition(s) of %d key groups",
            operator,
            partitions,
            self.max_parallelism,
        )
        return partitions

    def _settings(self) -> LiveSettings:
        """The ``keyed.*`` settings of the session (what the executors' calls need)."""
        conf = self.df.sparkSession.conf

        def read(key: Any) -> Any:
            raw = conf.get(key.key, key.default)
            return None if raw is None else key.parse(raw)

        return LiveSettings(
            write_buffer=int(read(KEYED_WRITE_BUFFER_SIZE)),
            max_runs=int(read(KEYED_MAX_RUNS)),
            cache_size=int(read(KEYED_LOCAL_CACHE_SIZE)),
            cache_dir=read(KEYED_LOCAL_CACHE_DIR),
            cache_size_setting=KEYED_LOCAL_CACHE_SIZE.key,
        )


def _check_state_layout(layout: SnapshotLayout, operator: str) -> None:
    """Refuse a snapshot path whose ``state`` table has the earlier layout (partitioned
    by key group, one file per key group): this version's files span key groups.

    Raises
    ------
    KeyedStateError
        Naming the path and what to do; nothing is written.
    """
    table = open_table(layout.state_table, storage_options=layout.storage_options)
    if table is not None and KEY_GROUP_PARTITION in table.metadata().partition_columns:
        raise KeyedStateError(
            f"keyed operator {operator!r}: the state table of snapshot path "
            f"{layout.root!r} has the layout of an earlier version of barriered (one file "
            "per key group), which this version reads but does not write; nothing was "
            "written. Restore its latest checkpoint into a new snapshot path: "
            f'.option("{RESTORE_FROM.name}", "{layout.root}") with another snapshotPath '
            "(and a new checkpoint location)"
        )


KEY_GROUP_PARTITION = "key_group"


def key_group_column(key_columns: Sequence[str], max_parallelism: int) -> Column:
    """The key group of a row: ``pmod(hash(key columns), maxParallelism)``, Spark's own
    Murmur3 ``hash`` computed in the JVM. The one definition the keyed operator and the
    state processor (:mod:`barriered.state_processor`) both use."""
    return F.pmod(F.hash(*[F.col(c) for c in key_columns]), F.lit(max_parallelism))


def group_column(partitions: int, max_parallelism: int) -> Column:
    """What the keyed operator groups by: for the partition that owns ``_key_group``
    (``_key_group * partitions div maxParallelism``), the ``int`` whose Spark hash puts
    it into that partition (:func:`~barriered.statestore.key_groups.group_values`): one
    group, and one Python call per micro-batch, per partition."""
    values = F.array(*[F.lit(v) for v in group_values(partitions)])
    owner = F.expr(f"CAST({KEY_GROUP} * {int(partitions)} DIV {int(max_parallelism)} AS INT)")
    return F.element_at(values, owner + 1)


def operator_spec(
    schema: StructType,
    key_columns: Sequence[str],
    processor: Any,
    name: str | None,
    max_parallelism: int,
) -> OperatorSpec:
    """What identifies the keyed operator of ``processor`` over rows of ``schema``.

    Raises
    ------
    ConfigError
        When the processor lacks ``state_schema``/``output_schema``.
    """
    for attr in ("state_schema", "output_schema"):
        if not hasattr(processor, attr):
            raise ConfigError(f"processor {processor!r} has no {attr!r}")
    key_fields = [schema[c] for c in key_columns]
    output_type = cast(StructType, _parse_datatype_string(processor.output_schema))
    return OperatorSpec(
        operator=name or _snake(type(processor).__name__),
        key_columns=tuple(key_columns),
        key_schema=", ".join(f"{f.name} {f.dataType.simpleString()}" for f in key_fields),
        state_schema=processor.state_schema,
        output_schema=processor.output_schema,
        max_parallelism=max_parallelism,
        key_type=StructType(key_fields).json(),
        state_type=_parse_datatype_string(processor.state_schema).json(),
        input_columns=(*schema.names, KEY_GROUP, SLOT),
        output_columns=tuple(output_type.names),
    )


def keyed(df: DataFrame, *key_columns: str) -> KeyedStream:
    """Partition a barriered stream into key groups by ``key_columns``.

    ``_key_group = pmod(hash(key columns), maxParallelism)``, computed by Spark; marker
    rows are routed to the key group they address. Each Spark partition owns a
    contiguous range of key groups and the operator runs once per partition and
    micro-batch (:func:`group_column`).
    """
    return KeyedStream(df, tuple(key_columns))


def snapshot_path(path_or_query: Any) -> str:
    """Return the snapshot path of a barriered query (a path is returned as given).

    Parameters
    ----------
    path_or_query : str or StreamingQuery
        A snapshot path, or a running/finished query whose source is barriered.

    Raises
    ------
    barriered.errors.ConfigError
        When the query has not reported a barriered source (yet).
    """
    return path_or_query if isinstance(path_or_query, str) else _query_path(path_or_query)


def await_termination(query: Any, timeout: float | None = None) -> None:
    """Wait until ``query`` has ended and the coordinator has finished with it.

    Spark's ``awaitTermination`` can return before the checkpoint coordinator (a
    listener, called asynchronously) has handled the last micro-batches, such as the
    final checkpoint of an ``availableNow`` run. After this returns, every checkpoint
    the query finished is in ``_checkpoints``. It waits for the run ``query`` stands
    for (its ``runId``): a query restarted on its checkpoint location keeps its id, and
    the end of an earlier run says nothing about this one.

    Parameters
    ----------
    query : StreamingQuery
        A query of a session on which :func:`install` was called.
    timeout : float, optional
        Seconds to wait in all (default: no limit).

    Raises
    ------
    barriered.errors.BarrieredError
        When a barriered error failed the query: that error (type and message first,
        Spark's ``StreamingQueryException`` after, and as its ``spark_error``).
    pyspark.errors.StreamingQueryException
        When the query failed otherwise (as ``awaitTermination`` does).
    barriered.errors.CheckpointError
        When ``timeout`` passes first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    with unwrapped():
        if timeout is None:
            query.awaitTermination()
        elif not query.awaitTermination(timeout):
            raise CheckpointError(f"query {query.id} is still running after {timeout} s")
    listener = listener_of(query)
    if listener is None:
        raise ConfigError(
            f"query {query.id} was not started on a session where barriered.install(spark) "
            "was called: no checkpoint coordinator saw it"
        )
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not listener.wait_ended(query.runId, left):
        raise CheckpointError(
            f"query {query.id} (run {query.runId}) ended but its checkpoint coordinator has "
            f"not finished after {timeout} s"
        )


def query_coordinator(
    query: Any, timeout: float = 60.0
) -> tuple[BarrieredListener, QueryCoordinator]:
    """The listener and coordinator of the query's current run.

    A restarted query keeps its id, and the listener makes the new run's coordinator at
    the run's first progress event, which Spark delivers asynchronously: until then the
    previous run's (fenced) coordinator is the one under the id, so this waits for the
    run's own.
    """
    run_id = str(query.runId)
    deadline = time.monotonic() + timeout
    while True:
        for listener in installed_listeners():
            qc = listener.coordinator(str(query.id))
            if qc is not None and qc.run_id == run_id:
                return listener, qc
        if time.monotonic() > deadline or not query.isActive:
            raise ConfigError(
                f"query {query.id} (run {run_id}) has not reported a barriered source yet "
                "(no micro-batch finished); wait for its first batch, or pass its snapshot path"
            )
        time.sleep(0.1)


def _query_path(query: Any) -> str:
    return query_coordinator(query)[1].layout.root


def savepoint(query: Any, path: str, timeout: float = 300.0) -> Savepoint:
    """Take an aligned savepoint of a running query and copy it to ``path``.

    Triggers the savepoint (forced: it does not wait for the checkpoint interval),
    waits until it is committed, then writes a self-contained copy (state, in-flight
    records, positions, configuration) that outlives the snapshot path's retention.
    Restore it with ``.option("restoreFrom", path)`` on a new snapshot path.

    Parameters
    ----------
    query : StreamingQuery
        An active query reading a barriered source.
    path : str
        The savepoint folder; it must not exist yet (or be empty).
    timeout : float, default 300
        Seconds to wait for the savepoint to complete.

    Returns
    -------
    Savepoint
        Where it is and what it holds.

    Raises
    ------
    CheckpointError
        When the query stops, the savepoint is aborted, or it does not complete in time.
    """
    if not query.isActive:
        raise CheckpointError(
            f"query {query.id} is not active: a savepoint needs a running query. To copy a "
            "completed checkpoint of a stopped query, run: barriered savepoint "
            "SNAPSHOT_PATH -o PATH [--checkpoint N]"
        )
    listener, qc = query_coordinator(query)
    with listener.lock:
        checkpoint_id = qc.request_savepoint(path)
    log.info("savepoint %d requested for query %s", checkpoint_id, query.id)
    deadline = time.monotonic() + timeout
    while True:
        with listener.lock:
            status, reason = qc.status(checkpoint_id) or ("pending", None)
        if status == "completed":
            return export(qc.layout, checkpoint_id, path)
        if status == "aborted":
            raise CheckpointError(
                f"savepoint {checkpoint_id} was aborted: {reason}; nothing was written to {path!r}"
            )
        if not query.isActive:
            raise CheckpointError(
                f"query {query.id} stopped before savepoint {checkpoint_id} completed"
            )
        if time.monotonic() > deadline:
            raise CheckpointError(
                f"savepoint {checkpoint_id} did not complete within {timeout:.0f} s "
                "(is the query making progress?)"
            )
        time.sleep(0.1)


__all__ = [
    "KeyedStream",
    "await_termination",
    "keyed",
    "records",
    "savepoint",
    "snapshot_path",
]
