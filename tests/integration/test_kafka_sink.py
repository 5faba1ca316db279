"""The ``barriered-kafka`` sink on the real broker: whole checkpoints, once, fenced zombies.

A run publishes exactly one uninterrupted run's output, each record once; a consumer
watching the topic with ``read_committed`` during the run only ever sees, per partition,
the output of a completed checkpoint. A zombie's open transaction is aborted and its
commit fenced by the next run's ``init_transactions``. A restore below a published
checkpoint, a restore into another snapshot path, a bad option, a missing topic and a
missing topic column are refused with typed errors, and write nothing. Over Spark
Connect a run publishes once too, and a SASL secret given to the sink is in no file and
no log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException

import barriered
from barriered.errors import ConfigError, SinkError, SinkRewindError
from barriered.sink import staging
from barriered.sink.commit_plan import SinkPlan
from barriered.sink.kafka import options as kafka_options
from barriered.sink.kafka import publisher
from barriered.sink.kafka.options import KafkaSinkSettings
from barriered.sink.kafka.writer import FILE_PREFIX, RECORDS
from barriered.sink.staging import StagedBatch
from barriered.statestore import checkpoints_table, ownership
from barriered.statestore.acks import write_data_file
from barriered.statestore.layout import SnapshotLayout
from barriered.testing import faults
from file_tree import tree
from kafka_sink_runs import FORMAT, as_records, kafka_query, published
from runs import (
    MODES,
    SOURCE,
    commit_metadata,
    expected_output,
    run,
    state_counts,
    upstream,
)

pytestmark = pytest.mark.kafka
SPARK = pytest.mark.spark
LEASE_MS = 60_000
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@pytest.fixture(autouse=True)
def _close_clients() -> Any:
    """The sink's clients of a test go with it (not at exit, after the broker)."""
    yield
    publisher.close()


def new_topic(broker: Any, partitions: int = 2) -> str:
    topic = f"out-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    return topic


def everything() -> dict[int, int]:
    return dict(enumerate(upstream().available()))


@SPARK
@pytest.mark.full  # make test under 20 min: 23 s; the Kafka sink's crash matrix case stays
def test_a_run_publishes_whole_checkpoints_once(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker)
    seen: list[dict[int, int]] = []
    done = threading.Event()

    def watch() -> None:  # what a read_committed consumer can read, over and over
        while not done.is_set():
            with contextlib.suppress(KafkaException):  # no leader known yet: ask again
                seen.append(kafka_broker.end_offsets(topic))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    processor, sink = kafka_query("append", kafka_broker.bootstrap, topic)
    try:
        _, layout = run(
            session,
            tmp_path,
            MODES["unaligned"],
            processor=processor,
            sink=sink,
            sink_format=FORMAT,
            output=as_records,
        )
    finally:
        done.set()
        watcher.join(timeout=30)
    records = kafka_broker.read_committed(topic)
    assert published(kafka_broker, topic, "append") == expected_output("append", everything())

    # per partition, every end offset seen is the output of one completed checkpoint
    state = commit_metadata(layout)
    partition_of = {r.key.decode(): r.partition for r in records}
    outputs = []  # per completed checkpoint: partition -> its rows
    for cid in sorted(state):
        counts = state_counts(layout, int(state[cid]["version"]))
        rows: dict[int, list[tuple[str, int]]] = {0: [], 1: []}
        for user, count in counts.items():
            if user in partition_of:
                rows[partition_of[user]] += [(user, n) for n in range(1, count + 1)]
        outputs.append({p: sorted(r) for p, r in rows.items()})
    distinct = {json.dumps(s, sort_keys=True) for s in seen}
    assert len(distinct) >= 3, f"the consumer saw only {distinct}"
    for ends in seen:
        for p, end in ends.items():
            below = sorted(
                (r.key.decode(), int(r.value))
                for r in records
                if r.partition == p and r.offset < end
            )
            assert any(o[p] == below for o in [{0: [], 1: []}, *outputs]), (
                f"partition {p} up to offset {end} is no completed checkpoint's output"
            )

    rows_by_checkpoint = {
        r["checkpoint_id"]: (r["sink_rows"], r["sink_bytes"])
        for r in checkpoints_table.completed(layout)
    }
    assert sum(n for n, _ in rows_by_checkpoint.values() if n) == len(records)
    value_bytes = sum(len(r.key or b"") + len(r.value or b"") for r in records)
    assert sum(b for _, b in rows_by_checkpoint.values() if b) == value_bytes
    settings = publisher.saved_settings(layout, topic)
    assert settings is not None
    last = max(c for c, (n, _) in rows_by_checkpoint.items() if n)
    assert publisher.published(settings) == publisher.Published(
        last, rows_by_checkpoint[last][0], rows_by_checkpoint[last][1], layout.root
    )
    assert not list(Path(settings.path).rglob("*.parquet")), "published records stay staged"


