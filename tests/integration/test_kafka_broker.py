"""The test suite's own Kafka broker (``tests/kafka_broker.py``): topics, transactions as a
``read_committed`` consumer sees them, partitions added, records deleted as by retention."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from barriered.errors import LocalServerError
from barriered.local.kafka_broker import START_TIMEOUT
from barriered.local.processes import running
from kafka_broker import KafkaBroker, Produced, Record

pytestmark = pytest.mark.kafka


def end_offsets_once_at(
    read: Callable[[], dict[int, int]], expected: dict[int, int], seconds: float = 10.0
) -> dict[int, int]:
    """``read()`` as soon as it returns ``expected``, else its last answer after
    ``seconds``: the transaction coordinator writes commit and abort markers after the
    producer's commit returned (WriteTxnMarkers), so end offsets reach them a moment later."""
    found, deadline = read(), time.monotonic() + seconds
    while found != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        found = read()
    return found


def test_read_committed_sees_plain_and_committed_records_only(kafka_broker: KafkaBroker) -> None:
    broker = kafka_broker
    assert 0 < broker.started_in < START_TIMEOUT
    assert broker.bootstrap == f"127.0.0.1:{broker.port}"
    topic = "broker-transactions"
    broker.create_topic(topic, 3)
    assert broker.partitions(topic) == [0, 1, 2]

    for p in range(3):
        plain = [(f"k{p}{i}", f"v{p}{i}") for i in range(3)]
        assert broker.produce(topic, plain, partition=p) == [(p, 0), (p, 1), (p, 2)]
    committed: list[Produced] = [(b"c1", b"one", [("h", b"x")]), (b"c2", b"two")]
    assert broker.produce(topic, committed, partition=1, transactional=True) == [(1, 3), (1, 4)]
    aborted = [(b"a1", b"gone"), (b"a2", b"gone")]
    assert broker.produce(topic, aborted, partition=2, transactional="abort") == [(2, 3), (2, 4)]
    assert broker.produce(topic, [(b"c3", None)], partition=2, transactional=True) == [(2, 6)]

    # each transaction's commit or abort marker takes an offset of its own
    ends = {0: 3, 1: 6, 2: 8}
    uncommitted = end_offsets_once_at(lambda: broker.end_offsets(topic, read_committed=False), ends)
    assert uncommitted == ends
    assert end_offsets_once_at(lambda: broker.end_offsets(topic), ends) == ends
    plain_rows = [
        Record(p, i, f"k{p}{i}".encode(), f"v{p}{i}".encode(), ())
        for p in range(3)
        for i in range(3)
    ]
    expected = sorted(
        [
            *plain_rows,
            Record(1, 3, b"c1", b"one", (("h", b"x"),)),
            Record(1, 4, b"c2", b"two", ()),
            Record(2, 6, b"c3", None, ()),
        ]
    )
    assert broker.read_committed(topic) == expected

    broker.add_partitions(topic, 4)
    assert broker.partitions(topic) == [0, 1, 2, 3]
    assert broker.produce(topic, [(None, b"new")], partition=3) == [(3, 0)]
    expected.append(Record(3, 0, None, b"new", ()))
    assert broker.read_committed(topic) == expected

    # retention deleting records nobody read: the low watermark moves, they are gone
    assert broker.start_offsets(topic) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert broker.delete_records(topic, 0, 2) == 2
    assert broker.start_offsets(topic) == {0: 2, 1: 0, 2: 0, 3: 0}
    assert broker.end_offsets(topic) == {0: 3, 1: 6, 2: 8, 3: 1}
    assert broker.read_committed(topic) == expected[2:]

    broker.delete_topic(topic)
    with pytest.raises(LocalServerError, match="broker-transactions"):
        broker.partitions(topic)


def test_retention_deletes_records_nobody_read(kafka_broker: KafkaBroker) -> None:
    """Retention runs every second from the broker's start: a topic with a short
    ``retention.ms`` loses its expired records within seconds (the expired active segment
    is rolled and deleted too)."""
    broker = kafka_broker
    broker.create_topic("broker-retention", 1, {"retention.ms": "500", "segment.ms": "100"})
    broker.produce("broker-retention", [(b"old", b"v")] * 3, partition=0)
    deadline = time.monotonic() + 30
    while broker.start_offsets("broker-retention") != {0: 3} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert broker.start_offsets("broker-retention") == {0: 3}
    assert broker.end_offsets("broker-retention") == {0: 3}
    assert broker.read_committed("broker-retention") == []
    broker.delete_topic("broker-retention")


_CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
from barriered.local.processes import die_with_parent
from kafka_broker import KafkaBroker
die_with_parent()()  # this child too, should the test's own process be killed
broker = KafkaBroker().start()
print(broker.process.pid, broker.folder, flush=True)
time.sleep(600)
"""


@pytest.mark.full
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_broker_dies_with_the_process_that_started_it(how: signal.Signals) -> None:
    """A test process killed without running its finalizers leaves no broker running,
    and the next broker's start removes the dead one's folder."""
    tests = str(Path(__file__).resolve().parents[1])
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(tests=tests)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        pid_text, folder_text = child.stdout.readline().split()
        pid, folder = int(pid_text), Path(folder_text)
        assert running(pid)
        child.send_signal(how)
        child.wait(30)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 30
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(pid)
    assert folder.exists()
    KafkaBroker().start().stop()
    assert not folder.exists()


def test_the_kafka_broker_command_serves_until_ctrl_c(tmp_path: Path) -> None:
    """``python -m barriered kafka-broker``: prints its bootstrap address, serves a
    produce and a consume, and on Ctrl-C (SIGINT) stops with no process left."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    command = subprocess.Popen(
        [sys.executable, "-m", "barriered", "kafka-broker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert command.stdout is not None
        first = command.stdout.readline()
        match = re.fullmatch(
            r"Kafka broker at (127\.0\.0\.1:\d+) \(pid (\d+), log (\S+)\)\n", first
        )
        assert match, first
        bootstrap, pid, log = match[1], int(match[2]), Path(match[3])
        assert command.stdout.readline() == (
            f"try: barriered demo --kafka {bootstrap}; Ctrl-C stops it\n"
        )
        assert running(pid)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("cli", 1, 1)])["cli"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("cli", key=b"k", value=b"v")
        assert producer.flush(30) == 0
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "cli", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["cli"])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1)
        consumer.close()
        assert message is not None and (message.key(), message.value()) == (b"k", b"v")
        command.send_signal(signal.SIGINT)
        out, err = command.communicate(timeout=60)
    finally:
        command.kill()
        command.wait()
    assert (command.returncode, out, err) == (0, "Kafka broker stopped\n", "")
    assert not running(pid) and not log.parent.exists()


def test_the_kafka_broker_command_without_jars_says_make_kafka(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "barriered", "kafka-broker", "--jars", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"barriered: error: no Kafka jars in {tmp_path}: run `make kafka` in the "
        "spark-barriered checkout (it fetches them from Maven Central), or name their folder\n"
    )
