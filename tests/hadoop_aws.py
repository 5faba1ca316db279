"""Hadoop's ``s3a`` filesystem on the class path of the tests' Spark JVMs.

The JVM state store provider writes its operator tables through Hadoop's filesystem API;
for a snapshot path on the local S3 server (``s3_server.py``) that is ``s3a``, which
pyspark does not ship: ``hadoop-aws`` of pyspark's Hadoop and the AWS SDK bundle it names.
``make install`` (``make s3a``) resolves them through ``tests/hadoop-aws/pom.xml`` into
Maven's cache (``~/.m2``, about 700 MB, downloaded once per machine) and writes their paths
to :data:`CLASSPATH_FILE`; nothing is copied into the worktree.

A JVM reads its class path once, when it starts, and a test process starts one JVM for
all its sessions (``conftest.py``'s ``spark``, then ``provider/conftest.py``'s
``provider_spark``): every session builder of the tests therefore goes through
:func:`with_s3a`, which puts the jars on ``spark.driver.extraClassPath`` (the driver's and,
in local mode, the executors' class path, read from Maven's cache in place; ``spark.jars``
would copy 700 MB into each session's work folder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CLASSPATH_FILE = Path(__file__).resolve().parents[1] / "build" / "hadoop-aws" / "classpath.txt"
EXTRA_CLASSPATH = "spark.driver.extraClassPath"
#: Where a cluster's executors (JVMs of their own, unlike local mode's) get the jars.
EXECUTOR_CLASSPATH = "spark.executor.extraClassPath"


def classpath() -> list[str]:
    """The jars of ``s3a`` (``hadoop-aws``, the AWS SDK bundle), or none when ``make s3a``
    did not run or Maven's cache lost one of them."""
    if not CLASSPATH_FILE.is_file():
        return []
    jars = [j for j in CLASSPATH_FILE.read_text().strip().split(":") if j]
    return jars if jars and all(Path(j).is_file() for j in jars) else []


#: ``s3a``'s upload of a local file (``copyFromLocalFile``: RocksDB's files to a checkpoint
#: location) fails against moto's server with "Status Code: 100" (its ``100 Continue``
#: is taken for the answer); the plain ``FileSystem`` copy (a stream, as every other
#: write) does not. S3 itself is unaffected.
STREAM_COPY = ("spark.hadoop.fs.s3a.optimized.copy.from.local.enabled", "false")


def with_s3a(builder: Any) -> Any:
    """A session builder with :func:`classpath` added to ``spark.driver.extraClassPath``
    and :data:`STREAM_COPY` (kept as it was without the jars); returns it."""
    jars = classpath()
    if not jars:
        return builder
    given = str(getattr(builder, "_options", {}).get(EXTRA_CLASSPATH, ""))
    entries = [e for e in given.split(":") if e]
    return builder.config(
        EXTRA_CLASSPATH, ":".join([*entries, *(j for j in jars if j not in entries)])
    ).config(*STREAM_COPY)


def missing() -> str | None:
    """Why this JVM cannot reach ``s3a://`` (the message says how to fix it), or None."""
    if not classpath():
        return (
            f"{CLASSPATH_FILE} is missing or names a jar that is gone: run `make install` "
            "(or `make s3a`) to fetch hadoop-aws and the AWS SDK bundle into ~/.m2"
        )
    return None
