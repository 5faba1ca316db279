"""Publish a completed checkpoint's staged records to Kafka in one transaction.

The coordinator publishes checkpoint ``n`` right after its completion (the ``state``
commit, whose metadata holds the plan: :mod:`barriered.sink.committer`): a transactional
producer (``transactional.id`` ``barriered.sink.<sinkId>``) produces the records of
every batch of the plan, in batch order, then commits, *in the same transaction*, the
offset ``n`` of the sink's consumer group on partition 0 of the progress topic (its
metadata: the checkpoint, rows, bytes, snapshot path). So the group's committed offset
says exactly which checkpoint was published last, and the records of ``n`` become
visible to ``read_committed`` consumers together, or not at all.

After a crash the next run (:func:`fence`, at its start) calls ``init_transactions``
with the same ``transactional.id``: Kafka aborts the transaction a crashed or still
running older run left open and fences that producer (its commit fails from then on);
then :func:`publish` of a completed checkpoint whose offset the group does not hold
publishes it again, whole. A fenced run (the ownership epoch) checks the path's owner
after producing and before committing; one whose check passed just before the takeover
is fenced by the new run's ``init_transactions``.
"""

from __future__ import annotations

import atexit
import json
import logging
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from barriered import crash_points
from barriered.errors import FencedError, InjectedFault, SinkError, SinkRewindError
from barriered.files.fileio import filesystem, join, list_names, read_json, write_json
from barriered.sink import staging
from barriered.sink.commit_plan import SinkCommit, SinkPlan
from barriered.sink.kafka.options import KafkaSinkSettings, redact
from barriered.sink.staging import StagedBatch, forget
from barriered.statestore import ownership
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

#: Longest wait of one Kafka call (init, send offsets, commit, flush), in seconds.
TIMEOUT_S = 60.0
#: Error codes of a group coordinator not (yet) there: NOT_COORDINATOR,
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE (asked again).
COORDINATOR_MOVING = frozenset({14, 15, 16})
#: The file under ``_sink/<sink>/`` with the sink's settings (no secret).
SETTINGS_FILE = "kafka.json"


@dataclass(frozen=True)
class Published:
    """What the sink's consumer group records: the last checkpoint published."""

    checkpoint_id: int
    rows: int
    bytes: int
    snapshot_path: str


def settings_file(layout: SnapshotLayout, sink_id: str) -> str:
    """Where the sink's settings are kept (for a restore's check and the fencing)."""
    return join(layout.sink_dir(sink_id), SETTINGS_FILE)


def save_settings(layout: SnapshotLayout, settings: KafkaSinkSettings) -> None:
    """Record the sink's settings (no secret) under the snapshot path."""
    write_json(settings_file(layout, settings.sink_id), settings.to_dict())


def kafka_sinks(layout: SnapshotLayout) -> list[KafkaSinkSettings]:
    """The Kafka sinks that ever staged on this snapshot path."""
    found = []
    for sink_id in staging.sink_ids(layout):
        if SETTINGS_FILE in list_names(layout.sink_dir(sink_id)):
            found.append(saved_settings(layout, sink_id))
    return [s for s in found if s is not None]


def saved_settings(layout: SnapshotLayout, sink_id: str) -> KafkaSinkSettings | None:
    """The settings the Kafka sink ``sink_id`` recorded (None: not a Kafka sink)."""
    raw = read_json(settings_file(layout, sink_id), default=None)
    return None if raw is None else KafkaSinkSettings.from_dict(raw)


def _failed(settings: KafkaSinkSettings, what: str, exc: BaseException) -> SinkError:
    return SinkError(
        redact(
            f"barriered-kafka sink {settings.sink_id!r}: {what} failed: {exc}. Nothing of "
            "the transaction is visible; the next run publishes the checkpoint",
            settings,
        )
    )


