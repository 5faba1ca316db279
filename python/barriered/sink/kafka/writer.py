"""``writeStream.format("barriered-kafka")``: the Kafka sink's Python data source.

``write`` runs on executors: it turns the task's rows into Kafka records (the columns
``key`` and ``value``, string or binary; ``topic``, ``partition``, ``headers`` as Spark's
Kafka sink has them) and stages them as one Parquet file under
``<snapshotPath>/_sink/<sink>/data/``. ``commit`` runs on the driver once every task of
the batch succeeded: it records the batch as staged (:mod:`barriered.sink.staging`).
Nothing reaches Kafka until the coordinator publishes the checkpoint covering the batch
(:mod:`barriered.sink.kafka.publisher`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from barriered.config.kafka_sink_options import PROGRESS_TOPIC, TOPIC
from barriered.control.columns import BARRIER
from barriered.errors import ConfigError, SinkError
from barriered.sink.kafka import options
from barriered.sink.kafka.options import KafkaSinkSettings, redact
from barriered.sink.kafka.publisher import check_owner, save_settings
from barriered.sink.owner import lineage
from barriered.sink.staging import StagedBatch, stage
from barriered.sink.writer import StagedFiles, run_epoch
from barriered.statestore.acks import write_data_file
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.ownership import current_owner

log = logging.getLogger(__name__)

FILE_PREFIX = "barriered-kafka"
HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
#: The staged records' columns.
RECORDS = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("headers", pa.list_(HEADER)),
    ]
)
_HEADERS_TYPE = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))
#: Column -> (the Spark types it may have, how the types are described).
COLUMNS: dict[str, tuple[tuple[DataType, ...], str]] = {
    "key": ((StringType(), BinaryType()), "string or binary"),
    "value": ((StringType(), BinaryType()), "string or binary"),
    "topic": ((StringType(),), "string"),
    "partition": ((IntegerType(),), "int"),
    "headers": ((_HEADERS_TYPE,), "array<struct<key: string, value: binary>>"),
}
CHECK_TIMEOUT_S = 15.0


def check_columns(settings: KafkaSinkSettings, schema: StructType) -> None:
    """Refuse an output without ``value``, without a topic, or with a Kafka column of
    another type.

    Raises
    ------
    ConfigError
        Naming the column (or the option ``topic``) and the output's columns.
    """
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise ConfigError(
            "the barriered-kafka sink needs a 'value' column (string or binary) in the "
            f"query's output (its columns: {list(types)}). Nothing was written"
        )
    if settings.topic is None and "topic" not in types:
        raise ConfigError(
            "the barriered-kafka sink needs a topic: set the option 'topic', or give the "
            f"query's output a 'topic' column (its columns: {list(types)}). Nothing was "
            "written"
        )
    for name, (allowed, described) in COLUMNS.items():
        if name in types and types[name] not in allowed and not _headers_like(name, types):
            raise ConfigError(
                f"the barriered-kafka sink's column {name!r} must be {described}, not "
                f"{types[name].simpleString()}. Nothing was written"
            )


def _headers_like(name: str, types: Mapping[str, DataType]) -> bool:
    """Whether a ``headers`` column is an array of (key string, value binary) structs
    (whatever the nullability)."""
    t = types[name]
    if name != "headers" or not isinstance(t, ArrayType):
        return False
    e = t.elementType
    return isinstance(e, StructType) and [(f.name, f.dataType) for f in e.fields] == [
        ("key", StringType()),
        ("value", BinaryType()),
    ]


def check_topics(settings: KafkaSinkSettings) -> None:
    """Refuse topics the cluster does not have (the sink never creates one).

    Raises
    ------
    SinkError
        Naming the missing topic and the brokers, or the cluster's failure to answer.
    """
    from confluent_kafka.admin import AdminClient

    wanted = sorted({t for t in (settings.topic, settings.progress_topic) if t})
    servers = settings.producer_config().get("bootstrap.servers")
    try:
        config: dict[str, Any] = settings.producer_config()
        admin = AdminClient(config)
        metadata = admin.list_topics(timeout=CHECK_TIMEOUT_S)
    except Exception as exc:
        raise SinkError(
            redact(
                f"barriered-kafka sink {settings.sink_id!r}: the brokers {servers!r} did "
                f"not answer ({exc}). Nothing was written",
                settings,
            )
        ) from None
    for topic in wanted:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            option = TOPIC.name if topic == settings.topic else PROGRESS_TOPIC.name
            raise SinkError(
                f"barriered-kafka sink {settings.sink_id!r}: the topic {topic!r} (option "
                f"{option!r}) does not exist on {servers!r}; the sink never creates topics. "
                "Nothing was written. Create it first"
            )


def check_transactions(settings: KafkaSinkSettings) -> None:
    """Refuse a ``kafka.transaction.timeout.ms`` above the brokers'
    ``transaction.max.timeout.ms``: Kafka would refuse every transaction of the sink
    (``INVALID_TRANSACTION_TIMEOUT`` at ``init_transactions``), so no checkpoint's output
    could be published. A cluster that does not let this client read its brokers'
    configuration is not checked.

    Raises
    ------
    ConfigError
        Naming the option, its value, the brokers' maximum and what to do.
    """
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    config: dict[str, Any] = settings.producer_config()
    asked = config.get("transaction.timeout.ms")
    if asked is None:
        return
    servers = config.get("bootstrap.servers")
    try:
        admin = AdminClient(config)
        brokers = sorted(admin.list_topics(timeout=CHECK_TIMEOUT_S).brokers)
        resource = ConfigResource("broker", str(brokers[0]))
        (future,) = admin.describe_configs([resource]).values()
        entry = future.result(timeout=CHECK_TIMEOUT_S).get("transaction.max.timeout.ms")
        maximum = int(entry.value)
    except Exception as exc:  # no DescribeConfigs permission, an old broker: not checked
        log.info("sink %s: the brokers' transaction.max.timeout.ms is not known (%s)",
                 settings.sink_id, type(exc).__name__)  # fmt: skip
        return
    if int(asked) > maximum:
        raise ConfigError(
            f"barriered-kafka sink {settings.sink_id!r}: option 'kafka.transaction.timeout.ms'"
            f"={asked} is above the brokers' transaction.max.timeout.ms={maximum} at "
            f"{servers!r}: Kafka refuses the sink's transactions (INVALID_TRANSACTION_TIMEOUT), "
            f"so no checkpoint's output could be published. Set it to at most {maximum}, or "
            "raise transaction.max.timeout.ms on the brokers. Nothing was written"
        )


def before_start(sink_options: Mapping[str, str], schema: StructType) -> None:
    """The checks ``start()`` runs on a classic session before the query starts (their
    refusal writes nothing); keeps the options' secrets in this driver process.

    Raises
    ------
    ConfigError
        A bad option, no ``value`` column, no topic, a Kafka column of another type.
    SinkError
        A topic the cluster does not have; the sink's transactional id and group belong
        to the query of another snapshot path (:func:`publisher.check_owner`).
    ConfigError
        Also a ``kafka.transaction.timeout.ms`` the brokers refuse
        (:func:`check_transactions`).
    """
    settings = remember(sink_options)
    check_columns(settings, schema)
    check_topics(settings)
    check_transactions(settings)
    check_owner(SnapshotLayout.configured(settings.snapshot_path), settings)


def remember(sink_options: Mapping[str, str]) -> KafkaSinkSettings:
    """Parse the sink's options and keep their secrets in this process (the coordinator's,
    which publishes: the driver of a classic session, the client of a Spark Connect one;
    never written anywhere); return the settings.

    Raises
    ------
    ConfigError
        A bad option.
    """
    settings = options.parse(sink_options)
    options.remember_secrets(settings, sink_options)
    return settings


def records(table: pa.Table, settings: KafkaSinkSettings) -> pa.Table:
    """The task's rows as the staged records (:data:`RECORDS`), marker rows dropped.

    Raises
    ------
    ConfigError
        A row without a topic (no option ``topic`` and a null in the topic column).
    """
    if BARRIER in table.column_names:
        table = table.filter(pc.is_null(table[BARRIER]))
    n = table.num_rows
    columns = []
    for field in RECORDS:
        given = field.name in table.column_names and not (field.name == "topic" and settings.topic)
        column = table[field.name].cast(field.type) if given else pa.nulls(n, field.type)
        columns.append(column)
    out = pa.Table.from_arrays(columns, schema=RECORDS)
    if settings.topic is None and out["topic"].null_count:
        raise ConfigError(
            f"barriered-kafka sink {settings.sink_id!r}: {out['topic'].null_count} row(s) "
            "have a null topic and the option 'topic' is not set"
        )
    return out


class BarrieredKafkaWriter(DataSourceStreamArrowWriter):
    """Stages each micro-batch's records for the checkpoint that will publish them."""

    def __init__(self, settings: KafkaSinkSettings) -> None:
        self.settings = settings
        self._saved = False

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFiles:
        """Stage this task's records as one Parquet file (executor side)."""
        batches = list(iterator)
        if not batches:
            return StagedFiles([])
        table = records(pa.Table.from_batches(batches), self.settings)
        if table.num_rows == 0:
            return StagedFiles([])
        return StagedFiles([write_data_file(self.settings.path, {}, FILE_PREFIX, table)])

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Record the batch as staged (driver side); nothing is published."""
        layout = SnapshotLayout.configured(self.settings.snapshot_path)
        files = tuple(f for m in messages if isinstance(m, StagedFiles) for f in m.files)
        epoch = run_epoch(layout, self.settings.sink_id, batchId, BarrieredKafkaSink.name())
        if not self._saved:
            save_settings(layout, self.settings)
            self._saved = True
        now = int(time.time() * 1000)
        stage(layout, StagedBatch(self.settings, epoch, batchId, RECORDS, files, now))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A failed batch stages nothing; its files are left to retention."""
        log.warning("sink %s: batch %d aborted", self.settings.sink_id, batchId)