def stage_records(layout: SnapshotLayout, s: KafkaSinkSettings, epoch: int, rows: int) -> None:
    table = pa.table(
        {
            "key": [f"k{i % 7}".encode() for i in range(rows)],
            "value": [str(i).encode() for i in range(rows)],
            "topic": pa.nulls(rows, pa.string()),
            "partition": pa.nulls(rows, pa.int32()),
            "headers": pa.nulls(rows, RECORDS.field("headers").type),
        },
        schema=RECORDS,
    )
    files = (write_data_file(s.path, {}, FILE_PREFIX, table),)
    staging.stage(layout, StagedBatch(s, epoch, 0, RECORDS, files, int(time.time() * 1000)))


def sink_of(tmp_path: Path, broker: Any, topic: str) -> tuple[SnapshotLayout, KafkaSinkSettings]:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    client = (("bootstrap.servers", broker.bootstrap),)
    settings = KafkaSinkSettings(layout.root, "s", topic, topic, client)
    publisher.save_settings(layout, settings)
    return layout, settings


def test_a_zombie_is_fenced_and_none_of_its_records_is_visible(
    kafka_broker: Any, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker)
    layout, s = sink_of(tmp_path, kafka_broker, topic)
    old = ownership.acquire(layout, LEASE_MS).epoch
    stage_records(layout, s, old, 1000)
    plan = SinkPlan("s", s.path, old, ((old, 0),), "kafka")
    faults.inject(layout.root, faults.MID_PUBLISH, 1, faults.BLOCK)
    failure: list[BaseException] = []

    def zombie() -> None:  # no ownership check (epoch None): only Kafka fences it
        try:
            publisher.publish(layout, 1, plan, None)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=zombie)
    thread.start()
    faults.wait_fired(layout.root, faults.MID_PUBLISH, timeout_s=60)
    # half the records are in the log, in the zombie's open transaction
    assert sum(kafka_broker.end_offsets(topic, read_committed=False).values()) >= 500
    assert kafka_broker.read_committed(topic) == []
    new = ownership.acquire(layout, LEASE_MS, restore_from="latest").epoch
    publisher.fence(layout, new)  # the new run's start: the zombie's transaction aborted
    assert publisher.publish(layout, 1, plan, new).rows == 1000
    faults.release(layout.root, faults.MID_PUBLISH)
    thread.join(timeout=120)
    assert len(failure) == 1 and isinstance(failure[0], SinkError), failure
    assert "fenced" in str(failure[0]).lower()
    values = sorted(int(r.value) for r in kafka_broker.read_committed(topic))
    assert values == list(range(1000))  # the new run's records, once; none of the zombie's
    assert publisher.published(s) == publisher.Published(1, 1000, 2890 + 2000, layout.root)


def test_a_restore_below_a_published_checkpoint_is_refused(
    kafka_broker: Any, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker, 1)
    layout, s = sink_of(tmp_path, kafka_broker, topic)
    epoch = ownership.acquire(layout, LEASE_MS).epoch
    stage_records(layout, s, epoch, 10)
    publisher.publish(layout, 4, SinkPlan("s", s.path, epoch, ((epoch, 0),), "kafka"), epoch)
    publisher.check_restore(layout, 4)  # the published checkpoint itself: nothing again
    before = tree(layout.root), kafka_broker.end_offsets(topic)
    with pytest.raises(SinkRewindError) as refused:
        publisher.check_restore(layout, 3)
    assert str(refused.value) == (
        f"restore from checkpoint 3 of {layout.root!r}: the barriered-kafka sink 's' "
        f"already published the output up to checkpoint 4 to {topic!r} (group "
        "'barriered.sink.s'), and Kafka records cannot be taken back: the restored run "
        "would publish the output after checkpoint 3 again. Nothing was written. Restore "
        "the latest checkpoint (4 or later), or publish to a new topic with a new sinkId"
    )
    assert (tree(layout.root), kafka_broker.end_offsets(topic)) == before


def not_ours(sink_id: str, root: str, other: str, what: str) -> str:
    """The refusal of a sink whose transactional id and group belong to ``other``."""
    return (
        f"barriered-kafka sink {sink_id!r} of snapshot path {root!r}: its transactional "
        f"id and consumer group 'barriered.sink.{sink_id}' belong to the query of "
        f"snapshot path {other!r}, which {what}. Kafka output does not move to another "
        "snapshot path: that query's completed checkpoints not yet published are staged "
        "under its path, and its checkpoint ids would be taken for this query's (this "
        "query's output silently dropped). Nothing was written. To go on with that query "
        f"(a restore or savepoint of it), restore on its snapshot path {other!r} (option "
        "restoreFrom); to write this query's output, give this sink its own id (option "
        "sinkId)"
    )


