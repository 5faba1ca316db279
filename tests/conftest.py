"""Shared fixtures: one local SparkSession for the whole test session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the standalone-cluster tests last: their session replaces the local one (one
    SparkContext per process), see ``tests/cluster/conftest.py``."""
    items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] SparkSession with the RocksDB state store, shared by every Spark test."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("barriered-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture()
def session(spark: Any) -> Iterator[Any]:
    """The shared session with barriered installed and per-test barriered keys reset."""
    import barriered
    from runs import PREFIX

    barriered.install(spark)
    spark.conf.set(PREFIX + "checkpointInterval", "10ms")
    spark.conf.set(PREFIX + "maxParallelism", "8")
    spark.conf.set(PREFIX + "bufferPerChannel", "100")
    spark.conf.set(PREFIX + "retainedCheckpoints", "100")  # every version stays readable
    yield spark
    for key in list(spark.conf.getAll):
        if key.startswith(PREFIX):
            spark.conf.unset(key)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
