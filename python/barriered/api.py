"""The Spark-facing API: ``install``, ``keyed``, ``records``, ``await_termination``,
``savepoint``."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from barriered.config import PREFIX
from barriered.coordinator.driver import QueryCoordinator
from barriered.coordinator.listener import BarrieredListener
from barriered.datasource import preflight
from barriered.datasource.columns import (
    BARRIER,
    KEY_GROUP,
    META_MAX_PARALLELISM,
    META_RESTORE,
    META_SNAPSHOT_PATH,
    SEQ,
)
from barriered.datasource.options import SESSION_CONF_OPTION
from barriered.datasource.source import BarrieredDataSource
from barriered.errors import CheckpointError, ConfigError
from barriered.statestore.fileio import write_json
from barriered.statestore.initial_state import initial_state
from barriered.statestore.keyed import KeyedStatefulProcessor, OperatorSpec, Processor
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.savepoints import Savepoint, export

log = logging.getLogger(__name__)

_LISTENERS: dict[int, BarrieredListener] = {}
_PATCHED = False


def _session_conf(spark: SparkSession) -> dict[str, str]:
    conf = spark.conf.getAll if hasattr(spark.conf, "getAll") else {}
    items = conf.items() if isinstance(conf, dict) else []
    return {k: v for k, v in items if k.startswith(PREFIX)}


def _patch_stream_reader() -> None:
    """Pass the session's barriered keys to the source on ``load()`` and check it there.

    A Python data source sees only its options, not the session configuration, so
    ``DataStreamReader.load`` is wrapped to add them (as one hidden option) when the
    format is "barriered". Options the user set on the source still win. The source's
    load-time checks (:func:`barriered.datasource.preflight.check`) then run in the
    driver, so a refusal is the project's own error, not Spark's wrapped
    ``PYTHON_DATA_SOURCE_ERROR``.
    """
    global _PATCHED
    if _PATCHED:
        return
    from pyspark.sql.streaming.readwriter import DataStreamReader

    original_format = DataStreamReader.format
    original_option = DataStreamReader.option
    original_options = DataStreamReader.options
    original_load = DataStreamReader.load

    def format(self: Any, source: str) -> Any:
        self._barriered_format = source
        return original_format(self, source)

    def record(self: Any, options: dict[str, Any]) -> None:
        # The JVM reader keeps its options to itself: remember them for the preflight.
        recorded = self.__dict__.setdefault("_barriered_options", {})
        recorded.update({k: str(v) for k, v in options.items() if v is not None})

    def option(self: Any, key: str, value: Any) -> Any:
        record(self, {key: value})
        return original_option(self, key, value)

    def options(self: Any, **opts: Any) -> Any:
        record(self, opts)
        return original_options(self, **opts)

    def load(self: Any, path: str | None = None, format: str | None = None, **kw: Any) -> Any:
        fmt = format or getattr(self, "_barriered_format", None)
        if fmt == "barriered":
            self.option(SESSION_CONF_OPTION, json.dumps(_session_conf(self._spark)))
            preflight.check(self._barriered_options)  # our own errors, before Spark wraps them
        return original_load(self, path=path, format=format, **kw)

    DataStreamReader.format = format  # type: ignore[method-assign]
    DataStreamReader.option = option  # type: ignore[method-assign]
    DataStreamReader.options = options  # type: ignore[method-assign]
    DataStreamReader.load = load  # type: ignore[method-assign,assignment]
    _PATCHED = True


#: The session key of Spark's state store provider, and the one the keyed operator needs.
STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _use_rocksdb(spark: SparkSession) -> None:
    """Make RocksDB the state store of ``spark`` when nothing else was chosen.

    ``barriered.keyed()`` runs on ``transformWithStateInPandas``, which fails its first
    batch with ``STORE_BACKEND_NOT_SUPPORTED_FOR_TWS`` on Spark's default (HDFS-backed)
    provider. The key is set only when the session has none and runs no query; another
    provider is kept, with a warning.
    """
    configured = (spark.conf.getAll or {}).get(STATE_STORE_PROVIDER)
    if configured is None:
        if spark.streams.active:
            log.warning(
                "%s is not set and queries are running; barriered.install() leaves it "
                "unset. Set it to %s before starting a barriered.keyed() query",
                STATE_STORE_PROVIDER,
                ROCKSDB_PROVIDER,
            )
            return
        spark.conf.set(STATE_STORE_PROVIDER, ROCKSDB_PROVIDER)
        log.info(
            "set %s to %s (needed by barriered.keyed())", STATE_STORE_PROVIDER, ROCKSDB_PROVIDER
        )
    elif configured != ROCKSDB_PROVIDER:
        log.warning(
            "%s is %s: barriered.keyed() (transformWithStateInPandas) needs %s and fails "
            "its first batch with STORE_BACKEND_NOT_SUPPORTED_FOR_TWS on other providers; "
            "barriered.install() keeps the configured one",
            STATE_STORE_PROVIDER,
            configured,
            ROCKSDB_PROVIDER,
        )


def install(spark: SparkSession) -> BarrieredListener:
    """Register the "barriered" source and the checkpoint coordinator on ``spark``.

    Idempotent; works on an existing session (a Databricks notebook's ``spark``) and
    never creates one. When the session has no state store provider configured and no
    query is running, it sets ``spark.sql.streaming.stateStore.providerClass`` to
    RocksDB (which ``barriered.keyed()`` needs); another configured provider is kept,
    with a warning.

    Parameters
    ----------
    spark : SparkSession
        The session.

    Returns
    -------
    BarrieredListener
        The listener that coordinates every barriered query of this session.
    """
    spark.dataSource.register(BarrieredDataSource)
    _use_rocksdb(spark)
    _patch_stream_reader()
    listener = _LISTENERS.get(id(spark))
    if listener is None:
        listener = BarrieredListener()
        spark.streams.addListener(listener)
        _LISTENERS[id(spark)] = listener
    return listener


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
        if BARRIER not in df.columns:
            raise ConfigError(
                "barriered.keyed() needs a stream read with "
                'spark.readStream.format("barriered"): column _barrier is missing'
            )
        missing = [c for c in key_columns if c not in df.columns]
        if missing:
            raise ConfigError(f"barriered.keyed(): unknown key column(s) {missing}")
        meta = df.schema[BARRIER].metadata or {}
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

    def process(self, processor: Processor, name: str | None = None) -> DataFrame:
        """Run ``processor`` per key with keyed state snapshotted at every checkpoint.

        Parameters
        ----------
        processor : Processor
            An object with ``state_schema``, ``output_schema`` (DDL strings) and
            ``process(key, rows, state)``.
        name : str, optional
            The operator id on the snapshot path (default: the class name in
            snake_case). It must stay the same across restores.

        Returns
        -------
        DataFrame
            The processor's output rows (``output_schema``).
        """
        for attr in ("state_schema", "output_schema", "process"):
            if not hasattr(processor, attr):
                raise ConfigError(f"processor {processor!r} has no {attr!r}")
        operator = name or _snake(type(processor).__name__)
        key_schema = ", ".join(
            f"{c} {self.df.schema[c].dataType.simpleString()}" for c in self.key_columns
        )
        spec = OperatorSpec(
            operator=operator,
            key_columns=self.key_columns,
            key_schema=key_schema,
            state_schema=processor.state_schema,
            output_schema=processor.output_schema,
            max_parallelism=self.max_parallelism,
            input_columns=(*self.df.columns, KEY_GROUP),
        )
        initial = None
        if self.restore is not None:
            initial = initial_state(self.df.sparkSession, self.restore, spec).groupBy(KEY_GROUP)
        layout = SnapshotLayout.at(self.snapshot_path)
        write_json(layout.operator_file(operator), spec.to_dict())
        key_group = F.when(
            F.col(BARRIER).isNull(),
            F.pmod(F.hash(*[F.col(c) for c in self.key_columns]), F.lit(self.max_parallelism)),
        ).otherwise(F.col(SEQ).cast("int"))
        grouped = self.df.withColumn(KEY_GROUP, key_group).groupBy(KEY_GROUP)
        return grouped.transformWithStateInPandas(
            KeyedStatefulProcessor(spec, processor),
            processor.output_schema,
            "Append",
            "None",
            initialState=initial,
        )


def keyed(df: DataFrame, *key_columns: str) -> KeyedStream:
    """Partition a barriered stream into key groups by ``key_columns``.

    ``_key_group = pmod(hash(key columns), maxParallelism)``, computed by Spark; marker
    rows are routed to the key group they address.
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
    the query finished is in ``_checkpoints``.

    Parameters
    ----------
    query : StreamingQuery
        A query of a session on which :func:`install` was called.
    timeout : float, optional
        Seconds to wait in all (default: no limit).

    Raises
    ------
    pyspark.errors.StreamingQueryException
        When the query failed (as ``awaitTermination`` does).
    barriered.errors.CheckpointError
        When ``timeout`` passes first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    if timeout is None:
        query.awaitTermination()
    elif not query.awaitTermination(timeout):
        raise CheckpointError(f"query {query.id} is still running after {timeout} s")
    listener = next((lis for lis in _LISTENERS.values() if lis.knows(query.id)), None)
    if listener is None:
        raise ConfigError(
            f"query {query.id} was not started on a session where barriered.install(spark) "
            "was called: no checkpoint coordinator saw it"
        )
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not listener.wait_ended(query.id, left):
        raise CheckpointError(
            f"query {query.id} ended but its checkpoint coordinator has not finished after "
            f"{timeout} s"
        )


def _query_coordinator(query: Any) -> tuple[BarrieredListener, QueryCoordinator]:
    for listener in _LISTENERS.values():
        qc = listener.coordinator(str(query.id))
        if qc is not None:
            return listener, qc
    raise ConfigError(
        f"query {query.id} has not reported a barriered source yet (no micro-batch "
        "finished); wait for its first batch, or pass its snapshot path"
    )


def _query_path(query: Any) -> str:
    return _query_coordinator(query)[1].layout.root


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
    listener, qc = _query_coordinator(query)
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
    "install",
    "keyed",
    "records",
    "savepoint",
    "snapshot_path",
]
