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
from barriered.statestore.fileio import read_json, write_json
from barriered.statestore.initial_state import initial_state
from barriered.statestore.keyed import KeyedStatefulProcessor, OperatorSpec, Processor
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.savepoints import Savepoint, export

log = logging.getLogger(__name__)

_LISTENERS: dict[int, BarrieredListener] = {}
_PATCHED = False


def _session_conf(spark: SparkSession) -> dict[str, str]:
    conf = spark.conf.getAll  # a property on classic and Connect sessions (pyspark >= 4)
    items = (conf() if callable(conf) else conf).items()
    return {k: v for k, v in items if k.startswith(PREFIX)}


def _pass_session_keys(reader: Any, spark: SparkSession) -> None:
    """Hand ``spark``'s barriered keys to the barriered source ``reader`` will load.

    The one place every barriered ``load()`` goes through (the hook and
    :func:`read_stream`), on classic and Spark Connect sessions; a driver-side check of
    the source's options before Spark loads it belongs here.
    """
    reader.option(SESSION_CONF_OPTION, json.dumps(_session_conf(spark)))


def _reader_classes() -> list[type]:
    from pyspark.sql.streaming.readwriter import DataStreamReader

    classes: list[type] = [DataStreamReader]
    try:
        from pyspark.sql.connect.streaming.readwriter import DataStreamReader as Connect
    except ImportError:  # a pyspark without the Connect client's dependencies
        log.debug("no Spark Connect client; only classic sessions are hooked")
    else:
        classes.append(Connect)
    return classes


def _patch_stream_reader() -> None:
    """Pass the session's barriered keys to the source on ``load()`` and check it there.

    A Python data source sees only its options, not the session configuration, so
    ``DataStreamReader.load`` of classic and Spark Connect sessions is wrapped to add
    them (as one hidden option) when the format is "barriered". Options the user set on
    the source still win. Should the hook not run (another client), the source refuses
    to start without the hidden option instead of using defaults. On a classic session,
    where this process is the driver, the source's load-time checks
    (:func:`barriered.datasource.preflight.check`) run here too, so a refusal is the
    project's own error, not Spark's wrapped ``PYTHON_DATA_SOURCE_ERROR``. (A Spark
    Connect client is not the driver and may not reach the snapshot path: there the
    source runs them.)
    """
    global _PATCHED
    if _PATCHED:
        return
    for cls in _reader_classes():
        _hook_load(cls)
    _PATCHED = True


def _hook_load(cls: Any) -> None:
    original_format = cls.format
    original_option = cls.option
    original_options = cls.options
    original_load = cls.load

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
            # classic readers keep their session in _spark, Connect readers in _client
            classic = getattr(self, "_spark", None)
            _pass_session_keys(self, classic or self._client)
            if classic is not None:  # this process is the driver: our own errors, unwrapped
                preflight.check(self.__dict__.get("_barriered_options", {}))
        return original_load(self, path=path, format=format, **kw)

    cls.format = format
    cls.option = option
    cls.options = options
    cls.load = load


def read_stream(spark: SparkSession) -> Any:
    """Return ``spark.readStream.format("barriered")`` with the session keys attached.

    The same reader as ``spark.readStream.format("barriered")`` after :func:`install`,
    without relying on its ``load()`` hook: the session's
    ``spark.sql.streaming.barriered.*`` keys are read now. Works on classic and Spark
    Connect sessions.

    Parameters
    ----------
    spark : SparkSession
        A session on which :func:`install` was called.

    Returns
    -------
    DataStreamReader
        Add the source's options, then ``load()``.
    """
    reader = spark.readStream.format("barriered")
    _pass_session_keys(reader, spark)
    return reader


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

    Idempotent; works on an existing session (a Databricks notebook's ``spark``), classic
    or Spark Connect, and never creates one. Checks that the coordinator's listener is
    registered with the session (a Spark Connect client drops its listeners when their
    event stream breaks: calling ``install`` again registers a new one) and logs it.
    When the session has no state store provider configured and no query is running, it
    sets ``spark.sql.streaming.stateStore.providerClass`` to RocksDB (which
    ``barriered.keyed()`` needs); another configured provider is kept, with a warning.

    Parameters
    ----------
    spark : SparkSession
        The session.

    Returns
    -------
    BarrieredListener
        The listener that coordinates every barriered query of this session.

    Raises
    ------
    barriered.errors.CheckpointError
        When the session did not keep the listener.
    """
    spark.dataSource.register(BarrieredDataSource)
    _use_rocksdb(spark)
    _patch_stream_reader()
    listener = _LISTENERS.get(id(spark))
    if listener is None or listener_registered(spark, listener) is False:
        listener = BarrieredListener()
        spark.streams.addListener(listener)
        _LISTENERS[id(spark)] = listener
    registered = listener_registered(spark, listener)
    kind = "Spark Connect" if _is_connect(spark) else "classic"
    if registered is False:
        raise CheckpointError(
            f"barriered.install(spark): the {kind} session did not keep the checkpoint "
            "coordinator's listener (spark.streams.addListener failed, see the warning "
            "above); no barriered query could take checkpoints. Call install again once "
            "the session is reachable"
        )
    log.info(
        "barriered installed on a %s session: format 'barriered' registered, checkpoint "
        "coordinator listener %s",
        kind,
        "registered" if registered else "added (registration not observable)",
    )
    return listener


def _is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def listener_registered(spark: SparkSession, listener: BarrieredListener) -> bool | None:
    """Whether ``spark`` delivers query events to ``listener``.

    Returns
    -------
    bool or None
        None when this pyspark does not let it be observed.
    """
    try:
        if _is_connect(spark):
            bus = spark.streams._sqlb  # type: ignore[attr-defined]
            thread = bus._execution_thread
            return bool(listener in bus._listener_bus and thread is not None and thread.is_alive())
        mine = listener._jlistener
        listeners = spark._jsparkSession.streams().listListeners()
        return bool(any(mine.equals(other) for other in listeners))
    except Exception:  # internals differ in this pyspark: say so, do not guess
        log.debug("cannot observe the listeners of this session", exc_info=True)
        return None


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
        if read_json(layout.operator_file(operator), default=None) != spec.to_dict():
            # Unchanged: not rewritten (a query refused on a path in use changes nothing).
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


def _query_coordinator(
    query: Any, timeout: float = 60.0
) -> tuple[BarrieredListener, QueryCoordinator]:
    """The coordinator of the query's current run.

    A restarted query keeps its id, and the listener makes the new run's coordinator at
    the run's first progress event, which Spark delivers asynchronously: until then the
    previous run's (fenced) coordinator is the one under the id, so this waits for the
    run's own.
    """
    run_id = str(query.runId)
    deadline = time.monotonic() + timeout
    while True:
        for listener in _LISTENERS.values():
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
    "listener_registered",
    "read_stream",
    "records",
    "savepoint",
    "snapshot_path",
]
