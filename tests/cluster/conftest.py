"""Fixtures of the standalone-cluster tests: the cluster, and a SparkSession on it.

A Python process can hold one SparkContext, so the cluster session replaces the local
``spark`` session of ``tests/conftest.py``: ``tests/conftest.py`` runs every test marked
``cluster`` after all the others, and :func:`cluster` stops the local session (if one
was started) before it connects. The two never run at the same time.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standalone import WORKERS, Cluster, alive, builder, start

import barriered
from barriered.testing.session import barriered_keys

log = logging.getLogger(__name__)

# The provider tests' queries (``queries.py``) and the S3 recovery tests' input files run
# on the cluster too: importable here and in the driver processes (``runs.launch_driver``
# passes this ``sys.path`` on).
for _folder in ("provider", "recovery"):
    if (_path := str(Path(__file__).resolve().parents[1] / _folder)) not in sys.path:
        sys.path.append(_path)


def _stop_local_session() -> None:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    local = SparkSession._instantiatedSession
    if local is not None:
        log.info("stopping the local SparkSession before the cluster session starts")
        local.stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


def _session(cluster: Cluster) -> Any:
    session = builder(cluster.master_url, "barriered-cluster-tests").getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    assert session.sparkContext.master == cluster.master_url, "a local session is in the way"
    return session


def wait_executors(spark: Any, count: int = WORKERS, timeout_s: float = 120.0) -> None:
    """Wait until ``count`` executors are registered with the driver."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
        if len(infos) - 1 >= count:  # the driver is listed too
            return
        time.sleep(0.2)
    raise TimeoutError(f"fewer than {count} executors registered within {timeout_s}s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Any]]:
    """A master, two workers and a SparkSession on them; every process they started
    (executors and their Python workers included) is killed by pid afterwards, even
    when starting failed half-way."""
    _stop_local_session()
    folder = tmp_path_factory.mktemp("standalone")
    cluster = start(folder)
    session = None
    try:
        begin = time.monotonic()
        session = _session(cluster)
        wait_executors(session)
        log.warning(
            "standalone cluster up in %.1f s (master+workers), session+executors %.1f s",
            cluster.started_s,
            time.monotonic() - begin,
        )
        yield cluster, session
    finally:
        if session is not None:
            session.stop()
        left = cluster.stop()
        daemons = [d.pid for d in cluster.daemons]
        assert not left and not any(alive(p) for p in daemons), f"processes left: {left}"


@pytest.fixture()
def cluster_session(cluster: tuple[Cluster, Any]) -> Iterator[Any]:
    """The cluster's session with barriered installed, two live executors and the
    per-test barriered keys of the local ``session`` fixture (reset afterwards)."""
    _, spark = cluster
    wait_executors(spark)
    barriered.install(spark)
    keys = {
        "checkpointInterval": "10ms",
        "maxParallelism": "8",
        "bufferPerChannel": "100",
        "retainedCheckpoints": "100",
    }
    with barriered_keys(spark, keys):
        yield spark
