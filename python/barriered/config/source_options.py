"""The declarations of the "barriered" source's own options (``restoreFrom``,
``maxRowsPerChannel``, ...) and of the hidden option that carries the session keys to it.

Parsed by :mod:`barriered.datasource.options`; declared here, with the session keys, so
every package that names one in a message (a restore refused, a sink, the coordinator)
names it through its declaration without importing the source.
"""

from __future__ import annotations

from barriered.config.declaration import ConfigKey

SESSION_CONF_OPTION = "barriered.sessionconf"
#: The one session key outside ``spark.sql.streaming.barriered.*`` the hidden option
#: carries: a restore needs the provider's session extension (:mod:`barriered.provider`).
SESSION_EXTENSIONS = "spark.sql.extensions"
_OWNER = "source option"

MAX_ROWS_PER_CHANNEL = ConfigKey(
    "maxRowsPerChannel",
    "int",
    None,
    "Admission control: the most rows one micro-batch takes from a channel. A channel "
    "whose upstream grows faster than this builds a backlog and lags; that is what makes "
    "alignment cost latency and what an unaligned checkpoint stores as in-flight records.",
    min_value=1,
    owner=_OWNER,
    default_doc="no limit",
)
ADMISSION_FACTORS = ConfigKey(
    "admissionFactors",
    "str",
    None,
    "Per-channel factor on `maxRowsPerChannel`, `CHANNEL:FACTOR[,...]`: `0:0.25` admits "
    "a quarter as many rows per batch from channel 0 (at least 1). For a channel whose "
    "records cost more downstream: a micro-batch waits for its slowest task, so such a "
    "channel admitted like the others slows every channel; admitted less, it lags and "
    "the others run ahead, as under backpressure in Flink. Needs `maxRowsPerChannel`.",
    owner=_OWNER,
)
ROWS_PER_PARTITION = ConfigKey(
    "rowsPerPartition",
    "int",
    "100000",
    "The largest range of one channel that one Spark task reads; a larger range is split "
    "over several tasks.",
    min_value=1,
    owner=_OWNER,
)
RESTORE_FROM = ConfigKey(
    "restoreFrom",
    "str",
    None,
    "Start from a snapshot: `latest` or a checkpoint id of this snapshot path, or a "
    "savepoint folder (restored into a new snapshot path), always with a new Spark "
    "`checkpointLocation` (one that already holds offsets is refused: Spark would resume "
    "from it and ignore `restoreFrom`) and any `spark.sql.shuffle.partitions` (see "
    "statestore/README.md, restore and rescale). It takes the snapshot path over, even "
    "from a running query, which is then fenced (one writer per snapshot path).",
    owner=_OWNER,
)
#: The Kafka clients' settings, shared by the ``kafka`` upstream and the
#: ``barriered-kafka`` sink.
KAFKA_CLIENT = ConfigKey(
    "kafka.",
    "prefix",
    None,
    "librdkafka client settings: `kafka.bootstrap.servers` (required: the brokers), "
    "`kafka.security.protocol`, `kafka.sasl.*`, `kafka.isolation.level`, ...",
    owner="upstream option",
)
