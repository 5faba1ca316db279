"""The options of the "barriered-kafka" sink, parsed and checked (declared in
:mod:`barriered.config.kafka_sink_options`).

``kafka.*`` options go to the producer without the prefix, as Spark's Kafka sink does.
Secrets among them (a password, a JAAS config, a token: :func:`is_secret`) are never
written under the snapshot path nor shown in an error: the staged batches keep the
other settings, the secrets stay in the driver process that started the query
(:func:`remember_secrets`), and :func:`redact` takes their values out of any message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from barriered.config import SNAPSHOT_PATH
from barriered.config.kafka_sink_options import (
    CLIENT_PREFIX,
    KAFKA_SINK_OPTIONS,
    PRODUCER,
    PROGRESS_TOPIC,
    SINK_ID,
    TOPIC,
)
from barriered.config.sink_options import SPARK_OPTIONS
from barriered.config.source_options import SESSION_CONF_OPTION
from barriered.errors import ConfigError
from barriered.files.fileio import join, to_local_or_uri
from barriered.spelling import closest
from barriered.statestore.layout import SnapshotLayout

#: ``kind`` of the settings of a barriered-kafka sink in a staged batch and a sink plan.
KIND = "kafka"
#: Parts of a producer setting's name that make its value a secret.
SECRET_MARKERS = ("password", "secret", "jaas", "token", ".pem", "oauthbearer.config")
#: Producer settings the sink sets itself (a user value would break exactly-once).
OWN_SETTINGS = frozenset(
    {"transactional.id", "enable.idempotence", "acks", "key.serializer", "value.serializer"}
)
#: The Java clients' SASL login setting, translated for librdkafka (:func:`secrets_of`).
JAAS_CONFIG = "sasl.jaas.config"
#: The JAAS login modules whose username and password librdkafka takes.
JAAS_MODULES = frozenset({"PlainLoginModule", "ScramLoginModule"})
#: Where the secrets of a sink's producer live: (snapshot path, sink id) -> settings.
_SECRETS: dict[tuple[str, str], dict[str, str]] = {}


def is_secret(name: str) -> bool:
    """Whether producer setting ``name`` holds a secret (never written, never shown)."""
    return any(m in name.lower() for m in SECRET_MARKERS)


@dataclass(frozen=True)
class KafkaSinkSettings:
    """The parsed options of one barriered-kafka sink.

    Attributes
    ----------
    snapshot_path : str
        The snapshot path of the query's barriered source.
    sink_id : str
        Name under ``_sink/``, of the transactional id and of the consumer group.
    topic : str or None
        The topic of every row (None: the rows' topic column).
    progress_topic : str
        The topic whose partition 0 holds the sink group's published checkpoint.
    client : tuple of (str, str)
        The producer settings without secrets (``kafka.`` removed), sorted.
    """

    snapshot_path: str
    sink_id: str
    topic: str | None
    progress_topic: str
    client: tuple[tuple[str, str], ...] = ()

    kind = KIND

    @property
    def path(self) -> str:
        """The folder of the staged rows' Parquet files (under the snapshot path)."""
        return join(SnapshotLayout.configured(self.snapshot_path).sink_dir(self.sink_id), "data")

    @property
    def transactional_id(self) -> str:
        """The Kafka ``transactional.id`` of every publishing transaction of this sink."""
        return f"barriered.sink.{self.sink_id}"

    @property
    def group_id(self) -> str:
        """The consumer group whose offset records the published checkpoint."""
        return f"barriered.sink.{self.sink_id}"

    def producer_config(self) -> dict[str, str]:
        """The producer settings, secrets of this process included."""
        key = (to_local_or_uri(self.snapshot_path), self.sink_id)
        return {**dict(self.client), **_SECRETS.get(key, {})}

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (kept in each staged batch; no secret)."""
        return {
            "kind": KIND,
            "snapshot_path": self.snapshot_path,
            "sink_id": self.sink_id,
            "topic": self.topic,
            "progress_topic": self.progress_topic,
            "client": dict(self.client),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KafkaSinkSettings:
        """Parse the JSON form."""
        return cls(
            snapshot_path=str(d["snapshot_path"]),
            sink_id=str(d["sink_id"]),
            topic=None if d.get("topic") is None else str(d["topic"]),
            progress_topic=str(d["progress_topic"]),
            client=tuple(sorted((str(k), str(v)) for k, v in d.get("client", {}).items())),
        )


def secrets_of(options: Mapping[str, str]) -> dict[str, str]:
    """The secret producer settings among the sink's options (``kafka.`` removed; a Java
    client's ``sasl.jaas.config`` as librdkafka's ``sasl.username`` and ``sasl.password``).

    Raises
    ------
    ConfigError
        A ``sasl.jaas.config`` of another login module than PLAIN's or SCRAM's.
    """
    found = {
        k[len(CLIENT_PREFIX) :]: v
        for k, v in options.items()
        if k.lower().startswith(CLIENT_PREFIX) and is_secret(k)
    }
    for name in [k for k in found if k.lower() == JAAS_CONFIG]:
        found.update(_login(found.pop(name)))
    return found


def _login(jaas: str) -> dict[str, str]:
    """``sasl.username`` and ``sasl.password`` of a PLAIN or SCRAM JAAS configuration
    (librdkafka has no JAAS)."""
    module = jaas.split(None, 1)[0] if jaas.strip() else ""
    fields = dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', jaas))
    if module.rsplit(".", 1)[-1] not in JAAS_MODULES or not {"username", "password"} <= set(fields):
        raise ConfigError(
            f"barriered-kafka sink option {CLIENT_PREFIX}{JAAS_CONFIG}: only the login "
            f'modules {sorted(JAAS_MODULES)} with username="..." password="..." are '
            f"understood (the producer is librdkafka, which has no JAAS; got module "
            f"{module!r}). Set {CLIENT_PREFIX}sasl.username and {CLIENT_PREFIX}sasl.password "
            f"(or librdkafka's {CLIENT_PREFIX}sasl.oauthbearer.* settings) instead"
        )
    unquoted = {k: re.sub(r"\\(.)", r"\1", v) for k, v in fields.items()}
    return {"sasl.username": unquoted["username"], "sasl.password": unquoted["password"]}


def remember_secrets(settings: KafkaSinkSettings, options: Mapping[str, str]) -> None:
    """Keep the sink's secret producer settings in this (the driver's) process, where the
    coordinator publishes; they are never written under the snapshot path."""
    secrets = secrets_of(options)
    if secrets:
        _SECRETS[(to_local_or_uri(settings.snapshot_path), settings.sink_id)] = secrets


def redact(text: str, settings: KafkaSinkSettings | None = None) -> str:
    """``text`` with every known secret value replaced by ``***``."""
    values = [v for s in _SECRETS.values() for v in s.values()]
    if settings is not None:
        values += [v for k, v in settings.client if is_secret(k)]
    for value in sorted((v for v in values if v), key=len, reverse=True):
        text = text.replace(value, "***")
    return text


def parse(options: Mapping[str, str]) -> KafkaSinkSettings:
    """Parse the sink's options (case-insensitive names, as PySpark passes them).

    Raises
    ------
    ConfigError
        For an unknown option (with a suggestion), a producer setting the sink sets
        itself, no ``kafka.bootstrap.servers``, no snapshot path, no ``sinkId`` or
        ``progressTopic`` without a ``topic`` option, a bad sink id.
    """
    by_lower = {name.lower(): key for name, key in KAFKA_SINK_OPTIONS.items()}
    values: dict[str, Any] = {}
    client: dict[str, str] = {}
    session: dict[str, str] = {}
    problems = []
    for name, raw in options.items():
        lower = name.lower()
        if lower == SESSION_CONF_OPTION:
            session = json.loads(raw or "{}")
        elif lower in SPARK_OPTIONS:
            continue
        elif lower.startswith(CLIENT_PREFIX):
            setting = name[len(CLIENT_PREFIX) :]
            if setting.lower() in OWN_SETTINGS:
                problems.append(
                    f"barriered-kafka sink option {name!r} is set by the sink itself "
                    "(transactions, idempotence, acks=all, bytes as they are); drop it"
                )
            elif not is_secret(setting):
                client[setting] = str(raw)
        elif lower in by_lower:
            key = by_lower[lower]
            values[key.field] = key.parse(raw, key.where)
        else:
            match = closest(name, KAFKA_SINK_OPTIONS)
            hint = "" if match is None else f" (did you mean {match!r}?)"
            problems.append(f"unknown barriered-kafka sink option {name!r}{hint}")
    if problems:
        named = ", ".join(k.name for k in KAFKA_SINK_OPTIONS.values() if k is not PRODUCER)
        raise ConfigError(
            "; ".join(problems) + f". Options: {named} and {CLIENT_PREFIX}* (producer settings)"
        )
    if not client.get("bootstrap.servers"):
        raise ConfigError(
            "the barriered-kafka sink needs the option kafka.bootstrap.servers (the "
            "brokers to publish to, e.g. 'host1:9092,host2:9092')"
        )
    if values.get(SNAPSHOT_PATH.field) is None and session.get(SNAPSHOT_PATH.key):
        values[SNAPSHOT_PATH.field] = session[SNAPSHOT_PATH.key]
    if not values.get(SNAPSHOT_PATH.field):
        raise ConfigError(
            f"the barriered-kafka sink needs the option {SNAPSHOT_PATH.name}: the snapshot "
            f"path of the query's barriered source (or the session key {SNAPSHOT_PATH.key}, "
            "with barriered.install(spark))"
        )
    topic = values.get(TOPIC.field) or None
    for key in (SINK_ID, PROGRESS_TOPIC):
        if not (values.get(key.field) or topic):
            raise ConfigError(
                f"the barriered-kafka sink without the option {TOPIC.name!r} (each row's "
                f"topic column names its topic) needs the option {key.name!r}"
            )
    sink_id = str(values.get("sink_id") or topic)
    if not sink_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ConfigError(
            f"barriered-kafka sink id {sink_id!r} ({SINK_ID.where}, default the topic) may "
            "hold only letters, digits, '-', '_' and '.'; set sinkId"
        )
    return KafkaSinkSettings(
        snapshot_path=to_local_or_uri(str(values["snapshot_path"])),
        sink_id=sink_id,
        topic=topic,
        progress_topic=str(values.get("progress_topic") or topic),
        client=tuple(sorted(client.items())),
    )
