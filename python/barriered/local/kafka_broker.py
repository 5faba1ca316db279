"""A local Apache Kafka broker: KRaft, broker and controller in one process.

:class:`KafkaBroker` writes a ``server.properties`` (:data:`CONFIG`) in a temporary
folder of its own, formats the log directory (``kafka.tools.StorageTool format``), runs
``kafka.Kafka`` from the jars ``make kafka`` (part of ``make install``) fetched into
``build/kafka/`` as a child process on two free ports of 127.0.0.1 (clients,
controller), waits until it answers, and stops it by pid. Nothing is downloaded here.
``barriered kafka-broker`` runs one until Ctrl-C; the test suite's broker
(``tests/kafka_broker.py``) is one too.

The broker is a child of this process: it gets SIGTERM when this process dies, however it
dies (``PR_SET_PDEATHSIG``), and :meth:`KafkaBroker.stop` runs at exit too. Its log (WARN
and above) is ``broker.log`` in its folder.
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from barriered.errors import LocalServerError
from barriered.local.processes import (
    die_with_parent,
    free_port,
    running,
    stop,
    wait_until_it_answers,
)

log = logging.getLogger(__name__)

#: ``build/kafka/`` of the checkout this package runs from (``make kafka`` fills it).
JARS = Path(__file__).resolve().parents[3] / "build" / "kafka"
CONFIG = Path(__file__).resolve().parent  # kafka_server.properties, kafka_log4j2.xml
START_TIMEOUT = 60.0
STOP_GRACE = 15.0
JVM = ("-Xmx384m", "-Xss1m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
FOLDER_PREFIX = "barriered-kafka-"
PID_FILE = "broker.pid"


def java() -> str | None:
    """The ``java`` that will run the broker (``JAVA_HOME`` first), or ``None``."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


class KafkaBroker:
    """A single-node KRaft Kafka broker in a temporary folder, on free localhost ports.

    :meth:`start` it, give clients :attr:`bootstrap`; :meth:`stop` ends the process
    (SIGTERM, SIGKILL after a grace period) and removes the folder.

    Parameters
    ----------
    jars : Path
        The folder of the broker's jars (default :data:`JARS`).
    """

    def __init__(self, jars: Path = JARS) -> None:
        self.jars = jars
        self.folder: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.controller_port = 0
        self.formatted_in = 0.0  # seconds the storage tool took to format the log directory
        self.started_in = 0.0  # seconds from launch until it answered

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` clients connect to."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaBroker:
        """Format a log directory, launch the broker, and wait until it answers.

        Raises
        ------
        LocalServerError
            No Java, no jars (run ``make kafka``), no confluent-kafka client, or the
            broker did not come up (the end of its log in the message).
        """
        try:
            from confluent_kafka.admin import AdminClient
        except ImportError as exc:
            raise LocalServerError(
                "the Kafka broker is checked with confluent-kafka: pip install "
                "'spark-barriered[kafka]'"
            ) from exc
        java_bin = java()
        if java_bin is None:
            raise LocalServerError("java is not on the PATH (the Kafka broker needs Java 17+)")
        if not any(self.jars.glob("kafka_2.13-*.jar")):
            raise LocalServerError(
                f"no Kafka jars in {self.jars}: run `make kafka` in the spark-barriered "
                "checkout (it fetches them from Maven Central), or name their folder"
            )
        _remove_dead_brokers_folders()
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
        self.port, self.controller_port = free_port(), free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        properties = self.folder / "server.properties"
        template = (CONFIG / "kafka_server.properties").read_text()
        data = self.folder / "data"
        properties.write_text(
            template.format(port=self.port, controller=self.controller_port, data=data)
        )
        command = [java_bin, *JVM, f"-Dlog4j2.configurationFile={CONFIG / 'kafka_log4j2.xml'}"]
        command += [f"-Dbarriered.kafka.log={self.folder / 'broker.log'}"]
        command += ["-cp", str(self.jars / "*")]
        storage = ["kafka.tools.StorageTool", "format", "--config", str(properties)]
        formatting = time.monotonic()
        formatted = subprocess.run(
            [*command, *storage, "--cluster-id", _cluster_id()],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=False,
        )
        if formatted.returncode != 0:
            self._remove_folder()
            raise LocalServerError(
                f"kafka-storage format failed ({formatted.returncode}):\n"
                f"{formatted.stdout}{formatted.stderr}"
            )
        launched = time.monotonic()
        self.formatted_in = launched - formatting
        with (self.folder / "stdout.log").open("wb") as out:
            self.process = subprocess.Popen(
                [*command, "kafka.Kafka", str(properties)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                preexec_fn=die_with_parent(),  # only calls prctl in the child
            )
        (self.folder / PID_FILE).write_text(str(self.process.pid))
        atexit.register(self.stop)
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": log}
        admin = AdminClient(config)  # librdkafka's lines go to this module's logger
        try:
            wait_until_it_answers(
                self.process,
                lambda: bool(admin.list_topics(timeout=2).brokers),
                START_TIMEOUT,
                f"the Kafka broker on {self.bootstrap}",
                self.log_tail,
            )
        except LocalServerError:
            self.stop(keep_folder=True)  # its logs, named in the error
            raise
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - launched
        log.info("Kafka broker %s up in %.1f s (%s)", self.bootstrap, self.started_in, self.folder)
        return self

    @property
    def pid(self) -> int:
        """The broker's process id."""
        if self.process is None:
            raise LocalServerError("the Kafka broker is not running")
        return self.process.pid

    @property
    def log_file(self) -> Path | None:
        """The broker's log (WARN and above), in its folder."""
        return None if self.folder is None else self.folder / "broker.log"

    def wait(self) -> int:
        """Wait until the broker's process ends (by itself, or stopped); its exit code."""
        if self.process is None:
            raise LocalServerError("the Kafka broker is not running")
        return self.process.wait()

    def stop(self, keep_folder: bool = False) -> None:
        """SIGTERM the broker, SIGKILL it after :data:`STOP_GRACE` seconds, wait for it,
        and remove its folder. Safe to call twice."""
        process, self.process = self.process, None
        if process is not None:
            atexit.unregister(self.stop)
            stop(process, STOP_GRACE, "the Kafka broker")
        if not keep_folder:
            self._remove_folder()

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker's log and of its stdout (for failure messages)."""
        if self.folder is None:
            return ""
        parts = []
        for name in ("broker.log", "stdout.log"):
            path = self.folder / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(parts)

    def _remove_folder(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def _remove_dead_brokers_folders() -> None:
    """Remove the folders of brokers whose process was killed before it could (SIGTERM or
    SIGKILL of the process that started it: the broker itself died with it): a dead pid
    in its pid file, or no pid file long after the storage tool's time."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        try:
            pid = int((folder / PID_FILE).read_text())
        except FileNotFoundError:
            pid = 0
        except (OSError, ValueError):
            continue
        try:
            dead = not running(pid) if pid else time.time() - folder.stat().st_mtime > 600
        except OSError:
            continue
        if dead:
            shutil.rmtree(folder, ignore_errors=True)


def _cluster_id() -> str:
    """A random Kafka cluster id (16 bytes, URL-safe base64 without padding), never
    starting with ``-`` (which the storage tool would take for an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text
