"""How barriered attaches to a Spark session: ``install`` and ``read_stream``.

``install`` registers the "barriered" data source, the "barriered-delta" and
"barriered-kafka" sinks and the checkpoint coordinator's query listener, makes RocksDB
the state store where nothing else was chosen, and hooks ``load()`` of the classic and
Spark Connect stream readers (and ``start()`` of the writers, for the sinks) so that the
session's
``spark.sql.streaming.barriered.*`` keys reach the source and the sink (a Python data
source sees only its options). ``uninstall`` removes the listener again; so does the
interpreter's exit, for Spark Connect sessions (see :func:`_remove_listeners_at_exit`).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from pyspark.sql import SparkSession

from barriered import worker_python
from barriered.config import PREFIX
from barriered.config.sink_options import PATH as SINK_PATH
from barriered.config.source_options import SESSION_CONF_OPTION, SESSION_EXTENSIONS
from barriered.coordinator.listener import BarrieredListener
from barriered.datasource import preflight
from barriered.datasource.source import BarrieredDataSource
from barriered.errors import CheckpointError, unwrapped
from barriered.files import storage
from barriered.sink import BarrieredDeltaSink, writer
from barriered.sink.kafka import writer as kafka_writer
from barriered.sink.kafka.writer import BarrieredKafkaSink

log = logging.getLogger(__name__)

#: The checkpoint coordinator's listener of every session barriered is installed on.
_INSTALLED: dict[int, tuple[SparkSession, BarrieredListener]] = {}
_PATCHED = False
_EXIT_HOOK = False


def session_conf(spark: SparkSession) -> dict[str, str]:
    """The session's ``spark.sql.streaming.barriered.*`` keys (and its extensions), as the
    source receives them."""
    conf = spark.conf.getAll  # a property on classic and Connect sessions (pyspark >= 4)
    items = (conf() if callable(conf) else conf).items()
    return {k: v for k, v in items if k.startswith(PREFIX) or k == SESSION_EXTENSIONS}


def _pass_session_keys(reader: Any, spark: SparkSession) -> None:
    """Hand ``spark``'s barriered keys to the barriered source ``reader`` will load.

    The one place every barriered ``load()`` goes through (the hook and
    :func:`read_stream`), on classic and Spark Connect sessions; a driver-side check of
    the source's options before Spark loads it belongs here.
    """
    reader.option(SESSION_CONF_OPTION, json.dumps(session_conf(spark)))


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
    (:func:`barriered.datasource.preflight.checked`) run here too, so a refusal is the
    project's own error, not Spark's wrapped ``PYTHON_DATA_SOURCE_ERROR``. (A Spark
    Connect client is not the driver and may not reach the snapshot path: there the
    source runs them.)
    """
    global _PATCHED
    if _PATCHED:
        return
    for cls in _reader_classes():
        _hook_load(cls)
    for cls in _writer_classes():
        _hook_start(cls)
    _PATCHED = True


def _record_settings(cls: Any) -> None:
    """Make a stream reader or writer class remember the format and the options it is
    given (``_barriered_format``, ``_barriered_options``): the JVM keeps them to itself,
    and the hooks of ``load()`` and ``start()`` check them before Spark sees them."""
    original_format = cls.format
    original_option = cls.option
    original_options = cls.options

    def format(self: Any, source: str) -> Any:
        self._barriered_format = source
        return original_format(self, source)

    def record(self: Any, options: dict[str, Any]) -> None:
        recorded = self.__dict__.setdefault("_barriered_options", {})
        recorded.update({k: str(v) for k, v in options.items() if v is not None})

    def option(self: Any, key: str, value: Any) -> Any:
        record(self, {key: value})
        return original_option(self, key, value)

    def options(self: Any, **opts: Any) -> Any:
        record(self, opts)
        return original_options(self, **opts)

    cls.format = format
    cls.option = option
    cls.options = options


