"""The ``kafka`` upstream on real Spark against a real broker: partitions added while a
stream runs, records deleted before they were read, a topic recreated under the stream.

Each case runs ``availableNow`` runs of the running-totals query of
``tests/kafka_queries.py`` on the shared session and checks the state against a recount
of the topic (every committed record, each once).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import barriered
from barriered.errors import UpstreamError
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from kafka_queries import kafka_totals, records, recount, state_totals
from runs import PREFIX

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def new_topic(broker: Any, partitions: int) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    return topic


def run(session: Any, broker: Any, topic: str, snap: Path, ck: Path, **options: str) -> None:
    """One availableNow run of the running totals into ``snap``."""
    session.conf.set(PREFIX + "snapshotPath", str(snap))
    query = (
        kafka_totals(session, broker.bootstrap, topic, **options)
        .writeStream.format("noop")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query, timeout=300)


def channels_of_checkpoints(snap: Path) -> list[int]:
    """How many channels each completed checkpoint has barrier positions for."""
    rows = checkpoints_table.read_rows(SnapshotLayout.at(str(snap)))
    return [len(json.loads(r["barrier_positions"])) for r in rows if r["status"] == "completed"]


def test_partitions_added_mid_stream_are_read_checkpointed_and_restored(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker, 2)
    snap = tmp_path / "snap"
    for p in (0, 1):
        kafka_broker.produce(topic, records(30, 100 * p), partition=p)
    run(session, kafka_broker, topic, snap, tmp_path / "ck")
    assert state_totals(session, str(snap)) == recount(kafka_broker, topic)

    kafka_broker.add_partitions(topic, 4)
    for p in (2, 3):
        kafka_broker.produce(topic, records(25, 100 * p), partition=p)
    run(session, kafka_broker, topic, snap, tmp_path / "ck")  # the same query, continued
    assert state_totals(session, str(snap)) == recount(kafka_broker, topic)
    assert channels_of_checkpoints(snap)[0] == 2 and channels_of_checkpoints(snap)[-1] == 4

    for p in range(4):
        kafka_broker.produce(topic, records(10, 1000 + 100 * p), partition=p)
    session.conf.set("spark.sql.shuffle.partitions", "3")
    run(session, kafka_broker, topic, snap, tmp_path / "ck-restored", restoreFrom="latest")
    assert state_totals(session, str(snap)) == recount(kafka_broker, topic)


def lose_records(session: Any, broker: Any, tmp_path: Path, **options: str) -> tuple[str, Path]:
    """A first run reads offsets [0, 40) of a 1-partition topic; then offsets 40..79
    arrive and 40..59 are deleted (as retention would) before the next run reads them."""
    topic = new_topic(broker, 1)
    snap = tmp_path / "snap"
    broker.produce(topic, records(40), partition=0)
    run(session, broker, topic, snap, tmp_path / "ck", **options)
    broker.produce(topic, records(40, 40), partition=0)
    assert broker.delete_records(topic, 0, 60) == 60
    return topic, snap


def test_records_deleted_before_they_were_read_fail_the_query(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    topic, snap = lose_records(session, kafka_broker, tmp_path)
    before = state_totals(session, str(snap))
    with pytest.raises(UpstreamError, match=rf"^kafka upstream: offsets \[40, 60\) of {topic}-0 "):
        run(session, kafka_broker, topic, snap, tmp_path / "ck")  # the error first
    assert state_totals(session, str(snap)) == before


@pytest.mark.full
def test_records_deleted_before_they_were_read_are_skipped_when_allowed(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    topic, snap = lose_records(session, kafka_broker, tmp_path, failOnDataLoss="false")
    run(session, kafka_broker, topic, snap, tmp_path / "ck", failOnDataLoss="false")
    expected: Counter[str] = Counter()
    for key, value in records(40) + records(20, 60):  # offsets 40..59 are lost
        expected[key.decode()] += int(value.decode())
    assert state_totals(session, str(snap)) == dict(expected)
    lost = json.loads((snap / "_source" / "kafka_lost" / f"{topic}-0-40-60.json").read_text())
    assert lost == {"topic": topic, "partition": 0, "from": 40, "to": 60}


@pytest.mark.full
def test_a_recreated_topic_is_refused_not_read_again(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker, 1)
    snap = tmp_path / "snap"
    kafka_broker.produce(topic, records(30), partition=0)
    run(session, kafka_broker, topic, snap, tmp_path / "ck")
    before = state_totals(session, str(snap))
    kafka_broker.delete_topic(topic)
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, records(30, 500), partition=0)
    with pytest.raises(UpstreamError, match=f"topic '{topic}' was deleted and recreated"):
        run(session, kafka_broker, topic, snap, tmp_path / "ck")
    assert state_totals(session, str(snap)) == before


def test_completed_checkpoints_offsets_reach_the_consumer_group(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    """With ``kafka.group.id``, lag monitoring sees the offsets of the latest completed
    checkpoint (committed without joining the group; never read back)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    topic, group = new_topic(kafka_broker, 2), f"g-{uuid.uuid4().hex[:6]}"
    for p in (0, 1):
        kafka_broker.produce(topic, records(30, 100 * p), partition=p)
    snap = tmp_path / "snap"
    run(session, kafka_broker, topic, snap, tmp_path / "ck", **{"kafka.group.id": group})
    kafka_broker.produce(topic, records(5, 900), partition=0)
    # the next run commits the first run's final checkpoint when it plans
    run(session, kafka_broker, topic, snap, tmp_path / "ck", **{"kafka.group.id": group})
    asked = [ConsumerGroupTopicPartitions(group)]
    (future,) = kafka_broker.admin.list_consumer_group_offsets(asked).values()
    committed = {tp.partition: tp.offset for tp in future.result(30).topic_partitions}
    rows = checkpoints_table.read_rows(SnapshotLayout.at(str(snap)))
    barriers = [
        {int(c): p for c, p in json.loads(r["barrier_positions"]).items()}
        for r in rows
        if r["status"] == "completed"
    ]
    # a completed checkpoint's barriers (which one depends on timing: a checkpoint may cut
    # partition 0 before its end)
    assert committed in barriers and committed[1] == 30 and committed[0] > 0


