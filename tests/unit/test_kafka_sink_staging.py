"""The ``barriered-kafka`` sink's options and its share of the staging machinery (no
broker): staged records of a crashed run that no checkpoint will publish are removed by
retention; a plan names the sink's kind."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from barriered.errors import ConfigError
from barriered.sink import commit_plan, committer, staging
from barriered.sink.kafka import options
from barriered.sink.kafka.options import KafkaSinkSettings
from barriered.sink.kafka.writer import FILE_PREFIX, RECORDS
from barriered.sink.staging import StagedBatch
from barriered.statestore.acks import write_data_file
from barriered.statestore.layout import SnapshotLayout


def stage(layout: SnapshotLayout, s: KafkaSinkSettings, epoch: int, batch_id: int) -> Path:
    table = pa.table(
        {
            "key": [b"k"],
            "value": [b"v"],
            "topic": pa.nulls(1, pa.string()),
            "partition": pa.nulls(1, pa.int32()),
            "headers": pa.nulls(1, RECORDS.field("headers").type),
        },
        schema=RECORDS,
    )
    f = write_data_file(s.path, {}, FILE_PREFIX, table)
    staging.stage(layout, StagedBatch(s, epoch, batch_id, RECORDS, (f,), int(time.time() * 1000)))
    return Path(s.path) / f.path


def test_records_a_crashed_run_staged_after_its_cut_are_removed_by_retention(
    tmp_path: Path,
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = KafkaSinkSettings(layout.root, "s", "t", "t", (("bootstrap.servers", "b:9092"),))
    orphan = stage(layout, s, 1, 5)  # the crashed run (epoch 1), after the restored cut
    own = stage(layout, s, 2, 0)  # the restored run's
    assert staging.read(layout, "s", 1, 5) == StagedBatch.from_dict(
        json.loads(Path(layout.staged_file("s", 1, 5)).read_text())
    )
    (plan,) = commit_plan.plan(layout, 2, 0)
    assert (plan.kind, plan.batches, plan.path) == ("kafka", ((2, 0),), s.path)
    assert commit_plan.plans_from_metadata(
        {commit_plan.PLAN_KEY: commit_plan.plans_json([plan])}
    ) == [plan]
    assert committer.sweep(layout, 2, 60_000) == 0  # younger than retention.minAge: kept
    assert committer.sweep(layout, 2, 0) == 1
    assert not orphan.exists() and not Path(layout.staged_file("s", 1, 5)).exists()
    assert own.exists() and staging.read(layout, "s", 2, 0) is not None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"topic": "t"}, "the barriered-kafka sink needs the option kafka.bootstrap.servers"),
        (
            {"kafka.bootstrap.servers": "b:1", "kafka.transactional.id": "x", "topic": "t"},
            "barriered-kafka sink option 'kafka.transactional.id' is set by the sink itself",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "progressTopic": "p"},
            "the barriered-kafka sink without the option 'topic' (each row's topic column "
            "names its topic) needs the option 'sinkId'",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "sinkId": "s"},
            "the barriered-kafka sink without the option 'topic' (each row's topic column "
            "names its topic) needs the option 'progressTopic'",
        ),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        options.parse({**given, "snapshotPath": str(tmp_path)})
    assert str(refused.value).startswith(message)


def test_a_topic_column_sink_names_its_id_and_progress_topic(tmp_path: Path) -> None:
    s = options.parse(
        {
            "kafka.bootstrap.servers": "b:1",
            "kafka.linger.ms": "50",
            "sinkId": "routed",
            "progressTopic": "progress",
            "snapshotPath": str(tmp_path),
        }
    )
    assert (s.topic, s.sink_id, s.progress_topic, s.transactional_id) == (
        None,
        "routed",
        "progress",
        "barriered.sink.routed",
    )
    assert s.producer_config() == {"bootstrap.servers": "b:1", "linger.ms": "50"}
    assert KafkaSinkSettings.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_a_record_acknowledged_without_an_offset_counts_as_undelivered() -> None:
    """librdkafka reports a record whose retried batch met a sequence error as delivered
    with no offset (-1001), though the log may lack it: the sink aborts as for an error."""
    from confluent_kafka import KafkaError, Message

    from barriered.sink.kafka.publisher import undelivered

    assert undelivered(None, Message(topic="out", partition=2, offset=7)) is None
    assert undelivered(None, Message(topic="out", partition=2, offset=-1001)) == (
        "out-2: acknowledged without an offset (maybe not written)"
    )
    timeout = KafkaError(KafkaError._MSG_TIMED_OUT)
    assert undelivered(timeout, Message(topic="out", partition=2)) == str(timeout)