def _hook_load(cls: Any) -> None:
    _record_settings(cls)
    original_load = cls.load

    def load(self: Any, path: str | None = None, format: str | None = None, **kw: Any) -> Any:
        fmt = format or getattr(self, "_barriered_format", None)
        if fmt != "barriered":
            return original_load(self, path=path, format=format, **kw)
        # classic readers keep their session in _spark, Connect readers in _client
        classic = getattr(self, "_spark", None)
        _pass_session_keys(self, classic or self._client)
        if classic is not None:  # this process is the driver: our own errors, unwrapped
            _, layout, _ = preflight.checked(self.__dict__.get("_barriered_options", {}))
            storage.configure_hadoop(classic, layout.root)
        with unwrapped():  # the worker's checks (Spark Connect): our error first
            return original_load(self, path=path, format=format, **kw)

    cls.load = load


def _writer_classes() -> list[type]:
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    classes: list[type] = [DataStreamWriter]
    try:
        from pyspark.sql.connect.streaming.readwriter import DataStreamWriter as Connect
    except ImportError:
        log.debug("no Spark Connect client; only classic writers are hooked")
    else:
        classes.append(Connect)
    return classes


def _hook_start(cls: Any) -> None:
    """Hand the session's barriered keys (``snapshotPath``) to the "barriered-delta" sink
    and, on a classic session (this process is the driver), check the sink before the
    query starts (:func:`barriered.sink.writer.before_start`), so a refusal writes
    nothing. (Spark creates the sink's writer only after the source planned the first
    batch; on Spark Connect the sink checks itself then.) The "barriered-kafka" sink's
    secrets are kept in this process on either session (its coordinator, which
    publishes, runs here): :func:`barriered.sink.kafka.writer.remember`."""
    _record_settings(cls)
    original_start = cls.start

    def start(self: Any, *args: Any, **kw: Any) -> Any:
        given = kw.get("format") or (args[1] if len(args) > 1 else None)
        fmt = given or getattr(self, "_barriered_format", None)
        if fmt not in (BarrieredDeltaSink.name(), BarrieredKafkaSink.name()):
            return original_start(self, *args, **kw)
        classic = getattr(self, "_spark", None)
        keys = json.dumps(session_conf(classic or self._session))
        self.option(SESSION_CONF_OPTION, keys)
        df = getattr(self, "_df", None)
        sink_options = {
            **self.__dict__.get("_barriered_options", {}),
            **{k: str(v) for k, v in kw.items() if k not in _START_ARGS and v is not None},
        }
        path = kw.get("path") or (args[0] if args else None)
        if path is not None:
            sink_options[SINK_PATH.name] = str(path)
        if classic is not None and df is not None:
            check = (
                writer.before_start
                if fmt == BarrieredDeltaSink.name()
                else kafka_writer.before_start
            )
            check(sink_options, df.schema)
        elif fmt == BarrieredKafkaSink.name():  # Connect: the coordinator publishes here
            kafka_writer.remember(sink_options)
        with unwrapped():
            return original_start(self, *args, **kw)

    cls.start = start


#: ``DataStreamWriter.start``'s own parameters (its other keyword arguments are options).
_START_ARGS = frozenset({"path", "format", "outputMode", "partitionBy", "queryName"})


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

    ``barriered.keyed()`` runs on ``applyInPandasWithState``, which works under any
    provider; RocksDB keeps large state off the JVM heap, so it is the default here. The
    key is set only when the session has none and runs no query; another provider is
    kept.
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
        log.info("%s is %s: barriered.install() keeps it", STATE_STORE_PROVIDER, configured)


