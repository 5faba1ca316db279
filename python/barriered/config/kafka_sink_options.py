"""The options of the ``barriered-kafka`` sink, declared once (parsed by
:mod:`barriered.sink.kafka.options`)."""

from __future__ import annotations

import dataclasses

from barriered.config import sink_options as delta_options
from barriered.config.declaration import ConfigKey
from barriered.config.keys import SNAPSHOT_PATH
from barriered.config.source_options import KAFKA_CLIENT

_OWNER = "barriered-kafka sink option"
TOPIC = ConfigKey(
    "topic",
    "str",
    None,
    "The output topic of every row (it overrides a topic column). Without it, each "
    "row's topic column names its topic.",
    field="topic",
    owner=_OWNER,
)
#: The session key's declaration, as an option of the sink (its default).
SNAPSHOT_PATH_OPTION = dataclasses.replace(
    SNAPSHOT_PATH,
    doc="The snapshot path of the barriered source of the same query (default: the "
    f"session key {SNAPSHOT_PATH.key}); its coordinator publishes the staged rows with "
    "each completed checkpoint.",
    owner=_OWNER,
)
SINK_ID = dataclasses.replace(
    delta_options.SINK_ID,
    doc="Name of the sink under the snapshot path (_sink/<sinkId>/), of its Kafka "
    "transactional.id (barriered.sink.<sinkId>) and consumer group; default: the topic "
    "option. Give every query writing Kafka its own.",
    owner=_OWNER,
)
PROGRESS_TOPIC = ConfigKey(
    "progressTopic",
    "str",
    None,
    "The topic on whose partition 0 the sink's consumer group records, in each "
    "publishing transaction, the checkpoint published (default: the topic option; "
    "required with a topic column).",
    field="progress_topic",
    owner=_OWNER,
)
#: The Kafka upstream's client settings family, as the sink's producer settings.
PRODUCER = dataclasses.replace(
    KAFKA_CLIENT,
    doc="librdkafka producer settings: `kafka.bootstrap.servers` (required: the brokers), "
    "`kafka.security.protocol`, `kafka.sasl.*`, `kafka.transaction.timeout.ms`, ...; "
    "transactions, idempotence and acks are the sink's own; a Java client's "
    "`kafka.sasl.jaas.config` (PLAIN or SCRAM login module) is taken as `sasl.username` "
    "and `sasl.password`. Secrets are never written.",
    owner=_OWNER,
)
CLIENT_PREFIX = PRODUCER.name
#: The options of ``writeStream.format("barriered-kafka")``, by name.
KAFKA_SINK_OPTIONS: dict[str, ConfigKey] = {
    k.name: k for k in (PRODUCER, TOPIC, SNAPSHOT_PATH_OPTION, SINK_ID, PROGRESS_TOPIC)
}