def test_checkpoints_and_inspect_name_topic_partitions(
    session: Any, kafka_broker: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``barriered checkpoints --json`` and ``inspect`` (text and JSON) show a Kafka
    channel by its topic-partition, read from the upstream's manifest."""
    from barriered import cli

    topic = new_topic(kafka_broker, 2)
    kafka_broker.produce(topic, records(30), partition=0)
    kafka_broker.produce(topic, records(10, 100), partition=1)
    snap = tmp_path / "snap"
    run(session, kafka_broker, topic, snap, tmp_path / "ck")
    ends = {f"{topic}-0": 30, f"{topic}-1": 10}

    assert cli.main(["checkpoints", str(snap), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    done = [r for r in rows if r["status"] == "completed"]
    assert json.loads(done[-1]["barrier_positions"]) == ends
    assert all(set(json.loads(r["barrier_positions"])) <= set(ends) for r in done)

    assert cli.main(["inspect", str(snap), "--json"]) == 0
    channels = json.loads(capsys.readouterr().out)["channels"]
    assert [(c["channel"], c["name"], c["barrier"]) for c in channels] == [
        (0, f"{topic}-0", 30),
        (1, f"{topic}-1", 10),
    ]
    assert cli.main(["inspect", str(snap)]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = [line.split()[:2] for line in lines if line.startswith(topic)]
    assert shown == [[f"{topic}-0", "30"], [f"{topic}-1", "10"]]


@pytest.mark.parametrize(
    ("offsets", "expected"),
    [
        (
            {"0": 25, "1": 999},
            "gives offsets past the end of their partitions: {topic}-1: 999 (its end: 10). "
            "Give each an offset up to its end, -2 (earliest) or -1 (latest)",
        ),
        (
            {"0": -2, "1": -2, "7": 0},
            "names topic-partition(s) ['{topic}-7'], which the subscription does not have",
        ),
    ],
)
def test_starting_offsets_the_cluster_does_not_have_are_refused_at_load(
    session: Any, kafka_broker: Any, tmp_path: Path, offsets: dict[str, int], expected: str
) -> None:
    """Issue 36: an offset past a partition's end, or a partition the topic does not have,
    was accepted without a word."""
    from kafka_queries import reader

    topic = new_topic(kafka_broker, 2)
    kafka_broker.produce(topic, records(25), partition=0)
    kafka_broker.produce(topic, records(10, 100), partition=1)
    session.conf.set(PREFIX + "snapshotPath", str(tmp_path / "snap"))
    given = json.dumps({topic: offsets})
    with pytest.raises(Exception) as refused:
        reader(session, kafka_broker.bootstrap, topic, startingOffsets=given).load()
    assert expected.format(topic=topic) in str(refused.value)
    assert not (tmp_path / "snap").exists()


@pytest.mark.parametrize(
    ("servers", "client"),
    [
        ("127.0.0.1:1", {}),
        pytest.param(
            None,
            {
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.username": "user",
                "kafka.sasl.password": "very-secret",
            },
            marks=pytest.mark.full,
        ),
    ],
)
def test_a_cluster_that_does_not_answer_is_named_with_what_to_check(
    session: Any, kafka_broker: Any, tmp_path: Path, servers: str | None, client: dict[str, str]
) -> None:
    """Issue 36: an unreachable ``kafka.bootstrap.servers``, or SASL settings against a
    PLAINTEXT listener, gave a bare "KafkaException ... Broker transport failure"."""
    from kafka_queries import reader

    servers = servers or kafka_broker.bootstrap
    session.conf.set(PREFIX + "snapshotPath", str(tmp_path / "snap"))
    options = {"kafka.socket.timeout.ms": "3000", **client}
    with pytest.raises(Exception) as refused:
        reader(session, servers, "events", **options).load()
    message = str(refused.value)
    assert (
        f"kafka upstream: the cluster at kafka.bootstrap.servers={servers!r} did not answer "
        f"(kafka.security.protocol={client.get('kafka.security.protocol', 'plaintext')!r}"
    ) in message
    assert "match the broker's listener" in message and "very-secret" not in message
    assert not (tmp_path / "snap").exists()