def install(spark: SparkSession) -> BarrieredListener:
    """Register the "barriered" source and the checkpoint coordinator on ``spark``.

    Idempotent; works on an existing session (a Databricks notebook's ``spark``), classic
    or Spark Connect, and never creates one. Checks that the coordinator's listener is
    registered with the session (a Spark Connect client drops its listeners when their
    event stream breaks: calling ``install`` again registers a new one) and logs it.
    When the session has no state store provider configured and no query is running, it
    sets ``spark.sql.streaming.stateStore.providerClass`` to RocksDB (which
    ``barriered.keyed()`` needs); another configured provider is kept, with a warning.
    On a local classic session it first checks that Spark's Python workers can import
    barriered (:mod:`barriered.worker_python`).

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
    barriered.errors.WorkerPythonError
        On a local classic session, when the interpreter Spark starts its Python workers
        with (``PYSPARK_PYTHON``, ``python3`` when unset) cannot import barriered.
    """
    if not _is_connect(spark):
        worker_python.check(spark)
    spark.dataSource.register(BarrieredDataSource)
    spark.dataSource.register(BarrieredDeltaSink)
    spark.dataSource.register(BarrieredKafkaSink)
    _use_rocksdb(spark)
    _patch_stream_reader()
    _remove_listeners_at_exit()
    listener = _INSTALLED[id(spark)][1] if id(spark) in _INSTALLED else None
    if listener is None or listener_registered(spark, listener) is False:
        listener = BarrieredListener()
        spark.streams.addListener(listener)
        _INSTALLED[id(spark)] = (spark, listener)
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


def uninstall(spark: SparkSession) -> None:
    """Remove the checkpoint coordinator's listener from ``spark``.

    On a Spark Connect session the listener is served by a thread of pyspark's that
    reads the server's query events and keeps the interpreter alive until the listener
    is removed: the interpreter's exit removes it (so a script ends by itself once it
    returns, with or without ``spark.stop()``); call this to end that thread earlier,
    in a process that goes on without barriered queries. A query that is still running
    takes no checkpoint after this (its coordinator is the listener): call it once
    every barriered query of the session has ended, or :func:`install` again.
    Idempotent; the formats stay registered.

    Parameters
    ----------
    spark : SparkSession
        A session on which :func:`install` was called (another one is left as it is).
    """
    installed = _INSTALLED.pop(id(spark), None)
    if installed is None:
        return
    listener = installed[1]
    running = listener.running()
    if running:
        log.warning(
            "barriered: removing the checkpoint coordinator while query runs %s are still "
            "running: they take no further checkpoint",
            running,
        )
    spark.streams.removeListener(listener)
    log.info("barriered uninstalled: the checkpoint coordinator's listener is removed")


def _remove_listeners_at_exit() -> None:
    """At the interpreter's exit, remove the listener of every Spark Connect session.

    pyspark's Spark Connect client delivers query events to its listeners on a
    non-daemon thread that blocks on the server's event stream until the last listener
    is removed or the session stopped, so a script that returned would never end.
    Python's ``atexit`` runs only after such threads are joined; ``threading``'s own exit
    hook (which ``concurrent.futures`` uses to stop its workers, and which runs before
    they are joined, latest registered first: this one before the Connect client's
    thread pools shut down) does not. A classic session's listener is served by py4j's
    daemon threads and needs nothing.
    """
    global _EXIT_HOOK
    if _EXIT_HOOK:
        return
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # not CPython >= 3.9: nothing to hook (install still works)
        log.warning("barriered: no threading exit hook; call barriered.uninstall(spark)")
        return
    register(_remove_connect_listeners)
    _EXIT_HOOK = True


def _remove_connect_listeners() -> None:
    for spark, listener in list(_INSTALLED.values()):
        if _is_connect(spark) and listener_registered(spark, listener):
            try:
                uninstall(spark)
            except Exception:  # the exit goes on: never keep the interpreter alive
                log.warning("barriered: could not remove the listener at exit", exc_info=True)


def listener_of(query: Any) -> BarrieredListener | None:
    """The installed listener that saw this run of ``query`` start (None if none did)."""
    run_id = query.runId
    return next((lis for _, lis in _INSTALLED.values() if lis.knows(run_id)), None)


def installed_listeners() -> list[BarrieredListener]:
    """The listener of every session barriered is installed on."""
    return [listener for _, listener in _INSTALLED.values()]


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


__all__ = ["install", "listener_registered", "read_stream", "uninstall"]
