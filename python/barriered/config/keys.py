"""Every ``spark.sql.streaming.barriered.*`` session key, declared once.

Like Spark's ``SQLConf``/``ConfigBuilder``, each key is declared exactly once as a
:class:`~barriered.config.declaration.ConfigKey`; a per-source ``.option()`` of the same
name overrides it. :class:`~barriered.config.conf.BarrieredConf` (the parsed values), the
coordinator's :class:`~barriered.coordinator.settings.CoordinatorSettings`, the demo and
``docs/configuration.md`` (``python -m barriered.config_doc``) read these declarations.

This module does not import PySpark: the Spark adapter passes
``{k: v for k, v in spark.conf.getAll.items() if k.startswith(PREFIX)}``.
"""

from __future__ import annotations

from barriered.config.declaration import PREFIX, ConfigKey
from barriered.errors import ConfigError
from barriered.spelling import closest

#: Every declared key by short name (filled by the declarations below).
KEYS_BY_NAME: dict[str, ConfigKey] = {}


def _declare(config_key: ConfigKey) -> ConfigKey:
    if config_key.name in KEYS_BY_NAME:
        raise ValueError(f"config key {config_key.name} declared twice")
    if not config_key.field or config_key.owner:
        raise ValueError(f"session key {config_key.name} needs a field and no owner")
    KEYS_BY_NAME[config_key.name] = config_key
    return config_key


CHECKPOINT_INTERVAL = _declare(
    ConfigKey(
        "checkpointInterval",
        "duration",
        "10s",
        "How often the coordinator triggers a periodic checkpoint, measured between "
        "triggers. A checkpoint is cut at a micro-batch boundary, so the effective "
        "interval is never shorter than one micro-batch.",
        field="checkpoint_interval_ms",
        min_value=10,
    )
)
CHECKPOINT_TIMEOUT = _declare(
    ConfigKey(
        "checkpointTimeout",
        "duration",
        "10min",
        "A checkpoint that is not completed (every key group and in-flight writer "
        "acknowledged, one Delta commit) this long after its trigger is aborted, with what "
        "it waited for in `_checkpoints.failure_reason`, and counts as a failed "
        "checkpoint. An `availableNow` run waits at most this long for its last "
        "checkpoint before it ends, and fails naming the reason when it did not complete.",
        field="checkpoint_timeout_ms",
        min_value=10,
    )
)
MIN_PAUSE_BETWEEN_CHECKPOINTS = _declare(
    ConfigKey(
        "minPauseBetweenCheckpoints",
        "duration",
        "0s",
        "The least time between the end of one checkpoint and the trigger of the next, "
        "so that a slow checkpoint cannot make checkpoints back to back. A value above "
        "0s implies at most one checkpoint in progress, as in Flink.",
        field="min_pause_ms",
        min_value=0,
    )
)
MAX_CONCURRENT_CHECKPOINTS = _declare(
    ConfigKey(
        "maxConcurrentCheckpoints",
        "int",
        "1",
        "How many checkpoints may be in progress (triggered, neither completed nor "
        "aborted) at the same time; a trigger that falls due at the limit waits.",
        field="max_concurrent_checkpoints",
        min_value=1,
    )
)
TOLERABLE_CHECKPOINT_FAILURES = _declare(
    ConfigKey(
        "tolerableCheckpointFailures",
        "int",
        "3",
        "How many consecutive checkpoint failures (expired, or a write or commit error) "
        "are tolerated; one more fails the query with CheckpointFailureLimitExceeded. "
        "0 fails the query on the first failure.",
        field="tolerable_checkpoint_failures",
        min_value=0,
    )
)
MODE = _declare(
    ConfigKey(
        "mode",
        "enum",
        "exactlyOnce",
        "exactlyOnce aligns barriers (or captures in-flight records) so that after a "
        "restore every record affects the keyed state exactly once; atLeastOnce never "
        "blocks a channel nor captures in-flight records, so a restore may apply "
        "records again.",
        field="exactly_once",
        choices=("exactlyOnce", "atLeastOnce"),
    )
)
UNALIGNED_ENABLED = _declare(
    ConfigKey(
        "unaligned.enabled",
        "bool",
        "false",
        "Allow unaligned checkpoints: the barrier overtakes each channel's backlog, "
        "which is saved with the snapshot as in-flight records, so no channel is "
        "blocked. Needs mode=exactlyOnce; savepoints are always aligned.",
        field="unaligned_enabled",
    )
)

