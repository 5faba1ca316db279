"""The machine, the versions and the one SparkSession the whole suite runs on."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

#: Where the JVM's console output of a run goes (:func:`divert_jvm_output`).
SPARK_LOG = Path(__file__).resolve().parents[1] / "build" / "benchmarks" / "spark.log"


def _first(path: str, prefix: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model and OS of this machine.

    Returns
    -------
    dict
        ``cores``, ``memory_gib``, ``cpu_model``, ``os``.
    """
    mem_kb = _first("/proc/meminfo", "MemTotal")
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(int(mem_kb.split()[0]) / 2**20, 1) if mem_kb else None,
        "cpu_model": _first("/proc/cpuinfo", "model name") or platform.processor() or None,
        "os": platform.platform(),
    }


def load_average() -> float | None:
    """The 1-minute load average (how busy the machine was), or None."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def versions(spark: Any | None = None) -> dict[str, str | None]:
    """Versions of Python, Java and the packages the numbers depend on."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for package in ("pyspark", "deltalake", "pyarrow", "pandas", "spark-barriered"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = None
    if spark is not None:
        out["java"] = spark.sparkContext._jvm.java.lang.System.getProperty("java.version")
    return out


def divert_jvm_output(path: Path = SPARK_LOG) -> None:
    """Send what a process started after this writes to its stderr to ``path``: the
    JVM's console log (Spark's stack traces of the tasks a workload kills when it stops its
    query mid-batch) and its Python workers' (their ``BrokenPipeError`` then). This
    process's own ``sys.stderr``, where the suite prints its progress and figures, stays
    where it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    own = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 2)
    os.close(log)
    sys.stderr = os.fdopen(own, "w", buffering=1, encoding="utf-8", errors="backslashreplace")


def session() -> Any:
    """The suite's SparkSession: the demo's local[2] session with the RocksDB state store.

    Returns
    -------
    SparkSession
        With barriered installed and every progress report kept.
    """
    import barriered
    from barriered.demo import local_session

    _start_with_provider_jar()
    spark = local_session()
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    barriered.install(spark)
    return spark


def _start_with_provider_jar() -> None:
    """Start the demo's session with the JVM provider's jar on the classpath (when it was
    built): the ``provider`` workload chooses the provider per query; every other query
    keeps RocksDB, the session's default. ``BENCH_PROVIDER_JAR`` names another build of
    the jar (to compare builds: e.g. one built from an older commit; it must hold the
    session extension ``RestoredWatermark``, which ``with_state_store`` also sets)."""
    import sys

    from pyspark.sql import SparkSession

    from barriered.errors import ConfigError
    from barriered.provider import EXTENSION_CLASS, check_version, jar_path

    if SparkSession.getActiveSession() is not None:
        return
    try:
        check_version()
        jar = os.environ.get("BENCH_PROVIDER_JAR") or jar_path()
    except ConfigError:
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    (
        SparkSession.builder.master("local[2]")
        .appName("barriered-benchmarks")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # 10M keys collected as Arrow (the state processor's plain Delta baseline) need more
        # than the default 1g of driver heap.
        .config("spark.driver.memory", "4g")
        .config("spark.jars", jar)
        .config("spark.sql.extensions", EXTENSION_CLASS)  # as with_state_store sets it
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .getOrCreate()
    )