class BarrieredKafkaSink(DataSource):
    """``writeStream.format("barriered-kafka")``: exactly-once Kafka output.

    Options (declared in :mod:`barriered.sink.kafka.options`): ``topic``,
    ``snapshotPath`` (default: the session key), ``sinkId``, ``progressTopic`` and
    ``kafka.*`` producer settings (``kafka.bootstrap.servers`` required). Columns:
    ``value`` (required), ``key``, ``topic``, ``partition``, ``headers``. The stream
    must come from a barriered source; the records of the batches up to a checkpoint's
    cut are published in one Kafka transaction when the checkpoint completes.
    """

    @classmethod
    def name(cls) -> str:
        return "barriered-kafka"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Check the options, columns, topics and that the sink is this query's (a
        restore into another snapshot path is refused: :func:`publisher.check_owner`);
        return the writer."""
        if overwrite:
            raise ConfigError(
                "the barriered-kafka sink does not support outputMode 'complete'; use "
                "append or update"
            )
        settings = remember(dict(self.options))  # this process's checks need the secrets
        check_columns(settings, schema)
        check_topics(settings)
        check_transactions(settings)
        layout = SnapshotLayout.configured(settings.snapshot_path)
        owner = current_owner(layout)
        if owner is None:
            raise SinkError(
                f"barriered-kafka sink {settings.sink_id!r}: no barriered source ever read "
                f"with snapshot path {layout.root!r}. The sink publishes the output of a "
                "stream read with spark.readStream.format('barriered') with the same "
                "snapshotPath. Nothing was written"
            )
        restored = lineage(layout.root, {"from": owner.restore_from})
        check_owner(layout, settings, None if restored is None else restored.origin)
        return BarrieredKafkaWriter(settings)

    def schema(self) -> Any:
        raise ConfigError("the barriered-kafka sink is write-only: read its topic with Kafka")