UNALIGNED_ADAPTIVE = _declare(
    ConfigKey(
        "unaligned.adaptive",
        "bool",
        "true",
        "With unaligned checkpoints enabled: start a checkpoint unaligned at once when "
        "the measured backlog (or recent alignments) predicts that aligning would take "
        "alignedCheckpointTimeout or longer. false: always start aligned and switch at "
        "the timeout, as Flink does.",
        field="unaligned_adaptive",
    )
)
ALIGNED_CHECKPOINT_TIMEOUT = _declare(
    ConfigKey(
        "alignedCheckpointTimeout",
        "duration",
        "0s",
        "With unaligned.enabled, how long a checkpoint may stay aligned before it "
        "switches to unaligned (Flink's alignedCheckpointTimeout); 0s starts every "
        "checkpoint unaligned. Ignored when unaligned.enabled is false.",
        field="aligned_checkpoint_timeout_ms",
        min_value=0,
    )
)
MAX_PARALLELISM = _declare(
    ConfigKey(
        "maxParallelism",
        "int",
        "128",
        "The number of key groups, pmod(hash(key), maxParallelism): the most partitions "
        "that can own keyed state. Fixed for the life of the snapshot path; "
        "barriered.keyed() takes the source's value from the stream.",
        field="max_parallelism",
        min_value=1,
        max_value=1 << 15,
        restore_may_change=False,
    )
)
SNAPSHOT_PATH = _declare(
    ConfigKey(
        "snapshotPath",
        "path",
        None,
        "Directory (local path or URI such as s3://, abfss://, dbfs:/) of the Delta "
        "tables holding the checkpoints, keyed state and in-flight records of one "
        "query; required by the barriered source.",
        field="snapshot_path",
    )
)
SNAPSHOT_STORAGE_OPTIONS = _declare(
    ConfigKey(
        "snapshotStorageOptions",
        "json",
        "{}",
        "Settings of the object store of snapshotPath (a JSON object of strings, in "
        "delta-rs's names: AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, "
        "AWS_SECRET_ACCESS_KEY, AWS_ALLOW_HTTP, AZURE_STORAGE_ACCOUNT_KEY, ...), for every "
        "path in that bucket or container: delta-rs, pyarrow's filesystems on the driver "
        "and the executors, and the JVM's Hadoop configuration (fs.s3a.*). Secrets are "
        "written nowhere (config.json records them redacted); see statestore/README.md, "
        "'Object stores'.",
        field="snapshot_storage_options",
    )
)

RETAINED_CHECKPOINTS = _declare(
    ConfigKey(
        "retainedCheckpoints",
        "int",
        "3",
        "How many completed checkpoints are kept for restore; older ones are removed "
        "with the files that no retained checkpoint references. Savepoints are never "
        "removed.",
        field="retained_checkpoints",
        min_value=1,
    )
)
RETENTION_MIN_AGE = _declare(
    ConfigKey(
        "retention.minAge",
        "duration",
        "10min",
        "Grace period of retention: a data file no retained checkpoint reads any more is "
        "deleted only this long after it became unread, so a reader that loaded an older "
        "table version a moment ago can still read its files. Likewise the Delta log "
        "before a cut goes only once the Delta checkpoint at the cut is this old.",
        field="retention_min_age_ms",
        min_value=0,
    )
)
RETENTION_HISTORY_SIZE = _declare(
    ConfigKey(
        "retention.historySize",
        "int",
        "1000",
        "How many rows the _checkpoints table keeps: the newest ones, plus those of every "
        "retained checkpoint; older rows go when the table is compacted.",
        field="retention_history_size",
        min_value=1,
    )
)
RETENTION_MAINTENANCE_INTERVAL = _declare(
    ConfigKey(
        "retention.maintenanceInterval",
        "int",
        "10",
        "Completed checkpoints between two maintenance runs of the snapshot path: "
        "_checkpoints compacted into one file, the Delta logs of every table cut at the "
        "oldest version a retained checkpoint reads, stray acknowledgements removed.",
        field="retention_maintenance_interval",
        min_value=1,
    )
)
INFLIGHT_CAPTURE = _declare(
    ConfigKey(
        "inflight.capture",
        "enum",
        "value",
        "How an unaligned checkpoint saves in-flight records: value copies them into "
        "the inflight Delta table; reference saves only each channel's position range "
        "and re-reads the records from the upstream on restore, so the upstream must "
        "keep them until the checkpoint is subsumed.",
        field="inflight_capture",
        choices=("value", "reference"),
    )
)
BUFFER_PER_CHANNEL = _declare(
    ConfigKey(
        "bufferPerChannel",
        "int",
        "10000",
        "Read-ahead per channel, in rows: how far the source may read past what it has "
        "delivered on a channel. It bounds B_n(c) - D(c), hence one channel's in-flight "
        "records in an unaligned checkpoint and its alignment backlog.",
        field="buffer_per_channel",
        min_value=1,
    )
)
COORDINATOR_TIMEOUT = _declare(
    ConfigKey(
        "coordinatorTimeout",
        "duration",
        "2min",
        "How long the source runs micro-batches (at least 3) without a sign of life from "
        "the checkpoint coordinator (the listener barriered.install registered) before it "
        "fails the query with CoordinatorLostError instead of running on without "
        "checkpoints, e.g. after a Spark Connect client dropped its listeners.",
        field="coordinator_timeout_ms",
        min_value=100,
    )
)
LEASE_TIMEOUT = _declare(
    ConfigKey(
        "leaseTimeout",
        "duration",
        "2min",
        "How long a run owns its snapshot path without renewing its lease (the source "
        "renews it while planning batches, the coordinator after each progress event). "
        "A second query on the path is refused while the owner's lease holds; after a "
        "crash on another host the path is free once the lease expired (on the same "
        "host, as soon as the owner's process is gone). restoreFrom takes over at once.",
        field="lease_timeout_ms",
        min_value=100,
    )
)
PROVIDER_CHANGE_DETECTION = _declare(
    ConfigKey(
        "provider.changeDetection",
        "enum",
        "writes",
        "How the JVM state store provider finds a store partition's key groups changed "
        "since the base checkpoint: writes records the key group of every put and remove "
        "(a cut reads the store once, to write them); digest compares a digest of every "
        "key group's rows with the base's (a cut reads the whole store twice). Either "
        "writes the whole partition when it lacks the base's record (a new executor).",
        field="provider_change_detection",
        choices=("writes", "digest"),
    )
)

