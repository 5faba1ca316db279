"""The session of the provider tests: local[2] with the barriered state store provider.

A JVM loads the provider's jar only at start, so these tests run on a session of their
own: ``tests/conftest.py`` runs every test marked ``provider`` after the shared local
session's tests (it is stopped first) and before the cluster and Connect tests. Both
sessions put Hadoop's ``s3a`` on the class path (``tests/hadoop_aws.py``), for the
operator tables on the local S3 server.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import barriered

log = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent


def _stop_other_session() -> None:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    other = SparkSession._instantiatedSession
    if other is not None:
        log.info("stopping the shared SparkSession before the provider session starts")
        other.stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


@pytest.fixture(scope="session")
def provider_spark() -> Iterator[Any]:
    """A local[2] session whose state store is the barriered provider."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(HERE) not in paths:  # executors' Python workers import queries.py too
        os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, paths)])
    from pyspark.sql import SparkSession

    from hadoop_aws import with_s3a

    _stop_other_session()
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("barriered-provider-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
    )
    session = barriered.with_state_store(with_s3a(builder)).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    barriered.install(session)
    yield session
    session.stop()
