"""A real Spark standalone cluster on this machine: a master and two workers, each a JVM.

Started from the pyspark package's own ``bin/spark-class`` (no download), bound to
127.0.0.1, with its logs, work folders and every process it starts under one folder.
Executors are separate JVMs launched by the workers, so killing one (SIGKILL by pid) is
a real executor loss: Spark re-runs its tasks elsewhere.

Process bookkeeping is Linux ``/proc``: the descendants of a process, and every process
whose working folder lies under the cluster's folder (an executor's Python workers keep
the executor's folder as theirs even after the executor died).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import barriered
from hadoop_aws import EXECUTOR_CLASSPATH, classpath, with_s3a

WORKERS = 2
#: Each worker hosts one executor of the tests' session and one of a driver process's
#: (``cluster_driver.py``) at the same time.
WORKER_CORES, WORKER_MEMORY = 2, "4g"
EXECUTOR_MEMORY = "1536m"
EXECUTOR_JVM = "CoarseGrainedExecutorBackend"
#: The folder ``barriered`` is imported from (the worktree's ``python/`` folder, or the
#: editable install's): the executors' Python workers import the same.
PACKAGE_ROOT = str(Path(barriered.__file__).resolve().parents[1])
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of ``pid``, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z"


def cmdline(pid: int) -> str:
    """The command line of ``pid`` ('' when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid`` (children first)."""
    children: dict[int, list[int]] = {}
    for p in _pids():
        stat = _stat(p)
        if stat is not None:
            children.setdefault(stat[0], []).append(p)
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def executor_of(pid: int) -> int:
    """The executor JVM that ``pid`` (a Python worker of a task) runs under."""
    p: int | None = pid
    while p is not None and p > 1:
        if EXECUTOR_JVM in cmdline(p):
            return p
        stat = _stat(p)
        p = None if stat is None else stat[0]
    raise AssertionError(f"process {pid} does not run under an executor JVM")


def under(folder: Path) -> list[int]:
    """Every living process whose working folder is ``folder`` or below it."""
    root = str(folder.resolve())
    found = []
    for p in _pids():
        with contextlib.suppress(OSError):
            cwd = os.readlink(f"/proc/{p}/cwd")
            if (cwd == root or cwd.startswith(root + "/")) and alive(p):
                found.append(p)
    return found


def kill(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM ``pids``, SIGKILL what is left after ``grace_s``; return what survived."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        for p in pids:
            if alive(p):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
    return [p for p in pids if alive(p)]


def spark_home() -> str:
    """SPARK_HOME of the installed pyspark package."""
    from pyspark.find_spark_home import _find_spark_home

    return str(_find_spark_home())


@dataclass
class Cluster:
    """A running standalone cluster; :meth:`stop` ends every process it started."""

    folder: Path
    master_url: str
    daemons: list[subprocess.Popen[bytes]]
    started_s: float
    killed: list[int] = field(default_factory=list)

    def executors(self) -> list[int]:
        """Pids of the executor JVMs the workers run now."""
        return [
            p
            for d in self.daemons[1:]
            for p in descendants(d.pid)
            if EXECUTOR_JVM in cmdline(p) and alive(p)
        ]

    def kill_executor(self, pid: int) -> int:
        """Lose the executor running the Python worker ``pid``: SIGKILL its JVM and the
        processes it started, as a lost machine would; return the JVM's pid."""
        jvm = executor_of(pid)
        family = descendants(jvm)
        os.kill(jvm, signal.SIGKILL)
        for p in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        self.killed.append(jvm)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(p) for p in [jvm, *family]):
            time.sleep(0.05)
        return jvm

    def stop(self) -> list[int]:
        """Kill every process of the cluster by pid (workers' children first); return
        the pids that survived (none, unless something is badly wrong)."""
        started = [d.pid for d in self.daemons]
        family = [p for d in self.daemons[1:] for p in descendants(d.pid)]
        left = kill([*family, *under(self.folder)], grace_s=5.0)
        left += kill([*reversed(started), *under(self.folder)], grace_s=5.0)
        for d in self.daemons:
            with contextlib.suppress(subprocess.TimeoutExpired):
                d.wait(timeout=5)
        return sorted(set(left + [p for p in under(self.folder) if alive(p)]))


def _launch(folder: Path, name: str, args: list[str], env: dict[str, str]) -> Any:
    log = (folder / f"{name}.log").open("wb")
    cmd = [os.path.join(spark_home(), "bin", "spark-class"), *args]
    return subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait_log(path: Path, text: str, count: int, timeout_s: float, procs: list[Any]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(errors="replace").count(text) >= count:
            return
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a cluster daemon exited early; see the logs under {path.parent}")
        time.sleep(0.2)
    raise TimeoutError(f"{text!r} did not appear {count}x in {path} within {timeout_s}s")


def start(folder: Path, workers: int = WORKERS) -> Cluster:
    """Start a master and ``workers`` workers (:data:`WORKER_CORES` cores each) on
    127.0.0.1 under ``folder``.

    On any failure every process started so far is killed before the error propagates.
    """
    if not sys.platform.startswith("linux"):
        raise RuntimeError("the standalone-cluster tests need Linux (/proc)")
    folder.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": spark_home(),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(folder),
        "SPARK_DAEMON_MEMORY": "384m",
        "SPARK_NO_DAEMONIZE": "1",
    }
    begin = time.monotonic()
    port = free_port()
    args = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
    master = _launch(folder, "master", [*args, "--webui-port", str(free_port())], env)
    cluster = Cluster(folder, f"spark://127.0.0.1:{port}", [master], 0.0)
    try:
        _wait_log(folder / "master.log", "I have been elected leader", 1, 90, [master])
        for i in range(workers):
            work = folder / f"work-{i}"
            work.mkdir()
            args = ["org.apache.spark.deploy.worker.Worker", cluster.master_url]
            args += ["--host", "127.0.0.1", "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY]
            args += ["--work-dir", str(work), "--webui-port", str(free_port())]
            cluster.daemons.append(_launch(folder, f"worker-{i}", args, env))
        _wait_log(folder / "master.log", "Registering worker", workers, 90, cluster.daemons)
    except BaseException:
        cluster.stop()
        raise
    cluster.started_s = time.monotonic() - begin
    return cluster


def builder(master_url: str, app: str) -> Any:
    """A session builder for the cluster at ``master_url``: one 1-core executor on each
    worker, this process's Python and ``barriered`` on the executors, RocksDB as the
    state store, and the barriered provider's jar and extension (a query sets
    ``spark.sql.streaming.stateStore.providerClass`` to use it) with Hadoop's ``s3a`` on
    the driver's and the executors' class paths, for Spark's checkpoint locations and
    the provider's tables on the local S3 server."""
    from pyspark.sql import SparkSession

    python = sys.executable
    pythonpath = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    session = (
        SparkSession.builder.master(master_url)
        .appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.executor.memory", EXECUTOR_MEMORY)
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", str(WORKERS))
        .config("spark.task.maxFailures", "4")
        .config("spark.pyspark.python", python)
        .config("spark.pyspark.driver.python", python)
        .config("spark.executorEnv.PYSPARK_PYTHON", python)
        .config("spark.executorEnv.PYTHONPATH", pythonpath)
        # The Python worker connecting back to its executor can be slow on 2 busy cores.
        .config("spark.python.authenticate.socketTimeout", "120s")
        .config("spark.network.timeout", "300s")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config(EXECUTOR_CLASSPATH, ":".join(classpath()))
    )
    session = barriered.with_state_store(with_s3a(session))
    return session.config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