KEYED_WRITE_BUFFER_SIZE = _declare(
    ConfigKey(
        "keyed.writeBufferSize",
        "bytes",
        "32m",
        "How much of barriered.keyed()'s changed state one Spark partition buffers in "
        "Spark's state store between two files: the buffer is read and written at each "
        "micro-batch, so a larger one costs every batch more; beyond it the changes are "
        "spilled to a file of their own (merged into the next checkpoint's file), like "
        "Flink's RocksDB write buffer.",
        field="keyed_write_buffer_size",
        min_value=1 << 10,
        max_value=1 << 30,
    )
)
KEYED_MAX_RUNS = _declare(
    ConfigKey(
        "keyed.maxRuns",
        "int",
        "8",
        "How many state files of one Spark partition barriered.keyed() reads a key "
        "through (one per checkpoint that changed it) before a checkpoint merges the "
        "newest of them into its own (compaction): down to half as many, and an older, "
        "larger file only once the changes over it reach a quarter of its rows (then the "
        "partition's whole state is one file). More files make checkpoints cheaper and "
        "reads of keys not in the newest files dearer.",
        field="keyed_max_runs",
        min_value=1,
        max_value=64,
    )
)
KEYED_LOCAL_CACHE_SIZE = _declare(
    ConfigKey(
        "keyed.localCacheSize",
        "bytes",
        "10g",
        "Local disk each machine may use to cache barriered.keyed()'s state files, "
        "indexed by key (the files on the snapshot path are the state; the cache serves "
        "reads of the keys a batch touches). The least recently used files go beyond it; "
        "the state itself may be larger than memory and than this cache.",
        field="keyed_local_cache_size",
        min_value=1 << 20,
    )
)
KEYED_LOCAL_CACHE_DIR = _declare(
    ConfigKey(
        "keyed.localCacheDir",
        "path",
        None,
        "The folder of the cache of keyed.localCacheSize on each machine.",
        field="keyed_local_cache_dir",
        default_doc="under SPARK_LOCAL_DIRS, else the temporary folder",
    )
)

