"""The test suite's own Kafka broker (``tests/kafka_broker.py``): topics, transactions as a
``read_committed`` consumer sees them, partitions added, records deleted as by retention."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafka_broker import START_TIMEOUT, KafkaBroker, KafkaBrokerError, Produced, Record, running

pytestmark = pytest.mark.kafka


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
    assert broker.end_offsets(topic, read_committed=False) == {0: 3, 1: 6, 2: 8}
    assert broker.end_offsets(topic) == {0: 3, 1: 6, 2: 8}
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
    with pytest.raises(KafkaBrokerError, match="broker-transactions"):
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
from kafka_broker import KafkaBroker, die_with_parent
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
