"""The ``kafka`` upstream: one channel per topic-partition, positions are Kafka offsets.

A channel's barrier position is the partition's next offset, as in Flink's Kafka source
(one split per partition, its offset in the checkpoint). The channels and where each
starts are fixed when the stream first starts and kept in ``kafka_manifest.json`` under
the upstream's state folder, with each topic's id: a restarted query reads the same
partitions from its checkpoint's offsets, and a topic deleted or recreated under the same
name is refused (never read again from offset 0).

Offsets have gaps (transaction markers, aborted records, compaction), so a read of
``[start, end)`` may return fewer records than ``end - start``; each record's position is
its ``offset`` column (:attr:`KafkaUpstream.position_column`). The driver plans up to the
partition's last stable offset (``isolation.level=read_committed``, the default: records
of aborted or open transactions never appear) or its high watermark (read_uncommitted),
so a range, once planned, always reads the same records. Readers run on executors with
confluent-kafka's consumer, created inside :meth:`KafkaUpstream.read` (its client is not
fork-safe), assigned and sought (no consumer group), and stop at the range's end offset.

Records that retention deleted before they were read fail the read naming topic,
partition and offsets (``failOnDataLoss=true``, the default), or are skipped, logged and
recorded under ``_source/kafka_lost/``. Partitions the subscription gains while the query
runs become new channels (:meth:`KafkaUpstream.discover`), read from their earliest
offset once no checkpoint is aligning. With ``kafka.group.id``, completed checkpoints'
offsets are committed to that consumer group for lag monitoring, never read back.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from barriered.config import upstream_options as opt
from barriered.config.source_options import KAFKA_CLIENT
from barriered.datasource.upstreams import kafka_cluster as cluster
from barriered.datasource.upstreams.base import Upstream
from barriered.datasource.upstreams.options import prefixed_options
from barriered.errors import ConfigError, SnapshotStoreError, UpstreamError
from barriered.files.fileio import read_json, write_json

log = logging.getLogger(__name__)

MANIFEST_NAME = "kafka_manifest.json"
#: Where the ranges skipped with ``failOnDataLoss=false`` are recorded (one file each).
LOST_DIR = "kafka_lost"
#: Client settings the upstream sets itself (Spark's Kafka source refuses the same).
_MANAGED = {
    "auto.offset.reset": f"use the option {opt.STARTING_OFFSETS.name}",
    "enable.auto.commit": "offsets live in the barriered checkpoint",
    "enable.partition.eof": "the reader needs it",
}


KEY_VALUE = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
HEADERS = pa.field(
    "headers",
    pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])),
)


@dataclass(frozen=True)
class Channel:
    """One topic-partition and the offset the stream started it at."""

    topic: str
    partition: int
    start: int

    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


class KafkaUpstream(Upstream):
    """Records of Kafka topic-partitions (see the module docstring).

    Parameters
    ----------
    client : Mapping[str, str]
        The ``kafka.*`` options without their prefix (``bootstrap.servers`` and any
        other librdkafka client setting, credentials included: never written or logged).
    subscription : Mapping[str, str]
        The one option of ``subscribe``, ``subscribePattern`` and ``assign`` given.
    channels : list of Channel
        The topic-partitions, in channel order, with their starting offsets.
    topic_ids : Mapping[str, str]
        Each topic's id when the stream started.
    fail_on_data_loss : bool
        Fail a read whose records retention deleted (else skip them with a warning).
    include_headers : bool
        Add the ``headers`` column.
    poll_timeout_ms : int
        How long a reader waits for records it knows exist before it fails.
    manifest_path : str
        Where the channels are kept.
    """

    name = "kafka"
    position_column = "offset"
    grows = True

    def __init__(
        self,
        client: Mapping[str, str],
        subscription: Mapping[str, str],
        channels: list[Channel],
        topic_ids: Mapping[str, str],
        fail_on_data_loss: bool,
        include_headers: bool,
        poll_timeout_ms: int,
        manifest_path: str,
    ) -> None:
        self.client = {k: v for k, v in client.items() if k != "group.id"}
        #: ``kafka.group.id``: the consumer group completed checkpoints' offsets are
        #: committed to, for lag monitoring (never read back: offsets live in checkpoints).
        self.group_id = client.get("group.id")
        self.subscription = dict(subscription)
        self.channels = list(channels)
        self.topic_ids = dict(topic_ids)
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers
        self.poll_timeout_ms = poll_timeout_ms
        self.manifest_path = manifest_path
        self.isolation = self.client.get("isolation.level", "read_committed")
        self._admin_client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # pickled to the executors: the admin client is created again where it is needed
        return {**self.__dict__, "_admin_client": None}

    def _admin(self) -> Any:
        if self._admin_client is None:
            self._admin_client = cluster.admin(self.client)
        return self._admin_client

    # -- options and manifest ------------------------------------------------------------

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], state_dir: str, required_by: str | None = None
    ) -> KafkaUpstream:
        """Build from the source options; the channels come from the manifest of a
        stream that started before, else from the subscription (nothing is written:
        :meth:`persist` writes the manifest).

        Raises
        ------
        ConfigError
            For a missing ``kafka.bootstrap.servers``, not exactly one of ``subscribe``,
            ``subscribePattern`` and ``assign``, a bad ``startingOffsets``, a client
            setting the upstream manages, or a subscription other than the manifest's.
        SnapshotStoreError
            When the manifest is missing although ``required_by`` refers to positions.
        """
        prefix = KAFKA_CLIENT.name
        client = prefixed_options(options, prefix)
        if not client.get("bootstrap.servers"):
            raise ConfigError(
                f"upstream 'kafka' needs the option {prefix}bootstrap.servers "
                f"(e.g. .option('{prefix}bootstrap.servers', 'host1:9092,host2:9092'))"
            )
        for setting, why in _MANAGED.items():
            if setting in client:
                raise ConfigError(f"option '{prefix}{setting}' is not supported: {why}")
        isolation = client.setdefault("isolation.level", "read_committed")
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ConfigError(
                f"option '{prefix}isolation.level' must be read_committed or "
                f"read_uncommitted, got {isolation!r}"
            )
        subscription = {
            k.name: str(options[k.name])
            for k in (opt.SUBSCRIBE, opt.SUBSCRIBE_PATTERN, opt.ASSIGN)
            if k.name in options
        }
        if len(subscription) != 1:
            raise ConfigError(
                f"upstream 'kafka' needs exactly one of the options {opt.SUBSCRIBE.name} "
                f"(topics, comma separated), {opt.SUBSCRIBE_PATTERN.name} (a regular "
                f'expression) or {opt.ASSIGN.name} (JSON {{"topic": [0, 1]}}), got '
                f"{sorted(subscription) or 'none'}"
            )
        fail_on_data_loss = opt.FAIL_ON_DATA_LOSS.read_bool(options)
        include_headers = opt.INCLUDE_HEADERS.read_bool(options)
        poll_timeout_ms = opt.POLL_TIMEOUT_MS.read_int(options)
        assert poll_timeout_ms is not None  # declared with a default
        manifest_path = f"{state_dir.rstrip('/')}/{MANIFEST_NAME}"
        saved = read_json(manifest_path, default=None)
        common = (fail_on_data_loss, include_headers, poll_timeout_ms, manifest_path)
        if saved is not None:
            if saved.get("subscription") != subscription:
                raise ConfigError(
                    f"the kafka upstream's subscription is {subscription} but this stream "
                    f"started with {saved.get('subscription')} (manifest {manifest_path!r}); "
                    "its channels are fixed for the life of the snapshot path: subscribe as "
                    "before, or start the stream on a new snapshot path"
                )
            channels = [Channel(**c) for c in saved["channels"]]
            return cls(client, subscription, channels, saved["topic_ids"], *common)
        if required_by is not None:
            raise SnapshotStoreError(
                f"kafka upstream manifest {manifest_path!r} is missing, but {required_by} "
                "refers to offsets of the topic-partitions it lists, in its channel order. "
                "Nothing was written. Put the manifest back (from a backup or a savepoint's "
                "_source folder), or start the stream on a new snapshot path"
            )
        admin = cluster.admin(client)
        timeout_s = cluster.ask_timeout_s(client)
        try:
            topics = cluster.resolve(admin, subscription, timeout_s)
            starts = cluster.starting_offsets(admin, topics, options, timeout_s)
        except ConfigError:
            raise
        except Exception as exc:  # confluent-kafka's KafkaException, a future's error
            raise cluster.unreachable(client, exc) from None
        channels = [Channel(t, p, starts[(t, p)]) for t, p in sorted(starts)]
        ids = {t: info["id"] for t, info in topics.items()}
        return cls(client, subscription, channels, ids, *common)

    def persist(self) -> None:
        write_json(
            self.manifest_path,
            {
                "subscription": self.subscription,
                "channels": [c.__dict__ for c in self.channels],
                "topic_ids": self.topic_ids,
            },
        )
        log.info(
            "kafka upstream: %d channels (%s)",
            len(self.channels),
            ", ".join(c.name() for c in self.channels),
        )

    # -- the upstream protocol -------------------------------------------------------------

    def schema(self) -> pa.Schema:
        return pa.schema([*KEY_VALUE, HEADERS] if self.include_headers else KEY_VALUE)

    def channel_count(self) -> int:
        return len(self.channels)

    def start_positions(self) -> list[int]:
        self._reload()
        return [c.start for c in self.channels]

    def available(self) -> list[int]:
        """Per channel, the last stable offset (read_committed) or high watermark."""
        from confluent_kafka import IsolationLevel, TopicPartition

        level = (
            IsolationLevel.READ_COMMITTED
            if self.isolation == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        asked = {
            TopicPartition(c.topic, c.partition): cluster.spec("latest") for c in self.channels
        }
        got = cluster.result(
            self._admin().list_offsets(asked, isolation_level=level),
            "listing end offsets",
            30,
        )
        ends = {(tp.topic, tp.partition): info.offset for tp, info in got.items()}
        return [max(c.start, int(ends[(c.topic, c.partition)])) for c in self.channels]

    def read(self, channel: int, start: int, end: int) -> pa.Table:
        """The records of channel ``channel`` at offsets ``[start, end)``, in order."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        if channel >= len(self.channels):
            self._reload()
        ch = self.channels[channel]
        if end <= start:
            return self.schema().empty_table()
        consumer = Consumer(
            {
                # the range ends where the partition ended at planning: a fetch there
                # waits for new records, which only ends the read later
                "fetch.wait.max.ms": 10,
                **self.client,
                "group.id": f"barriered-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
            }
        )
        try:
            low, _ = consumer.get_watermark_offsets(
                TopicPartition(ch.topic, ch.partition), timeout=30
            )
            first = start
            if start < low:
                self._lost(ch, start, min(low, end))
                first = min(low, end)
            if first >= end:
                return self.schema().empty_table()
            consumer.assign([TopicPartition(ch.topic, ch.partition, first)])
            rows: list[Any] = []
            deadline = time.monotonic() + self.poll_timeout_ms / 1000
            done = False
            while not done:
                if time.monotonic() > deadline:
                    raise UpstreamError(
                        f"kafka upstream: reading {ch.name()} offsets [{start}, {end}) got "
                        f"{len(rows)} records and no more within kafkaConsumer.pollTimeoutMs="
                        f"{self.poll_timeout_ms}; is the broker reachable from the executors?"
                    )
                # At most the offsets left, so a range without gaps returns at once; a
                # short wait, so a gap (a transaction marker) costs little.
                wanted = min(10_000, max(1, end - (rows[-1].offset() + 1 if rows else first)))
                for message in consumer.consume(num_messages=wanted, timeout=0.1):
                    error, offset = message.error(), message.offset() or 0
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            done = done or offset >= end
                            continue
                        raise UpstreamError(
                            f"kafka upstream: reading {ch.name()} offsets [{start}, {end}) "
                            f"failed: {error}"
                        )
                    if offset >= end:
                        done = True
                        break
                    rows.append(message)
                    done = offset == end - 1
        finally:
            consumer.close()
        return self._table(rows)

    def completed(self, positions: Sequence[int]) -> None:
        """Commit a completed checkpoint's offsets to ``kafka.group.id`` (if given), so
        lag monitoring sees the query's progress; a failure is logged, never fatal."""
        if self.group_id is None:
            return
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        self._reload()
        offsets = [
            TopicPartition(c.topic, c.partition, int(p))
            for c, p in zip(self.channels, positions, strict=False)
        ]
        request = [ConsumerGroupTopicPartitions(self.group_id, offsets)]
        try:
            cluster.result(self._admin().alter_consumer_group_offsets(request), "committing", 30)
        except UpstreamError as exc:
            log.warning("kafka upstream: offsets not committed to group %r: %s", self.group_id, exc)
            return
        log.info("kafka upstream: committed offsets %s to group %r", positions, self.group_id)

    def _lost(self, ch: Channel, start: int, end: int) -> None:
        """Records ``[start, end)`` of ``ch`` were deleted before they were read."""
        what = (
            f"kafka upstream: offsets [{start}, {end}) of {ch.name()} were deleted (by "
            "retention or deleteRecords) before the query read them"
        )
        if self.fail_on_data_loss:
            raise UpstreamError(
                f"{what}. Nothing of them can be read again. Set failOnDataLoss=false to skip "
                "such records (they are lost), or restore from a checkpoint whose offsets "
                "the topic still holds"
            )
        log.warning("%s; skipped (failOnDataLoss=false)", what)
        record = {"topic": ch.topic, "partition": ch.partition, "from": start, "to": end}
        name = f"{ch.name()}-{start}-{end}.json"  # the same range read again: same file
        write_json(f"{self.manifest_path.rsplit('/', 1)[0]}/{LOST_DIR}/{name}", record)

    def _table(self, messages: list[Any]) -> pa.Table:
        columns: dict[str, list[Any]] = {f.name: [] for f in self.schema()}
        for m in messages:
            kind, ts = m.timestamp()
            columns["key"].append(m.key())
            columns["value"].append(m.value())
            columns["topic"].append(m.topic())
            columns["partition"].append(m.partition())
            columns["offset"].append(m.offset())
            columns["timestamp"].append(ts * 1000 if ts is not None and ts >= 0 else None)
            columns["timestampType"].append(max(kind - 1, 0))
            if self.include_headers:
                headers = m.headers() or []
                columns["headers"].append([{"key": k, "value": v} for k, v in headers])
        schema = self.schema()
        arrays = [
            pa.array(columns[f.name], pa.int64()).cast(f.type)
            if f.name == "timestamp"
            else pa.array(columns[f.name], f.type)
            for f in schema
        ]
        return pa.Table.from_arrays(arrays, schema=schema)

    def discover(self) -> None:
        """Read the partitions the subscription gained as new channels (see
        :meth:`_gained`), recorded in the manifest first."""
        added = self._gained()
        if added:
            self.channels += added
            self.persist()
            log.info(
                "kafka upstream: new partitions %s read as channels %d..%d, from their "
                "earliest offsets",
                [c.name() for c in added],
                len(self.channels) - len(added),
                len(self.channels) - 1,
            )

    def _gained(self) -> list[Channel]:
        """The partitions the subscription gained since the stream started (new
        partitions of its topics; with ``subscribePattern``, also of new matching
        topics), each starting at its earliest offset, as Spark's Kafka source does.

        Raises
        ------
        UpstreamError
            For a topic that was deleted, or deleted and recreated (its id changed).
        """
        from confluent_kafka import TopicCollection, TopicPartition

        topics = sorted(self.topic_ids)
        if opt.SUBSCRIBE_PATTERN.name in self.subscription:
            admin = self._admin()
            pattern = re.compile(self.subscription[opt.SUBSCRIBE_PATTERN.name])
            topics = sorted(
                {
                    *topics,
                    *(t for t in admin.list_topics(timeout=30).topics if pattern.fullmatch(t)),
                }
            )
        futures = self._admin().describe_topics(TopicCollection(topics))
        known = {(c.topic, c.partition) for c in self.channels}
        found: list[tuple[str, int]] = []
        for topic in topics:
            try:
                info = futures[topic].result(timeout=30)
            except Exception as exc:
                if topic not in self.topic_ids:
                    continue  # a new matching topic that is gone again
                raise UpstreamError(
                    f"kafka upstream: topic {topic!r} of this stream cannot be described "
                    f"({exc}); was it deleted? Its records are not read again from a new "
                    "topic of the same name: start the stream on a new snapshot path"
                ) from exc
            now = str(info.topic_id)
            if self.topic_ids.setdefault(topic, now) != now:
                raise UpstreamError(
                    f"kafka upstream: topic {topic!r} was deleted and recreated (its id was "
                    f"{self.topic_ids[topic]}, now {now}); its offsets now name other records, "
                    "so it is not read again from the start. Start the stream on a new "
                    "snapshot path"
                )
            if opt.ASSIGN.name not in self.subscription:
                found += [(topic, p.id) for p in info.partitions if (topic, p.id) not in known]
        if not found:
            return []
        asked = {TopicPartition(t, p): cluster.spec("earliest") for t, p in found}
        earliest = cluster.result(self._admin().list_offsets(asked), "listing start offsets", 30)
        return [
            Channel(tp.topic, tp.partition, int(o.offset))
            for tp, o in sorted(
                earliest.items(), key=lambda item: (item[0].topic, item[0].partition)
            )
        ]

    def _reload(self) -> None:
        """Adopt the channels another process added (the manifest only grows)."""
        saved = read_json(self.manifest_path, default=None)
        if saved is not None and len(saved["channels"]) > len(self.channels):
            self.channels = [Channel(**c) for c in saved["channels"]]
            self.topic_ids = dict(saved["topic_ids"])

    def describe(self) -> Mapping[str, object]:
        return {
            "upstream": self.name,
            "channels": len(self.channels),
            "bootstrap.servers": self.client["bootstrap.servers"],
            "topicPartitions": [c.name() for c in self.channels],
            "isolation.level": self.isolation,
        }


def manifest_channel_names(state_dir: str) -> list[str] | None:
    """``topic-partition`` of every channel in the manifest under ``state_dir`` (a
    snapshot path's ``_source`` folder), in channel order; ``None`` without a manifest.
    Only reads: no client, no broker."""
    saved = read_json(f"{state_dir.rstrip('/')}/{MANIFEST_NAME}", default=None)
    if saved is None:
        return None
    return [Channel(**c).name() for c in saved["channels"]]