METRICS_PROMETHEUS_PORT = _declare(
    ConfigKey(
        "metrics.prometheusPort",
        "int",
        None,
        "The port of the driver's monitoring endpoint: Prometheus metrics of every "
        "barriered query of the session at /metrics and the live checkpoint page at / "
        "(docs/monitoring.md), served from the first finished checkpoint on. Unset: no "
        "endpoint; 0: a free port, logged.",
        field="metrics_prometheus_port",
        min_value=0,
        max_value=65535,
    )
)
METRICS_HOST = _declare(
    ConfigKey(
        "metrics.host",
        "str",
        "0.0.0.0",
        "The address the endpoint of metrics.prometheusPort listens on (0.0.0.0: every "
        "interface, so that Prometheus can scrape the driver from another machine).",
        field="metrics_host",
    )
)
METRICS_OPEN_TELEMETRY = _declare(
    ConfigKey(
        "metrics.openTelemetry",
        "bool",
        "false",
        "Report every finished checkpoint as an OpenTelemetry span with a child span per "
        "phase, and the checkpoint metrics through the OpenTelemetry metrics API, to the "
        "providers the application configured (needs opentelemetry-api: pip install "
        "spark-barriered[otel]).",
        field="metrics_open_telemetry",
    )
)
AUTOSCALE_ENABLED = _declare(
    ConfigKey(
        "autoscale.enabled",
        "bool",
        "false",
        "Let a query started with barriered.managed(...) rescale itself: up when the "
        "source's backlog stays above autoscale.scaleUpBacklog, down when it stays below "
        "autoscale.scaleDownBacklog, for autoscale.checkpoints completed checkpoints in a "
        "row (python/barriered/autoscale.py). Read from the snapshot path's configuration.",
        field="autoscale_enabled",
    )
)
AUTOSCALE_MIN_PARTITIONS = _declare(
    ConfigKey(
        "autoscale.minPartitions",
        "int",
        "1",
        "The fewest shuffle partitions autoscaling goes down to.",
        field="autoscale_min_partitions",
        min_value=1,
        max_value=1 << 15,
    )
)
AUTOSCALE_MAX_PARTITIONS = _declare(
    ConfigKey(
        "autoscale.maxPartitions",
        "int",
        "0",
        "The most shuffle partitions autoscaling goes up to; 0: maxParallelism.",
        field="autoscale_max_partitions",
        min_value=0,
        max_value=1 << 15,
    )
)
AUTOSCALE_SCALE_UP_BACKLOG = _declare(
    ConfigKey(
        "autoscale.scaleUpBacklog",
        "int",
        "100000",
        "Records the source holds and has not delivered yet (summed over its channels, "
        "measured at each completed checkpoint) above which autoscaling doubles the "
        "partitions.",
        field="autoscale_scale_up_backlog",
        min_value=1,
    )
)
AUTOSCALE_SCALE_DOWN_BACKLOG = _declare(
    ConfigKey(
        "autoscale.scaleDownBacklog",
        "int",
        "1000",
        "The backlog below which autoscaling halves the partitions.",
        field="autoscale_scale_down_backlog",
        min_value=0,
    )
)
AUTOSCALE_CHECKPOINTS = _declare(
    ConfigKey(
        "autoscale.checkpoints",
        "int",
        "3",
        "How many completed checkpoints in a row the backlog must stay above (or below) "
        "its bound before autoscaling rescales.",
        field="autoscale_checkpoints",
        min_value=1,
    )
)
AUTOSCALE_COOL_DOWN = _declare(
    ConfigKey(
        "autoscale.coolDown",
        "duration",
        "5min",
        "The least time between the end of one rescale and the next one autoscaling starts.",
        field="autoscale_cool_down_ms",
        min_value=0,
    )
)


#: Every declared key, in declaration (and documentation) order.
KEYS: tuple[ConfigKey, ...] = tuple(KEYS_BY_NAME.values())
KEYS_BY_LOWER: dict[str, ConfigKey] = {k.name.lower(): k for k in KEYS}
KEYS_BY_FIELD: dict[str, ConfigKey] = {k.field: k for k in KEYS}


def key(name: str) -> ConfigKey:
    """Look up a declared key by short name, full key or :class:`BarrieredConf` field.

    Parameters
    ----------
    name : str
        ``"checkpointInterval"``, ``"spark.sql.streaming.barriered.checkpointInterval"``
        or ``"checkpoint_interval_ms"``.

    Returns
    -------
    ConfigKey
        The declaration.

    Raises
    ------
    ConfigError
        If no key has that name (with a "did you mean" suggestion).
    """
    short = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    found = KEYS_BY_NAME.get(short) or KEYS_BY_FIELD.get(short)
    if found is None:
        raise ConfigError(f"unknown configuration key {name!r}{suggestion(short)}")
    return found


def suggestion(short_name: str, *, full: bool = True) -> str:
    """``"; did you mean ...?"`` for a misspelt key, else the list of known keys."""
    match = closest(short_name, (k.name for k in KEYS))
    if match is None:
        return f"; known keys: {', '.join(k.name for k in KEYS)}"
    return f"; did you mean {(PREFIX + match) if full else match!r}?"
