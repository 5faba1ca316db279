"""What a Kafka cluster holds, asked with confluent-kafka's admin client: the topics and
partitions of a subscription and the offsets a new stream starts at (for the ``kafka``
upstream, :mod:`barriered.datasource.upstreams.kafka`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from barriered.datasource.upstreams.options import (
    ASSIGN,
    STARTING_OFFSETS,
    STARTING_TIMESTAMP,
    SUBSCRIBE,
    SUBSCRIBE_PATTERN,
)
from barriered.errors import ConfigError, UpstreamError

#: ``startingOffsets`` JSON's special offsets.
EARLIEST, LATEST = -2, -1


def admin(client: Mapping[str, str]) -> Any:
    """A new admin client (keep it while its futures run: they fail once it is gone)."""
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError:
        raise ConfigError(
            "upstream 'kafka' needs the Python package confluent-kafka on the driver and "
            "the executors: pip install 'spark-barriered[kafka]'"
        ) from None
    consumer_only = ("group.id", "isolation.level")  # librdkafka warns about them
    return AdminClient({k: v for k, v in client.items() if k not in consumer_only})


def spec(which: str, timestamp_ms: int = 0) -> Any:
    """confluent-kafka's ``OffsetSpec`` (``earliest``, ``latest`` or ``for_timestamp``);
    its stubs leave the class unexported and the constructors untyped."""
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    offset_spec: Any = OffsetSpec
    if which == "for_timestamp":
        return offset_spec.for_timestamp(timestamp_ms)
    return offset_spec.earliest() if which == "earliest" else offset_spec.latest()


def result(futures: Mapping[Any, Any], what: str, timeout_s: float) -> dict[Any, Any]:
    """Wait for an admin call's futures; a failure names what was asked."""
    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(timeout=timeout_s)
        except Exception as exc:
            raise UpstreamError(f"kafka upstream: {what} failed for {key}: {exc}") from exc
    return out


def resolve(admin: Any, subscription: Mapping[str, str]) -> dict[str, Any]:
    """Topic -> {"id", "partitions"} of the subscription, as the cluster has them now."""
    from confluent_kafka import TopicCollection

    ((kind, raw),) = subscription.items()
    assigned: dict[str, list[int]] | None = None
    if kind == ASSIGN.name:
        try:
            parsed = json.loads(raw)
            assigned = {str(t): [int(p) for p in ps] for t, ps in parsed.items()}
        except (ValueError, TypeError, AttributeError):
            raise ConfigError(
                f'option {ASSIGN.name!r} must be JSON like {{"topic": [0, 1]}}, got {raw!r}'
            ) from None
        names = sorted(assigned)
    else:
        listed = sorted(t for t in admin.list_topics(timeout=30).topics if not t.startswith("__"))
        if kind == SUBSCRIBE.name:
            names = [t.strip() for t in raw.split(",") if t.strip()]
        else:
            try:
                pattern = re.compile(raw)
            except re.error as exc:
                raise ConfigError(f"{SUBSCRIBE_PATTERN.where} {raw!r}: {exc}") from None
            names = [t for t in listed if pattern.fullmatch(t)]
        missing = [t for t in names if t not in listed]
        if missing or not names:
            raise ConfigError(
                f"kafka upstream: option {kind!r}={raw!r} names no existing topic "
                f"{missing or ''} (topics on the cluster: {listed})"
            )
    described = result(admin.describe_topics(TopicCollection(names)), "describing", 30)
    out: dict[str, Any] = {}
    for topic in names:
        info = described[topic]
        partitions = [p.id for p in info.partitions]
        if assigned is not None:
            unknown = sorted(set(assigned[topic]) - set(partitions))
            if unknown:
                raise ConfigError(
                    f"{ASSIGN.where} names partitions {unknown} of topic {topic!r}, which "
                    f"has {len(partitions)}"
                )
            partitions = sorted(assigned[topic])
        out[topic] = {"id": str(info.topic_id), "partitions": partitions}
    return out


def starting_offsets(
    admin: Any, topics: Mapping[str, Any], options: Mapping[str, str]
) -> dict[tuple[str, int], int]:
    """The offset each topic-partition starts at (``startingOffsets`` or
    ``startingTimestamp``; default ``latest``, as Spark's Kafka source)."""
    from confluent_kafka import TopicPartition

    raw_offsets = STARTING_OFFSETS.given(options)
    stamp = STARTING_TIMESTAMP.read_int(options)
    if raw_offsets and stamp is not None:
        raise ConfigError(
            f"set one of the options {STARTING_OFFSETS.name} and {STARTING_TIMESTAMP.name}, "
            "not both"
        )
    wanted: dict[tuple[str, int], Any] = {}
    partitions = [(t, p) for t, info in topics.items() for p in info["partitions"]]
    if stamp is not None:
        wanted = {tp: spec("for_timestamp", stamp) for tp in partitions}
    else:
        text = STARTING_OFFSETS.read_str(options) or ""
        if text.lower() in ("earliest", "latest"):
            wanted = {tp: spec(text.lower()) for tp in partitions}
        else:
            try:
                given = {
                    (str(t), int(p)): int(o)
                    for t, ps in json.loads(text).items()
                    for p, o in ps.items()
                }
            except (ValueError, TypeError, AttributeError):
                raise ConfigError(
                    f"{STARTING_OFFSETS.where} must be earliest, latest or JSON like "
                    f'{{"topic": {{"0": 23, "1": -2}}}} (-2 earliest, -1 latest), got {text!r}'
                ) from None
            missing = sorted(set(partitions) - set(given))
            if missing:
                raise ConfigError(
                    f"{STARTING_OFFSETS.where} has no offset for {missing}; give every "
                    "subscribed topic-partition one (-2 earliest, -1 latest)"
                )
            for tp in partitions:
                o = given[tp]
                named = {EARLIEST: "earliest", LATEST: "latest"}.get(o)
                wanted[tp] = o if named is None else spec(named)
    exact = {tp: o for tp, o in wanted.items() if isinstance(o, int)}
    asked = {TopicPartition(t, p): s for (t, p), s in wanted.items() if not isinstance(s, int)}
    got = result(admin.list_offsets(asked), "listing offsets", 30) if asked else {}
    latest = None
    out = dict(exact)
    for tp, info in got.items():
        offset = int(info.offset)
        if offset < 0:  # startingTimestamp after the partition's last record: its end
            if latest is None:
                latest = result(
                    admin.list_offsets({t: spec("latest") for t in got}),
                    "listing end offsets",
                    30,
                )
            offset = int(latest[tp].offset)
        out[(tp.topic, tp.partition)] = offset
    return out
