"""Shared fixtures: one local SparkSession, and one local Spark Connect server, per test
session.

A local Spark Connect server (``SparkSession.builder.remote("local[2]")``) runs in this
process's JVM on a classic session of its own, so it cannot start while the classic
``spark`` fixture's session (or the standalone cluster's) runs. Tests marked ``connect``
therefore run last (see :func:`pytest_collection_modifyitems`); the first of them stops
the classic session and starts the server, which serves every other Connect test.

Tests marked ``kafka`` share one local Apache Kafka broker (``kafka_broker``), started on
first use and stopped at the end of the session.

Fault injection (:mod:`barriered.testing.faults`) is switched on here, before any
barriered module is imported or any Spark process starts, so every process the tests
start (Spark's JVMs and Python workers, subprocess drivers, cluster workers) inherits it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# barriered.crash_points.ENV, read at import: the module handling the fault points
os.environ["BARRIERED_FAULTS"] = "barriered.testing.faults"

if TYPE_CHECKING:
    from kafka_broker import KafkaBroker
    from s3_server import S3Server

_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
}


_BROKERS: list[KafkaBroker] = []  # the session's broker, for the closing summary


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One SparkContext per process: every local-session test first, then the provider
    tests (their session loads the JVM state store provider, see
    ``tests/provider/conftest.py``), then the standalone-cluster tests (their session
    replaces the local one, see ``tests/cluster/conftest.py``), then the Spark Connect
    tests (one server, started last)."""

    def phase(item: pytest.Item) -> int:
        if item.get_closest_marker("connect") is not None:
            return 3
        if item.get_closest_marker("cluster") is not None:
            return 2
        return 1 if item.get_closest_marker("provider") is not None else 0

    items.sort(key=phase)


def _builder(builder: Any) -> Any:
    for key, value in _CONF.items():
        builder = builder.config(key, value)
    return builder


def _python_workers_see_the_tests() -> None:
    """Put this folder and ``provider/`` on the Python path of the JVM about to start, so
    its Python workers (executors' and the driver-side ones of transformWithState) import
    test modules that queries use (``foreign_state``, ``queries``) as this process does.
    The JVM outlives the session (the provider tests start theirs in it): its workers see
    the Python path it started with."""
    here = Path(__file__).resolve().parent
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    missing = [str(p) for p in (here, here / "provider") if str(p) not in paths]
    if missing:
        os.environ["PYTHONPATH"] = os.pathsep.join([*missing, *filter(None, paths)])


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] SparkSession with the RocksDB state store, shared by every Spark test."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    _python_workers_see_the_tests()
    from pyspark.sql import SparkSession

    from hadoop_aws import with_s3a

    if os.environ.get("SPARK_CONNECT_MODE_ENABLED"):
        pytest.fail("the classic session cannot start after the Spark Connect server")
    session = _builder(SparkSession.builder.master("local[2]").appName("barriered-tests"))
    # s3a for the provider's tables on the S3 server: the later provider session runs in
    # this JVM, whose class path is fixed now (hadoop_aws.py)
    session = with_s3a(session)
    jar = (
        Path(__file__).resolve().parents[1] / "python" / "barriered" / "jars" / "barriered-shim.jar"
    )
    if jar.exists():
        # A JVM puts spark.jars on the driver's class path only when it starts: the
        # provider tests' session, started later in this JVM, needs the jar there. The
        # provider's notebook runs on this session: its restore needs the extension.
        session = session.config("spark.jars", str(jar))
        from barriered.provider import EXTENSION_CLASS

        session = session.config("spark.sql.extensions", EXTENSION_CLASS)
    session = session.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_spark() -> Iterator[object]:
    """A Spark Connect session to a local[2] server started here, shared by every Connect
    test; the classic session, if one ran, is stopped first."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    _python_workers_see_the_tests()
    from pyspark.sql import SparkSession

    classic = SparkSession._instantiatedSession
    if classic is not None:
        classic.stop()
    with warnings.catch_warnings():  # static confs the client cannot set (the server has them)
        warnings.simplefilter("ignore", UserWarning)
        session = _builder(SparkSession.builder.remote("local[2]")).getOrCreate()
    yield session
    session.stop()


@pytest.fixture()
def session(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The shared session with barriered installed and per-test barriered keys reset:
    classic, or Spark Connect when parametrized with ``"connect"`` (see ``runs.BOTH``)."""
    import barriered
    from runs import PREFIX

    kind = getattr(request, "param", "classic")
    spark = request.getfixturevalue("spark" if kind == "classic" else "connect_spark")
    barriered.install(spark)
    spark.conf.set(PREFIX + "checkpointInterval", "10ms")
    spark.conf.set(PREFIX + "maxParallelism", "8")
    spark.conf.set(PREFIX + "bufferPerChannel", "100")
    spark.conf.set(PREFIX + "retainedCheckpoints", "100")  # every version stays readable
    yield spark
    for query in spark.streams.active:  # a test that left its query running
        query.stop()
    for key in list(spark.conf.getAll):
        if key.startswith(PREFIX):
            spark.conf.unset(key)
    spark.conf.set("spark.sql.shuffle.partitions", "2")


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """One KRaft Kafka broker on free localhost ports for the whole test session
    (``tests/kafka_broker.py``), started on first use and stopped by pid at the end.
    Skipped only when Java is missing; missing jars (``make install``) are an error."""
    try:
        from barriered.local.kafka_broker import java
        from kafka_broker import KafkaBroker
    except ModuleNotFoundError as exc:  # confluent-kafka: the kafka extra
        raise RuntimeError(f"{exc}: run `make install` (installs .[test,plot,kafka])") from exc
    if java() is None:
        pytest.skip("the Kafka tests start a local Kafka broker, which needs java (Java 17+)")
    broker = KafkaBroker().start()
    _BROKERS.append(broker)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One local S3 server (moto's, ``tests/s3_server.py``) with one bucket for the whole
    test session, started on first use and stopped by pid at the end."""
    from s3_server import S3Server

    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for broker in _BROKERS:
        terminalreporter.write_line(
            f"Kafka broker (KRaft, build/kafka/): log directory formatted in "
            f"{broker.formatted_in:.1f} s, broker answered {broker.started_in:.1f} s after launch"
        )