def group_consumer(settings: KafkaSinkSettings) -> Any:
    """A consumer of the sink's group (never subscribed: it reads the group's offset
    and names the group in the publishing transaction)."""
    from confluent_kafka import Consumer

    producer_only = {"partitioner", "linger.ms", "transaction.timeout.ms", "compression.type"}
    config = settings.producer_config()
    return Consumer(
        {
            **{k: v for k, v in config.items() if k not in producer_only},
            "group.id": settings.group_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )


def read_published(consumer: Any, s: KafkaSinkSettings) -> Published | None:
    """The last checkpoint the sink's group records as published (None: none)."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            (tp,) = consumer.committed([TopicPartition(s.progress_topic, 0)], timeout=TIMEOUT_S)
            break
        except KafkaException as exc:  # no group coordinator yet (a new cluster): retry
            err = exc.args[0]
            again = err.retriable() or err.code() in COORDINATOR_MOVING
            if not again or time.monotonic() > deadline:
                raise _failed(s, f"reading the offset of group {s.group_id!r}", exc) from None
            time.sleep(0.2)
    if tp.error is not None:
        raise SinkError(redact(f"reading the group {s.group_id!r}: {tp.error}", s))
    if tp.offset < 0:
        return None
    meta = json.loads(tp.metadata or "{}")
    return Published(
        int(tp.offset),
        int(meta.get("rows", 0)),
        int(meta.get("bytes", 0)),
        str(meta.get("snapshot_path", "")),
    )


def published(settings: KafkaSinkSettings) -> Published | None:
    """The sink's last published checkpoint, read with a consumer of its own."""
    consumer = group_consumer(settings)
    try:
        return read_published(consumer, settings)
    finally:
        consumer.close()


class Clients:
    """One run's transactional producer of a sink and the consumer naming its group."""

    def __init__(self, settings: KafkaSinkSettings) -> None:
        from confluent_kafka import Producer

        self.settings = settings
        config = {"partitioner": "murmur2_random", **settings.producer_config()}
        self.producer = Producer(
            {
                **config,
                "transactional.id": settings.transactional_id,
                "enable.idempotence": True,
                "acks": "all",
            }
        )
        self.consumer = group_consumer(settings)
        self.producer.init_transactions(TIMEOUT_S)

    def published(self) -> Published | None:
        """The last checkpoint the sink's group records as published (None: none)."""
        return read_published(self.consumer, self.settings)

    def close(self) -> None:
        """Close both clients (a transaction still open is aborted; a producer fenced by
        a newer run's cannot abort, which its warning says and nothing needs)."""
        self.consumer.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self.producer.close()


#: The clients of each (snapshot path, sink, run epoch) in this process.
_CLIENTS: dict[tuple[str, str, int | None], Clients] = {}


def clients(layout: SnapshotLayout, settings: KafkaSinkSettings, epoch: int | None) -> Clients:
    """The run's clients of the sink, created (``init_transactions``) on first use."""
    key = (layout.root, settings.sink_id, epoch)
    found = _CLIENTS.get(key)
    if found is None:
        try:
            found = Clients(settings)
        except Exception as exc:
            raise _failed(settings, "init_transactions", exc) from None
        _CLIENTS[key] = found
    return found


def close(root: str | None = None) -> None:
    """Close the clients of every run of snapshot path ``root`` (None: of every path) in
    this process; also at the interpreter's exit."""
    for key in [k for k in _CLIENTS if root is None or k[0] == root]:
        _CLIENTS.pop(key).close()


atexit.register(close)


def _drop(layout: SnapshotLayout, settings: KafkaSinkSettings, epoch: int | None) -> None:
    gone = _CLIENTS.pop((layout.root, settings.sink_id, epoch), None)
    if gone is not None:
        gone.close()


def fence(layout: SnapshotLayout, epoch: int) -> None:
    """At a run's start: ``init_transactions`` for every Kafka sink of the path, which
    aborts a transaction an older run left open and fences its producer."""
    for settings in kafka_sinks(layout):
        _drop(layout, settings, epoch)
        clients(layout, settings, epoch)
        log.info("sink %s: older producers fenced (epoch %d)", settings.sink_id, epoch)


def _headers(raw: Sequence[Mapping[str, Any]] | None) -> list[tuple[str, bytes | None]] | None:
    return None if raw is None else [(h["key"], h["value"]) for h in raw]


def undelivered(err: Any, msg: Any) -> str | None:
    """Why a delivery report does not prove its record is in the log (None: it does).

    librdkafka reports a record of an idempotent producer delivered, with no offset, when
    the broker answers a retried batch with a sequence error after a later batch of the
    same producer was written: the record may be missing from the log. The
    transaction is then aborted, as for an error.
    """
    if err is not None:
        return str(err)
    if msg.offset() is None:
        where = f"{msg.topic()}-{msg.partition()}"
        return f"{where}: acknowledged without an offset (maybe not written)"
    return None


def _produce(
    layout: SnapshotLayout, c: Clients, checkpoint_id: int, batches: Sequence[StagedBatch]
) -> int:
    """Produce the batches' records in the open transaction; return their bytes."""
    s, producer = c.settings, c.producer
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        problem = undelivered(err, msg)
        if problem is not None:
            errors.append(problem)

    total = sum(b.rows for b in batches)
    fs, root = filesystem(s.path)
    sent = size = 0
    for batch in batches:
        for f in batch.files:
            table = pq.read_table(f"{root}/{f.path}", filesystem=fs)
            for name in ("key", "value"):
                size += int(pc.sum(pc.binary_length(table[name])).as_py() or 0)
            cols = [table[c].to_pylist() for c in ("key", "value", "topic", "partition")]
            headers = table["headers"].to_pylist()
            for key, value, topic, partition, header in zip(*cols, headers, strict=True):
                extra: dict[str, Any] = {}
                if partition is not None:
                    extra["partition"] = partition
                if header is not None:
                    extra["headers"] = _headers(header)
                while True:
                    try:
                        producer.produce(
                            s.topic or topic, value, key, on_delivery=delivered, **extra
                        )
                        break
                    except BufferError:  # the local queue is full: let it drain
                        producer.poll(0.05)
                sent += 1
                if sent == total // 2 and crash_points.ENABLED:  # recovery tests: half sent
                    producer.flush(TIMEOUT_S)
                    crash_points.hit(layout, crash_points.MID_PUBLISH, checkpoint_id)
    if producer.flush(TIMEOUT_S) > 0:
        errors.append(f"records still unsent after {TIMEOUT_S:.0f} s")
    if errors:
        raise SinkError(
            redact(
                f"barriered-kafka sink {s.sink_id!r}: checkpoint {checkpoint_id}: "
                f"{len(errors)} record(s) not delivered (first: {errors[0]}); the "
                "transaction is aborted",
                s,
            )
        )
    return size


def _transaction(
    layout: SnapshotLayout,
    c: Clients,
    checkpoint_id: int,
    batches: Sequence[StagedBatch],
    epoch: int | None,
) -> int:
    """Publish ``batches`` and record ``checkpoint_id`` in one transaction; its bytes."""
    from confluent_kafka import TopicPartition

    s, producer = c.settings, c.producer
    rows = sum(b.rows for b in batches)
    producer.begin_transaction()
    size = _produce(layout, c, checkpoint_id, batches)
    if epoch is not None:
        ownership.check(layout, epoch, f"publishing checkpoint {checkpoint_id} to Kafka")
    meta = {"rows": rows, "bytes": size, "snapshot_path": layout.root, "epoch": epoch}
    offsets = [TopicPartition(s.progress_topic, 0, checkpoint_id, metadata=json.dumps(meta))]
    producer.send_offsets_to_transaction(offsets, c.consumer.consumer_group_metadata(), TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)
    return size


def _not_ours(s: KafkaSinkSettings, root: str, other: str, what: str) -> SinkError:
    return SinkError(
        f"barriered-kafka sink {s.sink_id!r} of snapshot path {root!r}: its transactional "
        f"id and consumer group {s.group_id!r} belong to the query of snapshot path "
        f"{other!r}, which {what}. Kafka output does not move to another snapshot path: "
        "that query's completed checkpoints not yet published are staged under its path, "
        "and its checkpoint ids would be taken for this query's (this query's output "
        "silently dropped). Nothing was written. To go on with that query (a restore or "
        f"savepoint of it), restore on its snapshot path {other!r} (option restoreFrom); "
        "to write this query's output, give this sink its own id (option sinkId)"
    )


def _check_owner(layout: SnapshotLayout, s: KafkaSinkSettings, done: Published | None) -> None:
    if done is not None and done.snapshot_path and done.snapshot_path != layout.root:
        target = s.topic or "the topics of its rows"
        raise _not_ours(
            s,
            layout.root,
            done.snapshot_path,
            f"published its output up to checkpoint {done.checkpoint_id} to {target!r}",
        )


def check_owner(layout: SnapshotLayout, s: KafkaSinkSettings, origin: str | None = None) -> None:
    """Refuse, before anything is staged or published, a sink whose transactional id and
    consumer group belong to the query of another snapshot path: the group records a
    checkpoint that path published, or this run was restored from ``origin`` (another
    snapshot path, or a savepoint's origin) where the sink staged output.

    Raises
    ------
    SinkError
        Naming the sink, both snapshot paths and what to do.
    """
    _check_owner(layout, s, published(s))
    elsewhere = origin if origin not in (None, layout.root) else None
    if elsewhere is not None and saved_settings(SnapshotLayout.at(elsewhere), s.sink_id):
        raise _not_ours(s, layout.root, elsewhere, "this query was restored from")


def publish(
    layout: SnapshotLayout, checkpoint_id: int, plan: SinkPlan, epoch: int | None
) -> SinkCommit:
    """Publish the staged records of completed ``checkpoint_id`` (idempotent).

    Raises
    ------
    SinkError
        When the transaction failed (then it is aborted, nothing is visible), a staged
        batch of the plan is gone, or the group belongs to another query.
    FencedError
        When a newer run owns the snapshot path (the transaction is aborted).
    """
    staged = [staging.read(layout, plan.sink_id, e, b) for e, b in plan.batches]
    batches = [b for b in staged if b is not None]
    s = saved_settings(layout, plan.sink_id)
    if s is None or not batches:  # published and forgotten (as the delta sink's commit)
        return SinkCommit(plan.sink_id, None)
    c = clients(layout, s, epoch)
    done = c.published()
    _check_owner(layout, s, done)
    if done is not None and done.checkpoint_id >= checkpoint_id:
        forget(layout, batches, delete_data=True)
        log.info("sink %s: checkpoint %d already published", plan.sink_id, checkpoint_id)
        if done.checkpoint_id == checkpoint_id:
            return SinkCommit(plan.sink_id, None, done.rows, done.bytes)
        return SinkCommit(plan.sink_id, None)
    if len(batches) < len(staged):
        missing = [b for b, x in zip(plan.batches, staged, strict=True) if x is None]
        raise SinkError(
            f"barriered-kafka sink {plan.sink_id!r}: checkpoint {checkpoint_id} publishes "
            f"the staged (epoch, batch) {missing}, but their records under "
            f"{layout.sink_dir(plan.sink_id)!r} are gone; their output cannot be published"
        )
    rows = sum(b.rows for b in batches)
    size = 0
    if rows:
        try:
            size = _transaction(layout, c, checkpoint_id, batches, epoch)
        except BaseException as exc:
            try:
                c.producer.abort_transaction(TIMEOUT_S)
            except Exception:  # fenced or fatal: the next init_transactions aborts it
                log.debug("sink %s: abort after a failure failed too", s.sink_id)
            _drop(layout, s, epoch)
            if isinstance(exc, SinkError | InjectedFault | FencedError):
                raise
            if isinstance(exc, Exception):
                raise _failed(s, f"publishing checkpoint {checkpoint_id}", exc) from None
            raise
    forget(layout, batches, delete_data=True)
    log.info(
        "sink %s: checkpoint %d published %d record(s), %d bytes",
        plan.sink_id,
        checkpoint_id,
        rows,
        size,
    )
    return SinkCommit(plan.sink_id, None, rows, size)


def check_restore(layout: SnapshotLayout, checkpoint_id: int) -> None:
    """Refuse a restore from ``checkpoint_id`` when a Kafka sink already published a later
    checkpoint: its records cannot be taken back, so the restored run would publish
    that output a second time.

    Raises
    ------
    SinkRewindError
        Naming the sink, the topic, the published checkpoint and what to do.
    """
    for s in kafka_sinks(layout):
        done = published(s)
        if done is None or done.checkpoint_id <= checkpoint_id:
            continue
        raise SinkRewindError(
            redact(
                f"restore from checkpoint {checkpoint_id} of {layout.root!r}: the "
                f"barriered-kafka sink {s.sink_id!r} already published the output up to "
                f"checkpoint {done.checkpoint_id} to "
                f"{s.topic or 'the topics of its rows'!r} (group {s.group_id!r}), and Kafka "
                "records cannot be taken back: the restored run would publish the output "
                f"after checkpoint {checkpoint_id} again. Nothing was written. Restore the "
                f"latest checkpoint ({done.checkpoint_id} or later), or publish to a new "
                "topic with a new sinkId",
                s,
            )
        )