@SPARK
@pytest.mark.full
def test_a_restore_into_another_snapshot_path_is_refused_at_start(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker)
    processor, sink = kafka_query("append", kafka_broker.bootstrap, topic)
    kwargs: dict[str, Any] = {"sink_format": FORMAT, "output": as_records}
    _, first = run(session, tmp_path, MODES["aligned"], processor=processor, sink=sink, **kwargs)
    settings = publisher.saved_settings(first, topic)
    assert settings is not None
    done = publisher.published(settings)
    assert done is not None
    other = SnapshotLayout.at(str(tmp_path / "other"))
    source = {**SOURCE, "restoreFrom": first.root, "snapshotPath": other.root}
    events = session.readStream.format("barriered").options(**source).load()
    out = as_records(barriered.keyed(events, "user_id").process(processor))
    # keyed().process() declared its operator under the new path: the sink starts from here
    before = tree(tmp_path), kafka_broker.end_offsets(topic)
    writer = out.writeStream.format(FORMAT).options(snapshotPath=other.root, **sink)
    writer = writer.option("checkpointLocation", str(tmp_path / "ck2"))
    with pytest.raises(SinkError) as refused:
        writer.trigger(availableNow=True).start()
    assert str(refused.value) == not_ours(
        topic,
        other.root,
        first.root,
        f"published its output up to checkpoint {done.checkpoint_id} to {topic!r}",
    )
    after = tree(tmp_path)
    changed = sorted(k for k in {*after, *before[0]} if after.get(k) != before[0].get(k))
    assert not changed and kafka_broker.end_offsets(topic) == before[1]
    assert published(kafka_broker, topic, "append") == expected_output("append", everything())


def test_a_sink_of_another_snapshot_paths_query_is_refused(
    kafka_broker: Any, tmp_path: Path
) -> None:
    """What ``start()`` and the writer check before anything is staged (the Spark case,
    a restore of a path into another: ``full``): the sink's group records a checkpoint
    another snapshot path published."""
    topic = new_topic(kafka_broker, 1)
    origin, s = sink_of(tmp_path, kafka_broker, topic)
    epoch = ownership.acquire(origin, LEASE_MS).epoch
    stage_records(origin, s, epoch, 10)
    publisher.publish(origin, 3, SinkPlan("s", s.path, epoch, ((epoch, 0),), "kafka"), epoch)
    publisher.check_owner(origin, s)  # its own query
    other = SnapshotLayout.at(str(tmp_path / "other"))
    before = tree(tmp_path), kafka_broker.end_offsets(topic)
    with pytest.raises(SinkError) as refused:
        publisher.check_owner(other, s)
    assert str(refused.value) == not_ours(
        "s", other.root, origin.root, f"published its output up to checkpoint 3 to {topic!r}"
    )
    assert (tree(tmp_path), kafka_broker.end_offsets(topic)) == before


def test_a_restore_from_a_path_whose_sink_published_nothing_is_refused(
    kafka_broker: Any, tmp_path: Path
) -> None:
    """What the writer checks once the restored source took the new path (on Spark
    Connect no start() hook checks): the origin staged output, none was published."""
    topic = new_topic(kafka_broker, 1)
    origin, s = sink_of(tmp_path, kafka_broker, topic)
    stage_records(origin, s, ownership.acquire(origin, LEASE_MS).epoch, 10)
    other = SnapshotLayout.at(str(tmp_path / "other"))
    publisher.check_owner(other, s)  # not restored: a query of its own
    before = tree(tmp_path), kafka_broker.end_offsets(topic)
    with pytest.raises(SinkError) as refused:
        publisher.check_owner(other, s, origin.root)
    assert str(refused.value) == not_ours(
        "s", other.root, origin.root, "this query was restored from"
    )
    assert (tree(tmp_path), kafka_broker.end_offsets(topic)) == before


