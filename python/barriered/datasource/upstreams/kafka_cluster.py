"""What a Kafka cluster holds, asked with confluent-kafka's admin client: the topics and
partitions of a subscription and the offsets a new stream starts at (for the ``kafka``
upstream, :mod:`barriered.datasource.upstreams.kafka`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from barriered.config.upstream_options import (
    ASSIGN,
    STARTING_OFFSETS,
    STARTING_TIMESTAMP,
    SUBSCRIBE,
    SUBSCRIBE_PATTERN,
)
from barriered.errors import ConfigError, UpstreamError

#: ``startingOffsets`` JSON's special offsets.
EARLIEST, LATEST = -2, -1
#: How long a question to the cluster waits at most (less with a smaller
#: ``kafka.socket.timeout.ms``).
ASK_TIMEOUT_S = 30.0


def ask_timeout_s(client: Mapping[str, str]) -> float:
    """The wait of one question to the cluster: :data:`ASK_TIMEOUT_S`, or the client's
    ``socket.timeout.ms`` when it is shorter."""
    try:
        socket_ms = float(client.get("socket.timeout.ms", "inf"))
    except ValueError:
        return ASK_TIMEOUT_S
    return min(ASK_TIMEOUT_S, socket_ms / 1000)


def unreachable(client: Mapping[str, str], exc: BaseException) -> UpstreamError:
    """The error of a cluster that did not answer the questions a new stream asks (its
    topics, partitions and offsets): names the servers, the security settings (never a
    secret) and what to check."""
    servers = client.get("bootstrap.servers")
    protocol = client.get("security.protocol", "plaintext")
    mechanism = client.get("sasl.mechanism") or client.get("sasl.mechanisms")
    sasl = f", kafka.sasl.mechanism={mechanism!r}" if mechanism else ""
    return UpstreamError(
        f"kafka upstream: the cluster at kafka.bootstrap.servers={servers!r} did not answer "
        f"(kafka.security.protocol={protocol!r}{sasl}): {type(exc).__name__}: {exc}. Check "
        "that these servers are reachable from the driver and that kafka.security.protocol "
        "and kafka.sasl.* match the broker's listener (a SASL client against a PLAINTEXT "
        "listener fails this way, as does the reverse). Nothing was written"
    )


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


def resolve(
    admin: Any, subscription: Mapping[str, str], timeout_s: float = ASK_TIMEOUT_S
) -> dict[str, Any]:
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
        metadata = admin.list_topics(timeout=timeout_s)
        listed = sorted(t for t in metadata.topics if not t.startswith("__"))
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
    described = result(admin.describe_topics(TopicCollection(names)), "describing", timeout_s)
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
    admin: Any,
    topics: Mapping[str, Any],
    options: Mapping[str, str],
    timeout_s: float = ASK_TIMEOUT_S,
) -> dict[tuple[str, int], int]:
    """The offset each topic-partition starts at (``startingOffsets`` or
    ``startingTimestamp``; default ``latest``, as Spark's Kafka source).

    Raises
    ------
    ConfigError
        ``startingOffsets`` that is not valid, lacks a subscribed topic-partition, names
        one the subscription does not have, or gives an offset past a partition's end.
    """
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
            extra = sorted(set(given) - set(partitions))
            if extra:
                held = {t: info["partitions"] for t, info in topics.items()}
                raise ConfigError(
                    f"{STARTING_OFFSETS.where} names topic-partition(s) "
                    f"{[f'{t}-{p}' for t, p in extra]}, which the subscription does not have "
                    f"(its topics and partitions: {held}); give offsets only for those"
                )
            for tp in partitions:
                o = given[tp]
                named = {EARLIEST: "earliest", LATEST: "latest"}.get(o)
                wanted[tp] = o if named is None else spec(named)
    exact = {tp: o for tp, o in wanted.items() if isinstance(o, int)}
    _check_within(admin, exact, timeout_s)
    asked = {TopicPartition(t, p): s for (t, p), s in wanted.items() if not isinstance(s, int)}
    got = result(admin.list_offsets(asked), "listing offsets", timeout_s) if asked else {}
    latest = None
    out = dict(exact)
    for tp, info in got.items():
        offset = int(info.offset)
        if offset < 0:  # startingTimestamp after the partition's last record: its end
            if latest is None:
                latest = result(
                    admin.list_offsets({t: spec("latest") for t in got}),
                    "listing end offsets",
                    timeout_s,
                )
            offset = int(latest[tp].offset)
        out[(tp.topic, tp.partition)] = offset
    return out


def _check_within(admin: Any, exact: Mapping[tuple[str, int], int], timeout_s: float) -> None:
    """Refuse a ``startingOffsets`` offset past its partition's end (the stream would
    wait at it for records that may never come, and skip those written before).

    Raises
    ------
    ConfigError
        Naming the topic-partition, the offset given and the partition's end.
    """
    if not exact:
        return
    from confluent_kafka import TopicPartition

    asked = {TopicPartition(t, p): spec("latest") for t, p in exact}
    ends = {
        (tp.topic, tp.partition): int(info.offset)
        for tp, info in result(admin.list_offsets(asked), "listing end offsets", timeout_s).items()
    }
    past = sorted((tp, o, ends[tp]) for tp, o in exact.items() if o > ends[tp])
    if past:
        listed = ", ".join(f"{t}-{p}: {o} (its end: {end})" for (t, p), o, end in past)
        raise ConfigError(
            f"{STARTING_OFFSETS.where} gives offsets past the end of their partitions: "
            f"{listed}. Give each an offset up to its end, -2 (earliest) or -1 (latest)"
        )
