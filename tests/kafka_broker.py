"""The test suite's Kafka broker: the package's local KRaft broker
(:class:`barriered.local.kafka_broker.KafkaBroker`, from the jars ``make install`` put in
``build/kafka/``) with the tests' client helpers, on confluent-kafka: create, grow and
delete topics, produce (plain or in a committed or aborted transaction), read what a
``read_committed`` consumer sees, and delete records (what retention does to records
nobody read yet). Errors of these helpers are :class:`~barriered.errors.LocalServerError`.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
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

from barriered.errors import LocalServerError
from barriered.local import kafka_broker as local

LOG = logging.getLogger(__name__)
TIMEOUT = 30.0  # one admin, produce or read call

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


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


class KafkaBroker(local.KafkaBroker):
    """The local broker with the tests' clients (one admin client, one producer of each
    kind, dropped when it stops)."""

    def __init__(self) -> None:
        super().__init__()
        self._admin: Any = None
        self._producers: dict[bool, Producer] = {}

    def stop(self, keep_folder: bool = False) -> None:
        """Drop the clients, then stop the broker (see the package's ``stop``)."""
        self._admin = None
        self._producers.clear()
        super().stop(keep_folder)

    # -- clients ------------------------------------------------------------------------

    def _client_config(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "logger": LOG, **extra}

    @property
    def admin(self) -> Any:
        """A confluent-kafka ``AdminClient`` on this broker."""
        if self.process is None:
            raise LocalServerError("the Kafka broker is not running")
        if self._admin is None:
            self._admin = AdminClient(self._client_config())
        return self._admin

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids, sorted."""
        metadata = self.admin.list_topics(topic, timeout=TIMEOUT).topics[topic]
        if metadata.error is not None:
            raise LocalServerError(f"topic {topic!r}: {metadata.error}")
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
        raise LocalServerError(f"topic {topic!r} did not reach {partitions} partitions in time")

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
                raise LocalServerError(f"records to {topic!r} still unacknowledged")
            if transactional == "abort":
                producer.abort_transaction(TIMEOUT)
            elif transactional:
                producer.commit_transaction(TIMEOUT)
        except (KafkaException, LocalServerError) as exc:
            self._producers.pop(bool(transactional), None)  # a new one for the next call
            raise LocalServerError(f"producing to {topic!r} failed: {exc}") from exc
        errors += [f"record {i}: not acknowledged" for i, at in enumerate(delivered) if not at]
        if errors:
            raise LocalServerError(f"producing to {topic!r} failed: " + "; ".join(errors))
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
                    raise LocalServerError(
                        f"reading {topic!r}: partitions {sorted(pending)} did not reach "
                        f"their end offsets {ends} in {TIMEOUT:.0f} s"
                    )
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                error, partition, offset = msg.error(), msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise LocalServerError(f"reading {topic!r}: {error}")
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