def test_secrets_are_never_written_nor_shown(tmp_path: Path) -> None:
    secret = "s3cr3t-pa55"
    given = {
        "kafka.bootstrap.servers": "127.0.0.1:1",
        "kafka.sasl.password": secret,
        "kafka.sasl.jaas.config": f'{PLAIN} required username="app" password="{secret}";',
        "topic": "t",
        "snapshotPath": str(tmp_path / "snap"),
    }
    settings = kafka_options.parse(given)
    kafka_options.remember_secrets(settings, given)
    assert secret not in json.dumps(settings.to_dict())
    assert settings.producer_config()["sasl.password"] == secret  # this process only
    publisher.save_settings(SnapshotLayout.at(str(tmp_path / "snap")), settings)
    written = [p.read_text() for p in (tmp_path / "snap").rglob("*") if p.is_file()]
    assert written and not any(secret in w for w in written)
    assert kafka_options.redact(f"login {secret} failed", settings) == "login *** failed"
    oauth = {**given, "kafka.sasl.jaas.config": f'{OAUTH} required token="{secret}";'}
    with pytest.raises(ConfigError) as refused:
        kafka_options.remember_secrets(settings, oauth)
    assert str(refused.value) == (
        "barriered-kafka sink option kafka.sasl.jaas.config: only the login modules "
        "['PlainLoginModule', 'ScramLoginModule'] with username=\"...\" password=\"...\" are "
        f"understood (the producer is librdkafka, which has no JAAS; got module {OAUTH!r}). "
        "Set kafka.sasl.username and kafka.sasl.password (or librdkafka's "
        "kafka.sasl.oauthbearer.* settings) instead"
    )


@SPARK
@pytest.mark.full
@pytest.mark.connect
@pytest.mark.parametrize("session", ["connect"], indirect=True)
def test_over_spark_connect_a_run_publishes_once_and_no_secret_is_written(
    session: Any,
    kafka_broker: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="barriered")
    secret = f"pw-{uuid.uuid4().hex}"
    topic = new_topic(kafka_broker)
    processor, sink = kafka_query("append", kafka_broker.bootstrap, topic)
    sink["kafka.sasl.jaas.config"] = f'{PLAIN} required username="app" password="{secret}";'
    _, layout = run(
        session,
        tmp_path,
        MODES["unaligned"],
        processor=processor,
        sink=sink,
        sink_format=FORMAT,
        output=as_records,
    )
    assert published(kafka_broker, topic, "append") == expected_output("append", everything())
    settings = publisher.saved_settings(layout, topic)
    assert settings is not None  # the coordinator (this process) publishes with the secret
    assert settings.producer_config()["sasl.password"] == secret
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 10 and not [p for p in files if secret.encode() in p.read_bytes()]
    out, err = capfd.readouterr()
    assert secret not in out + err + caplog.text


REFUSALS = {
    "bad option": (
        {"topc": "x"},
        ConfigError,
        "unknown barriered-kafka sink option 'topc' (did you mean 'topic'?)",
    ),
    "missing topic": (
        {"topic": "no-such-topic"},
        SinkError,
        "barriered-kafka sink 'no-such-topic': the topic 'no-such-topic' (option 'topic') "
        "does not exist on '{bootstrap}'; the sink never creates topics. Nothing was "
        "written. Create it first",
    ),
    # issue 36: a transaction problem at the broker was met at the first publish only
    "transaction timeout above the brokers' maximum": (
        {"topic": "{topic}", "kafka.transaction.timeout.ms": "3600000"},
        ConfigError,
        "option 'kafka.transaction.timeout.ms'=3600000 is above the brokers' "
        "transaction.max.timeout.ms=900000 at '{bootstrap}': Kafka refuses the sink's "
        "transactions (INVALID_TRANSACTION_TIMEOUT), so no checkpoint's output could be "
        "published. Set it to at most 900000",
    ),
    "no topic": (
        {"sinkId": "s", "progressTopic": "{topic}"},
        ConfigError,
        "the barriered-kafka sink needs a topic: set the option 'topic', or give the "
        "query's output a 'topic' column (its columns: ['key', 'value']). Nothing was "
        "written",
    ),
}


@SPARK
@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_sink_writes_nothing(
    session: Any, kafka_broker: Any, tmp_path: Path, case: str
) -> None:
    topic = new_topic(kafka_broker, 1)
    extra, error, message = REFUSALS[case]
    barriered.install(session)
    snap = tmp_path / "snap"
    events = session.readStream.format("barriered").options(**SOURCE)
    events = events.option("snapshotPath", str(snap)).load()
    processor, _ = kafka_query("append", kafka_broker.bootstrap, topic)
    out = as_records(barriered.keyed(events, "user_id").process(processor))
    before = tree(tmp_path), kafka_broker.end_offsets(topic)
    writer = (
        out.writeStream.format(FORMAT)
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
        .option("snapshotPath", str(snap))
        .options(**{k: v.format(topic=topic) for k, v in extra.items()})
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
    )
    with pytest.raises(error) as refused:
        writer.start()
    assert message.format(bootstrap=kafka_broker.bootstrap) in str(refused.value)
    assert (tree(tmp_path), kafka_broker.end_offsets(topic)) == before
