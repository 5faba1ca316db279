"""One local Apache Kafka broker for the tests: KRaft, combined broker and controller.

``make install`` puts the broker's jars in ``build/kafka/`` (``tests/kafka/pom.xml``).
:class:`KafkaBroker` writes a ``server.properties`` in a folder of its own, formats the
log directory (``kafka.tools.StorageTool format``), runs ``kafka.Kafka`` as a child process
on two free ports of 127.0.0.1 (clients, controller), waits until it answers, and stops it
by pid. The helpers use confluent-kafka: create, grow and delete topics, produce (plain or
in a committed or aborted transaction), read what a ``read_committed`` consumer sees, and
delete records (what retention does to records nobody read yet).

The broker is a child of this process: it gets SIGTERM when this process dies, however it
dies (``PR_SET_PDEATHSIG``), and :meth:`KafkaBroker.stop` runs at exit too.
"""

from __future__ import annotations

import atexit
import base64
import functools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from child_process import die_with_parent, free_port, running

LOG = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]
JARS = ROOT / "build" / "kafka"
CONFIG = Path(__file__).resolve().parent / "kafka"  # server.properties, log4j2.xml
START_TIMEOUT = 60.0
STOP_GRACE = 15.0
JVM = ("-Xmx384m", "-Xss1m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
TIMEOUT = 30.0  # one admin, produce or read call
FOLDER_PREFIX = "barriered-kafka-"
PID_FILE = "broker.pid"

Key = bytes | str | None
Headers = Sequence[tuple[str, bytes | str | None]]
Produced = tuple[Key, Key] | tuple[Key, Key, Headers]


class Record(NamedTuple):
    """One record as a consumer reads it (key and value as bytes, headers as pairs)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class KafkaBrokerError(RuntimeError):
    """The broker did not start, or a call to it failed."""


def _remove_dead_brokers_folders() -> None:
    """Remove the folders of brokers whose run was killed before it could (SIGTERM or
    SIGKILL of the test process: the broker itself died with it): a dead pid in its pid
    file, or no pid file long after the storage tool's time."""
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


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


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
    """

    def __init__(self, jars: Path = JARS) -> None:
        self.jars = jars
        self.folder: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.controller_port = 0
        self.formatted_in = 0.0  # seconds the storage tool took to format the log directory
        self.started_in = 0.0  # seconds from launch until it answered
        self._admin: Any = None
        self._producers: dict[bool, Producer] = {}

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` clients connect to."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaBroker:
        """Format a log directory, launch the broker, and wait until it answers."""
        java_bin = java()
        if java_bin is None:
            raise KafkaBrokerError("java is not on the PATH (the Kafka broker needs Java 17+)")
        if not any(self.jars.glob("kafka_2.13-*.jar")):
            raise KafkaBrokerError(f"no Kafka jars in {self.jars}: run `make install`")
        _remove_dead_brokers_folders()
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
        self.port, self.controller_port = free_port(), free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        properties = self.folder / "server.properties"
        template = (CONFIG / "server.properties").read_text()
        data = self.folder / "data"
        properties.write_text(
            template.format(port=self.port, controller=self.controller_port, data=data)
        )
        command = [java_bin, *JVM, f"-Dlog4j2.configurationFile={CONFIG / 'log4j2.xml'}"]
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
            raise KafkaBrokerError(
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
        try:
            self._wait_until_it_answers(launched)
        except KafkaBrokerError:
            self.stop(keep_folder=True)  # its logs, named in the error
            raise
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - launched
        LOG.info("Kafka broker %s up in %.1f s (%s)", self.bootstrap, self.started_in, self.folder)
        return self

    def stop(self, keep_folder: bool = False) -> None:
        """SIGTERM the broker, SIGKILL it after :data:`STOP_GRACE` seconds, wait for it,
        and remove its folder. Safe to call twice."""
        process, self.process = self.process, None
        self._admin = None
        self._producers.clear()
        if process is not None:
            atexit.unregister(self.stop)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(STOP_GRACE)
                except subprocess.TimeoutExpired:
                    LOG.warning("Kafka broker pid %d ignored SIGTERM: SIGKILL", process.pid)
                    process.kill()
                    process.wait()
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

    def _wait_until_it_answers(self, launched: float) -> None:
        admin = AdminClient(self._client_config())
        last: Exception | None = None
        while time.monotonic() - launched < START_TIMEOUT:
            assert self.process is not None
            if self.process.poll() is not None:
                raise KafkaBrokerError(
                    f"the Kafka broker exited with {self.process.returncode} while starting\n"
                    + self.log_tail()
                )
            try:
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    self._admin = admin
                    return
            except Exception as exc:  # KafkaException until the listener is up
                last = exc
            time.sleep(0.2)
        raise KafkaBrokerError(
            f"the Kafka broker did not answer on {self.bootstrap} within {START_TIMEOUT:.0f} s"
            f" ({last})\n" + self.log_tail()
        )

    def _remove_folder(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    # -- clients ------------------------------------------------------------------------

    def _client_config(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "logger": LOG, **extra}

    @property
    def admin(self) -> Any:
        """A confluent-kafka ``AdminClient`` on this broker."""
        if self.process is None:
            raise KafkaBrokerError("the Kafka broker is not running")
        if self._admin is None:
            self._admin = AdminClient(self._client_config())
        return self._admin

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids, sorted."""
        metadata = self.admin.list_topics(topic, timeout=TIMEOUT).topics[topic]
        if metadata.error is not None:
            raise KafkaBrokerError(f"topic {topic!r}: {metadata.error}")
        return sorted(metadata.partitions)

    def _wait_for(self, topic: str, partitions: int | None) -> None:
        """Until the metadata shows ``partitions`` partitions of ``topic``, each with a
        leader (``None``: until the topic is gone)."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            found = self.admin.list_topics(timeout=TIMEOUT).topics.get(topic)
            if found is None and partitions is None:
                return
            leaders = [p.leader for p in found.partitions.values()] if found else []
            if found and not found.error and len(leaders) == partitions and min(leaders) >= 0:
                return
            time.sleep(0.1)
        raise KafkaBrokerError(f"topic {topic!r} did not reach {partitions} partitions in time")

    def create_topic(
        self, name: str, partitions: int, config: dict[str, str] | None = None
    ) -> None:
        """Create a topic (replication factor 1) with optional topic configs, e.g.
        ``{"retention.ms": "1000", "segment.ms": "500"}``; returns once every partition
        has a leader."""
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
        self.admin.create_topics([topic], operation_timeout=TIMEOUT)[name].result(TIMEOUT)
        self._wait_for(name, partitions)

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions."""
        futures = self.admin.create_partitions(
            [NewPartitions(topic, total)], operation_timeout=TIMEOUT
        )
        futures[topic].result(TIMEOUT)
        self._wait_for(topic, total)

    def delete_topic(self, name: str) -> None:
        """Delete a topic; returns once the metadata no longer shows it."""
        self.admin.delete_topics([name], operation_timeout=TIMEOUT)[name].result(TIMEOUT)
        self._wait_for(name, None)

    def _producer(self, transactional: bool) -> Producer:
        """This broker's idempotent producer, or its transactional one (initialized once:
        a new producer costs half a second to get its producer id)."""
        if transactional not in self._producers:
            # One request in flight: with several, a first batch retried after a fresh
            # partition failed can reach the broker after the next one; the broker then
            # answers with a sequence error and librdkafka reports the record delivered,
            # with no offset, though the log never got it (as publisher.undelivered says).
            config = self._client_config(
                **{
                    "enable.idempotence": True,
                    "linger.ms": 0,
                    "max.in.flight.requests.per.connection": 1,
                }
            )
            if transactional:
                config["transactional.id"] = f"barriered-tests-{uuid.uuid4().hex}"
            producer = Producer(config)
            if transactional:
                producer.init_transactions(TIMEOUT)
            self._producers[transactional] = producer
        return self._producers[transactional]

    def produce(
        self,
        topic: str,
        records: Iterable[Produced],
        partition: int | None = None,
        transactional: bool | Literal["abort"] = False,
    ) -> list[tuple[int, int]]:
        """Write ``(key, value[, headers])`` records, to ``partition`` or by key hash.

        ``transactional=True`` writes them in one committed transaction, ``"abort"`` in
        one aborted transaction; otherwise with an idempotent producer. Returns each
        record's ``(partition, offset)`` in order once every record is acknowledged.
        """
        producer = self._producer(bool(transactional))
        delivered: list[tuple[int, int] | None] = []
        errors: list[str] = []

        def on_delivery(index: int, err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"record {index}: {err}")
            elif msg.offset() is None:
                errors.append(f"record {index}: acknowledged without an offset (maybe not written)")
            else:
                delivered[index] = (msg.partition(), msg.offset())

        try:
            producer.list_topics(topic, timeout=TIMEOUT)  # partitions added since its last call
            if transactional:
                producer.begin_transaction()
            for index, record in enumerate(records):
                key, value, *rest = record
                delivered.append(None)
                extra: dict[str, Any] = {"on_delivery": functools.partial(on_delivery, index)}
                if partition is not None:
                    extra["partition"] = partition
                if rest:
                    extra["headers"] = list(rest[0])
                producer.produce(topic, value=value, key=key, **extra)
                producer.poll(0)
            # acknowledged first, so an aborted transaction's records are in the log too
            if producer.flush(TIMEOUT) != 0:
                raise KafkaBrokerError(f"records to {topic!r} still unacknowledged")
            if transactional == "abort":
                producer.abort_transaction(TIMEOUT)
            elif transactional:
                producer.commit_transaction(TIMEOUT)
        except (KafkaException, KafkaBrokerError) as exc:
            self._producers.pop(bool(transactional), None)  # a new one for the next call
            raise KafkaBrokerError(f"producing to {topic!r} failed: {exc}") from exc
        errors += [f"record {i}: not acknowledged" for i, at in enumerate(delivered) if not at]
        if errors:
            raise KafkaBrokerError(f"producing to {topic!r} failed: " + "; ".join(errors))
        return [at for at in delivered if at is not None]

    def _offsets(self, topic: str, spec: Any, read_committed: bool) -> dict[int, int]:
        level = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        request = {TopicPartition(topic, p): spec for p in self.partitions(topic)}
        futures = self.admin.list_offsets(request, isolation_level=level, request_timeout=TIMEOUT)
        return {tp.partition: future.result(TIMEOUT).offset for tp, future in futures.items()}

    def end_offsets(self, topic: str, read_committed: bool = True) -> dict[int, int]:
        """Per partition, the offset after the last record a consumer can read: the last
        stable offset with ``read_committed`` (no open transaction below it), the high
        watermark otherwise."""
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        return self._offsets(topic, latest, read_committed)

    def start_offsets(self, topic: str) -> dict[int, int]:
        """Per partition, the low watermark: the first offset not deleted."""
        earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        return self._offsets(topic, earliest, read_committed=False)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Delete the partition's records below ``before_offset``, as retention does;
        returns the new low watermark."""
        request = TopicPartition(topic, partition, before_offset)
        futures = self.admin.delete_records([request], operation_timeout=TIMEOUT)
        (future,) = futures.values()
        return int(future.result(TIMEOUT).low_watermark)

    def read_committed(self, topic: str) -> list[Record]:
        """Every record a ``read_committed`` consumer sees in ``topic``, from each
        partition's low watermark up to its current end offset, ordered by partition and
        offset (assigned partitions, no consumer group, nothing committed)."""
        ends = self.end_offsets(topic)
        starts = self.start_offsets(topic)
        pending = {p for p, end in ends.items() if end > starts[p]}
        records: list[Record] = []
        if not pending:
            return records
        consumer = Consumer(
            self._client_config(
                **{
                    "group.id": f"barriered-tests-{uuid.uuid4().hex}",  # never joined
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 50,
                }
            )
        )
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(pending)])
            deadline = time.monotonic() + TIMEOUT
            while pending:
                if time.monotonic() > deadline:
                    raise KafkaBrokerError(
                        f"reading {topic!r}: partitions {sorted(pending)} did not reach "
                        f"their end offsets {ends} in {TIMEOUT:.0f} s"
                    )
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                error, partition, offset = msg.error(), msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaBrokerError(f"reading {topic!r}: {error}")
                if error is None and offset < ends[partition]:
                    raw = msg.headers() or []  # a list from a consumer, typed as list or dict
                    pairs = raw.items() if isinstance(raw, dict) else raw
                    headers = tuple((name, _bytes(value)) for name, value in pairs)
                    key, value = _bytes(msg.key()), _bytes(msg.value())
                    records.append(Record(partition, offset, key, value, headers))
                # done at the end offset: a record's is one below it, an EOF event's is it
                if offset + (error is None) >= ends[partition]:
                    pending.discard(partition)
        finally:
            consumer.close()
        return sorted(records)
