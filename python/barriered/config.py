"""Every ``spark.sql.streaming.barriered.*`` configuration key, declared once.

Like Spark's ``SQLConf``/``ConfigBuilder``, each key is declared exactly once as a
:class:`ConfigKey` (name, type, default, doc, bounds, whether it may change when a query
is restored and whether a per-source ``.option()`` may override it). Everything else is
derived from these declarations: parsing and validation (:func:`resolve`), the typed
:class:`BarrieredConf`, the restore check (:func:`check_restore_compatible`) and the
reference tables in ``docs/configuration.md`` (:mod:`barriered.config_doc`; regenerate
them with ``python -m barriered.config_doc``).

Values are strings, as in Spark's conf:

* durations: ``500ms``, ``10s``, ``1.5s``, ``2min``, ... (:mod:`barriered.durations`);
* booleans: ``true`` / ``false`` (any case);
* integers: decimal digits with an optional sign;
* enums: one of the choices, any case (the canonical spelling is kept).

This module does not import PySpark: the Spark adapter passes
``{k: v for k, v in spark.conf.getAll.items() if k.startswith(PREFIX)}``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from barriered.durations import DURATION_FORMS, duration_ms, format_duration
from barriered.errors import ConfigError
from barriered.statestore.fileio import folder_problem

__all__ = [
    "ALIGNED_CHECKPOINT_TIMEOUT",
    "BUFFER_PER_CHANNEL",
    "CHECKPOINT_INTERVAL",
    "CHECKPOINT_TIMEOUT",
    "COORDINATOR_TIMEOUT",
    "INFLIGHT_CAPTURE",
    "KAFKA_SINK_OPTIONS",
    "KEYS",
    "KEYS_BY_NAME",
    "LEASE_TIMEOUT",
    "MAX_CONCURRENT_CHECKPOINTS",
    "MAX_PARALLELISM",
    "MIN_PAUSE_BETWEEN_CHECKPOINTS",
    "MODE",
    "PREFIX",
    "PROVIDER_CHANGE_DETECTION",
    "RETAINED_CHECKPOINTS",
    "SINK_OPTIONS",
    "SNAPSHOT_PATH",
    "TOLERABLE_CHECKPOINT_FAILURES",
    "UNALIGNED_ENABLED",
    "BarrieredConf",
    "ConfigKey",
    "ConfigValue",
    "ValueType",
    "check_restore_compatible",
    "closest",
    "key",
    "resolve",
    "split_options",
]

#: Prefix of every session configuration key of spark-barriered.
PREFIX = "spark.sql.streaming.barriered."

ValueType = Literal["duration", "int", "bool", "enum", "str", "path", "json"]
"""The type of a configuration value (durations are parsed to milliseconds)."""

ConfigValue = int | bool | str | None
"""A parsed value: ``int`` (ints, durations in ms), ``bool``, ``str`` (enums, paths)."""

_INT_RE = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class ConfigKey:
    """The declaration of one ``spark.sql.streaming.barriered.*`` key.

    Parameters
    ----------
    name : str
        The key without :data:`PREFIX`, e.g. ``"checkpointInterval"``; also the name of
        the per-source option.
    type : {"duration", "int", "bool", "enum", "str", "path", "json"}
        How the string value is parsed (durations to milliseconds).
    default : str or None
        The default as a string, like Spark's ``createWithDefaultString``; ``None`` if
        the key has no default (the component that needs it says so).
    doc : str
        One or two sentences for the reference table.
    field : str
        The :class:`BarrieredConf` field that holds the parsed value.
    choices : tuple of str, default ()
        The canonical spellings of an ``enum``.
    min_value, max_value : int or None, default None
        Inclusive bounds of an ``int``, or of a ``duration`` in milliseconds.
    restore_may_change : bool, default True
        Whether a restore may use another value than the snapshot was taken with.
    """

    name: str
    type: ValueType
    default: str | None
    doc: str
    field: str
    choices: tuple[str, ...] = ()
    min_value: int | None = None
    max_value: int | None = None
    restore_may_change: bool = True

    def __post_init__(self) -> None:
        if self.type == "enum" and not self.choices:
            raise ValueError(f"enum key {self.name} declares no choices")
        if self.default is not None:
            self.parse(self.default)  # a declaration with a bad default is a bug

    @property
    def key(self) -> str:
        """The full session key, e.g. ``spark.sql.streaming.barriered.checkpointInterval``."""
        return PREFIX + self.name

    @property
    def default_value(self) -> ConfigValue:
        """The parsed default (``None`` if the key has no default)."""
        return None if self.default is None else self.parse(self.default)

    def accepted_forms(self) -> str:
        """Describe the values this key accepts, for error messages.

        Returns
        -------
        str
            E.g. ``"one of exactlyOnce, atLeastOnce (any case)"``.
        """
        if self.type == "duration":
            return DURATION_FORMS + self._range_text()
        if self.type == "int":
            return "an integer" + self._range_text()
        if self.type == "bool":
            return "true or false"
        if self.type == "enum":
            return f"one of {', '.join(self.choices)} (any case)"
        if self.type == "json":
            return 'a JSON object of strings, e.g. {"AWS_REGION": "eu-west-1"}'
        return "a non-empty path" if self.type == "path" else "a non-empty string"

    def _range_text(self) -> str:
        fmt = format_duration if self.type == "duration" else str
        lo, hi = self.min_value, self.max_value
        if lo is not None and hi is not None:
            return f", from {fmt(lo)} to {fmt(hi)}"
        if lo is not None:
            return f", at least {fmt(lo)}"
        if hi is not None:
            return f", at most {fmt(hi)}"
        return ""

    def parse(self, raw: object, origin: str | None = None) -> ConfigValue:
        """Parse and validate one value of this key.

        Parameters
        ----------
        raw : object
            The value, normally a string; ``bool`` and ``int`` are accepted too.
        origin : str, optional
            How the value was set, for the error message; the full key by default,
            e.g. ``"source option 'checkpointInterval'"``.

        Returns
        -------
        int, bool or str
            Milliseconds for durations, ``int``, ``bool``, the canonical enum spelling,
            or the stripped string/path.

        Raises
        ------
        ConfigError
            Naming ``origin``, the bad value and the accepted forms.
        """
        where = origin or self.key
        text = (str(raw).lower() if isinstance(raw, bool) else str(raw)).strip()

        def bad(reason: str) -> ConfigError:
            return ConfigError(
                f"{where}: invalid value {raw!r} ({reason}); expected {self.accepted_forms()}"
            )

        if self.type == "duration":
            try:
                ms = duration_ms(text)
            except ValueError as exc:
                raise bad(str(exc)) from None
            self._check_range(ms, raw, where)
            return ms
        if self.type == "int":
            if not _INT_RE.match(text):
                raise bad("not an integer")
            number = int(text)
            self._check_range(number, raw, where)
            return number
        if self.type == "bool":
            if text.lower() not in ("true", "false"):
                raise bad("not a boolean")
            return text.lower() == "true"
        if self.type == "enum":
            for choice in self.choices:
                if choice.lower() == text.lower():
                    return choice
            raise bad("not one of the choices")
        if self.type == "json":
            try:
                parsed = json.loads(text or "{}")
            except ValueError:
                raise bad("not JSON") from None
            if not isinstance(parsed, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()
            ):
                raise bad("not an object of string values")
            return json.dumps(parsed, sort_keys=True)
        if not text:
            raise bad("empty")
        return text

    def _check_range(self, value: int, raw: object, where: str) -> None:
        lo, hi = self.min_value, self.max_value
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ConfigError(
                f"{where}: value {raw!r} is out of range; expected {self.accepted_forms()}"
            )

    def format(self, value: ConfigValue) -> str:
        """Format a parsed value as a string that :meth:`parse` reads back.

        Parameters
        ----------
        value : int, bool, str or None
            A parsed value of this key.

        Returns
        -------
        str
            E.g. ``"10s"``, ``"true"``, ``"exactlyOnce"``; ``""`` for ``None``.
        """
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if self.type == "duration" and isinstance(value, int):
            return format_duration(value)
        return str(value)


#: Every declared key by short name (filled by the declarations below).
KEYS_BY_NAME: dict[str, ConfigKey] = {}


def _declare(config_key: ConfigKey) -> ConfigKey:
    if config_key.name in KEYS_BY_NAME:
        raise ValueError(f"config key {config_key.name} declared twice")
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
        "acknowledged, one Delta commit) this long after its trigger is aborted and "
        "counts as a failed checkpoint.",
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
        "Storage options (a JSON object of strings) passed to delta-rs for every Delta "
        "table under snapshotPath, e.g. credentials or the region of an object store; "
        "the data and handshake files use pyarrow's filesystem with its environment "
        "credentials.",
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

# --------------------------------------------------------------------------------------
# Options of the "barriered-delta" sink (options only: no session key, not in KEYS)
# --------------------------------------------------------------------------------------

#: The options of ``writeStream.format("barriered-delta")``, by short name. They are
#: parsed with :meth:`ConfigKey.parse` into :class:`barriered.sink.options.SinkSettings`
#: (``field``); the session's ``snapshotPath`` reaches the sink as it reaches the source.
SINK_OPTIONS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        ConfigKey(
            "path",
            "path",
            None,
            "The output Delta table (a folder, or a URI delta-rs and pyarrow understand); "
            "created on the first checkpoint that commits output. Also start(path).",
            field="path",
        ),
        ConfigKey(
            "snapshotPath",
            "path",
            None,
            "The snapshot path of the barriered source of the same query (default: the "
            "session key spark.sql.streaming.barriered.snapshotPath); its coordinator "
            "commits the staged output with each checkpoint.",
            field="snapshot_path",
        ),
        ConfigKey(
            "mode",
            "enum",
            "append",
            "append adds every output row; update merges each checkpoint's rows into the "
            "table by keyColumns (the last row of a key wins: running totals, upserts).",
            field="mode",
            choices=("append", "update"),
        ),
        ConfigKey(
            "keyColumns",
            "str",
            None,
            "Comma-separated key columns of mode update (required there, refused in append).",
            field="key_columns",
        ),
        ConfigKey(
            "partitionBy",
            "str",
            None,
            "Comma-separated partition columns of the output table (Hive-style folders).",
            field="partition_by",
        ),
        ConfigKey(
            "sinkId",
            "str",
            None,
            "Name of the sink under the snapshot path (_sink/<sinkId>/) and of its Delta "
            "app transaction; default: the output table's folder name. Give each sink of "
            "a query its own, and a second query writing the same table its own.",
            field="sink_id",
        ),
        ConfigKey(
            "adoptTable",
            "bool",
            "false",
            "Let the sink take over an existing Delta table that no barriered-delta sink "
            "owns (created by another writer; its columns must be the output's). The sink "
            "then owns it: a table another query's sink owns is never taken over.",
            field="adopt_table",
        ),
    )
}

#: Options of the "barriered-kafka" sink (besides ``kafka.*``, handed to the producer).
KAFKA_SINK_OPTIONS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        ConfigKey(
            "topic",
            "str",
            None,
            "The output topic of every row (it overrides a topic column). Without it, "
            "each row's topic column names its topic.",
            field="topic",
        ),
        ConfigKey(
            "snapshotPath",
            "path",
            None,
            "The snapshot path of the barriered source of the same query (default: the "
            "session key spark.sql.streaming.barriered.snapshotPath); its coordinator "
            "publishes the staged rows with each completed checkpoint.",
            field="snapshot_path",
        ),
        ConfigKey(
            "sinkId",
            "str",
            None,
            "Name of the sink under the snapshot path (_sink/<sinkId>/), of its Kafka "
            "transactional.id (barriered.sink.<sinkId>) and consumer group; default: the "
            "topic option. Give every query writing Kafka its own.",
            field="sink_id",
        ),
        ConfigKey(
            "progressTopic",
            "str",
            None,
            "The topic on whose partition 0 the sink's consumer group records, in each "
            "publishing transaction, the checkpoint published (default: the topic "
            "option; required with a topic column).",
            field="progress_topic",
        ),
    )
}

#: Every declared key, in declaration (and documentation) order.
KEYS: tuple[ConfigKey, ...] = tuple(KEYS_BY_NAME.values())
_KEYS_BY_LOWER: dict[str, ConfigKey] = {k.name.lower(): k for k in KEYS}
_KEYS_BY_FIELD: dict[str, ConfigKey] = {k.field: k for k in KEYS}


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
    found = KEYS_BY_NAME.get(short) or _KEYS_BY_FIELD.get(short)
    if found is None:
        raise ConfigError(f"unknown configuration key {name!r}{_suggestion(short)}")
    return found


def closest(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that ``name`` most likely misspells (any case), or None.

    The "did you mean" of every unknown key or option (session keys, the source's and
    the sink's options): ``names`` in their declared spelling, compared lower-cased
    (PySpark passes option names lower-cased).
    """
    by_lower = {n.lower(): n for n in names}
    lower = name.lower()
    if lower in by_lower:
        return by_lower[lower]
    close = difflib.get_close_matches(lower, list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def _suggestion(short_name: str, *, full: bool = True) -> str:
    match = closest(short_name, (k.name for k in KEYS))
    if match is None:
        return f"; known keys: {', '.join(k.name for k in KEYS)}"
    return f"; did you mean {(PREFIX + match) if full else match!r}?"


def _field_value(config_key: ConfigKey, value: ConfigValue) -> ConfigValue:
    """Convert a parsed key value to its :class:`BarrieredConf` field value."""
    if config_key is MODE:
        return value == "exactlyOnce"
    return value


def _key_value(config_key: ConfigKey, field_value: object) -> ConfigValue:
    """Convert a :class:`BarrieredConf` field value back to the key's parsed value."""
    if config_key is MODE and isinstance(field_value, bool):
        return "exactlyOnce" if field_value else "atLeastOnce"
    if field_value is None or isinstance(field_value, (bool, int, str)):
        return field_value
    raise ConfigError(f"{config_key.key}: unsupported value {field_value!r}")


def _default(name: str) -> ConfigValue:
    return _field_value(KEYS_BY_NAME[name], KEYS_BY_NAME[name].default_value)


def _default_int(name: str) -> int:
    value = _default(name)
    assert isinstance(value, int)
    return value


def _default_bool(name: str) -> bool:
    value = _default(name)
    assert isinstance(value, bool)
    return value


def _default_str(name: str) -> str:
    value = _default(name)
    assert isinstance(value, str)
    return value


@dataclass(frozen=True)
class BarrieredConf:
    """The validated, typed configuration of one barriered query.

    Build it with :func:`resolve`; the defaults below come from the key declarations.
    Constructing it directly validates every field the same way.

    Attributes
    ----------
    checkpoint_interval_ms : int
        ``checkpointInterval`` in milliseconds.
    checkpoint_timeout_ms : int
        ``checkpointTimeout`` in milliseconds.
    min_pause_ms : int
        ``minPauseBetweenCheckpoints`` in milliseconds.
    max_concurrent_checkpoints : int
        ``maxConcurrentCheckpoints``.
    tolerable_checkpoint_failures : int
        ``tolerableCheckpointFailures``.
    exactly_once : bool
        ``mode == exactlyOnce`` (see :attr:`mode`).
    unaligned_enabled : bool
        ``unaligned.enabled``.
    unaligned_adaptive : bool
        ``unaligned.adaptive``.
    aligned_checkpoint_timeout_ms : int
        ``alignedCheckpointTimeout`` in milliseconds.
    max_parallelism : int
        ``maxParallelism``, the number of key groups.
    snapshot_path : str or None
        ``snapshotPath`` (see :meth:`require_snapshot_path`).
    snapshot_storage_options : str
        ``snapshotStorageOptions``, canonical JSON (see :attr:`storage_options`).
    retained_checkpoints : int
        ``retainedCheckpoints``.
    retention_min_age_ms : int
        ``retention.minAge`` in milliseconds.
    retention_history_size : int
        ``retention.historySize``.
    retention_maintenance_interval : int
        ``retention.maintenanceInterval``.
    inflight_capture : str
        ``inflight.capture``: ``"value"`` or ``"reference"``.
    buffer_per_channel : int
        ``bufferPerChannel``, in rows.
    coordinator_timeout_ms : int
        ``coordinatorTimeout`` in milliseconds.
    lease_timeout_ms : int
        ``leaseTimeout`` in milliseconds.
    provider_change_detection : str
        ``provider.changeDetection``: ``"writes"`` or ``"digest"``.

    Raises
    ------
    ConfigError
        If a field is out of range, or ``unaligned_enabled`` is set without
        ``exactly_once``.
    """

    checkpoint_interval_ms: int = _default_int("checkpointInterval")
    checkpoint_timeout_ms: int = _default_int("checkpointTimeout")
    min_pause_ms: int = _default_int("minPauseBetweenCheckpoints")
    max_concurrent_checkpoints: int = _default_int("maxConcurrentCheckpoints")
    tolerable_checkpoint_failures: int = _default_int("tolerableCheckpointFailures")
    exactly_once: bool = _default_bool("mode")
    unaligned_enabled: bool = _default_bool("unaligned.enabled")
    unaligned_adaptive: bool = _default_bool("unaligned.adaptive")
    aligned_checkpoint_timeout_ms: int = _default_int("alignedCheckpointTimeout")
    max_parallelism: int = _default_int("maxParallelism")
    snapshot_path: str | None = None
    snapshot_storage_options: str = _default_str("snapshotStorageOptions")
    retained_checkpoints: int = _default_int("retainedCheckpoints")
    retention_min_age_ms: int = _default_int("retention.minAge")
    retention_history_size: int = _default_int("retention.historySize")
    retention_maintenance_interval: int = _default_int("retention.maintenanceInterval")
    inflight_capture: str = _default_str("inflight.capture")
    buffer_per_channel: int = _default_int("bufferPerChannel")
    coordinator_timeout_ms: int = _default_int("coordinatorTimeout")
    lease_timeout_ms: int = _default_int("leaseTimeout")
    provider_change_detection: str = _default_str("provider.changeDetection")

    def __post_init__(self) -> None:
        for config_key in KEYS:
            value = getattr(self, config_key.field)
            if value is None and config_key.default is None:
                continue
            expected: type = (
                bool
                if config_key.type == "bool" or config_key is MODE
                else (int if config_key.type in ("int", "duration") else str)
            )
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise ConfigError(
                    f"{config_key.key}: field {config_key.field} must be "
                    f"{expected.__name__}, got {value!r}"
                )
            # Round-trip through the parser: the same bounds and choices as resolve().
            parsed = config_key.parse(config_key.format(_key_value(config_key, value)))
            if _field_value(config_key, parsed) != value:
                raise ConfigError(
                    f"{config_key.key}: invalid value {value!r}; expected "
                    f"{config_key.accepted_forms()}"
                )
        if self.unaligned_enabled and not self.exactly_once:
            raise ConfigError(
                f"{UNALIGNED_ENABLED.key}=true needs {MODE.key}=exactlyOnce, but mode is "
                "atLeastOnce (an at-least-once checkpoint never aligns, so there is "
                "nothing to unalign); set unaligned.enabled=false or mode=exactlyOnce"
            )

    @property
    def mode(self) -> str:
        """The ``mode`` key: ``"exactlyOnce"`` or ``"atLeastOnce"``."""
        return "exactlyOnce" if self.exactly_once else "atLeastOnce"

    @property
    def storage_options(self) -> dict[str, str]:
        """``snapshotStorageOptions`` as a dict, for delta-rs."""
        options: dict[str, str] = json.loads(self.snapshot_storage_options)
        return options

    def require_snapshot_path(self) -> str:
        """Return ``snapshot_path``, or fail with a message that says how to set it.

        Returns
        -------
        str
            The snapshot path.

        Raises
        ------
        ConfigError
            If no snapshot path is configured, or it is a file or under a file.
        """
        if self.snapshot_path is None:
            raise ConfigError(
                f"no snapshot path: set {SNAPSHOT_PATH.key} in the session conf or "
                ".option('snapshotPath', ...) on the barriered source (a directory for "
                "the Delta tables of this query's checkpoints)"
            )
        problem = folder_problem(self.snapshot_path)
        if problem is not None:
            raise ConfigError(
                f"{SNAPSHOT_PATH.key} (or the source option 'snapshotPath') is "
                f"{self.snapshot_path!r}, which {problem}: the snapshot path is a folder for "
                "the Delta tables of this query's checkpoints. Give a new folder, or the one "
                "this query wrote before; nothing was written"
            )
        return self.snapshot_path

    def to_dict(self) -> dict[str, ConfigValue]:
        """The fields as a plain, JSON-serialisable dict (field name -> value).

        Returns
        -------
        dict
            E.g. ``{"checkpoint_interval_ms": 10000, ..., "exactly_once": True, ...}``;
            :func:`check_restore_compatible` accepts it as ``previous``.
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_conf(self) -> dict[str, str]:
        """The configuration as session keys and canonical strings.

        Returns
        -------
        dict of str to str
            Full key -> value string (``"10s"``, ``"exactlyOnce"``, ...), without keys
            whose value is ``None``; ``resolve(conf.to_conf()) == conf``.
        """
        out: dict[str, str] = {}
        for config_key in KEYS:
            value = _key_value(config_key, getattr(self, config_key.field))
            if value is not None:
                out[config_key.key] = config_key.format(value)
        return out


def _option_key(name: str) -> tuple[ConfigKey | None, str | None]:
    """Classify a source option name: (barriered key, None), (None, error) or (None, None)."""
    lower = name.lower()
    if lower.startswith(PREFIX.lower()):
        short = lower[len(PREFIX) :]
        if short not in _KEYS_BY_LOWER:
            return None, (
                f"unknown source option {name!r}{_suggestion(name[len(PREFIX) :], full=False)}"
            )
        return _KEYS_BY_LOWER[short], None
    return _KEYS_BY_LOWER.get(lower), None


def split_options(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Split a source's options into barriered overrides and the source's own options.

    Option names are case-insensitive (PySpark lower-cases them); an option named after
    a key (``checkpointInterval``) or its full session key overrides that key.

    Parameters
    ----------
    options : Mapping[str, str]
        The options given to the barriered source.

    Returns
    -------
    overrides : dict of str to str
        Short key name (canonical spelling) -> raw value, for :func:`resolve`.
    rest : dict of str to str
        Every other option, unchanged.

    Raises
    ------
    ConfigError
        For an unknown option under the ``spark.sql.streaming.barriered.`` prefix.
    """
    overrides: dict[str, str] = {}
    rest: dict[str, str] = {}
    problems: list[str] = []
    for name, value in options.items():
        config_key, error = _option_key(name)
        if error is not None:
            problems.append(error)
        elif config_key is None:
            rest[name] = value
        else:
            overrides[config_key.name] = value
    _raise(problems)
    return overrides, rest


def _raise(problems: Sequence[str]) -> None:
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError(
            f"{len(problems)} configuration problems:\n" + "\n".join(f"- {p}" for p in problems)
        )


def resolve(
    session_conf: Mapping[str, str], options: Mapping[str, str] | None = None
) -> BarrieredConf:
    """Validate the session keys and source options into a :class:`BarrieredConf`.

    Parameters
    ----------
    session_conf : Mapping[str, str]
        Session configuration, e.g. ``spark.conf.getAll``; keys outside
        :data:`PREFIX` are ignored, keys under it must be declared (exact case, as in
        Spark).
    options : Mapping[str, str], optional
        The barriered source's options; those named after a key override the
        session value (see :func:`split_options`), the others are ignored here.

    Returns
    -------
    BarrieredConf
        Defaults, overridden by the session, overridden by the options.

    Raises
    ------
    ConfigError
        Listing every unknown key (with a "did you mean" suggestion) and every bad value
        (naming the full key or option, the value and the accepted forms).
    """
    problems: list[str] = []
    raw: dict[str, tuple[object, str]] = {}
    for name, value in session_conf.items():
        if not name.startswith(PREFIX):
            continue
        short = name[len(PREFIX) :]
        config_key = KEYS_BY_NAME.get(short)
        if config_key is None:
            problems.append(f"unknown configuration key {name!r}{_suggestion(short)}")
        else:
            raw[config_key.name] = (value, config_key.key)
    if options:
        try:
            overrides, _ = split_options(options)
        except ConfigError as exc:
            problems.append(str(exc))
        else:
            for short, value in overrides.items():
                where = f"source option {short!r} (overrides {KEYS_BY_NAME[short].key})"
                raw[short] = (value, where)

    values: dict[str, ConfigValue] = {}
    for config_key in KEYS:
        if config_key.name not in raw:
            continue
        raw_value, origin = raw[config_key.name]
        try:
            parsed = config_key.parse(raw_value, origin)
            values[config_key.field] = _field_value(config_key, parsed)
        except ConfigError as exc:
            problems.append(str(exc))
    _raise(problems)
    return BarrieredConf(**values)  # type: ignore[arg-type]


def _previous_values(previous: Mapping[str, object]) -> dict[ConfigKey, object]:
    found: dict[ConfigKey, object] = {}
    for name, value in previous.items():
        short = name[len(PREFIX) :] if name.startswith(PREFIX) else name
        config_key = KEYS_BY_NAME.get(short) or _KEYS_BY_FIELD.get(short)
        if config_key is not None:
            found[config_key] = value
    return found


def check_restore_compatible(previous: Mapping[str, object], current: BarrieredConf) -> None:
    """Fail if a key that is fixed for the life of a snapshot path has changed.

    Parameters
    ----------
    previous : Mapping[str, object]
        The configuration the snapshot was taken with: :meth:`BarrieredConf.to_dict`
        (field names), :meth:`BarrieredConf.to_conf` (full keys) or short key names,
        with typed or string values. Keys it does not contain are not checked.
    current : BarrieredConf
        The configuration of the restoring query.

    Raises
    ------
    ConfigError
        Naming every key with ``restore_may_change=False`` whose value differs, both
        values and what to do.
    """
    problems: list[str] = []
    for config_key, old in _previous_values(previous).items():
        if config_key.restore_may_change:
            continue
        old_value = (
            config_key.parse(old, f"{config_key.key} recorded in the snapshot")
            if isinstance(old, str)
            else _key_value(config_key, old)
        )
        new_value = _key_value(config_key, getattr(current, config_key.field))
        if old_value == new_value:
            continue
        old_text, new_text = config_key.format(old_value), config_key.format(new_value)
        hint = (
            " (to change the number of partitions, change spark.sql.shuffle.partitions and "
            "restore into a new checkpointLocation: that is free)"
            if config_key is MAX_PARALLELISM
            else ""
        )
        problems.append(
            f"{config_key.name} is fixed for the life of the snapshot path: the snapshot "
            f"was taken with {config_key.name}={old_text}, this query has "
            f"{config_key.key}={new_text}; restore with {config_key.name}={old_text} or "
            f"start a new snapshotPath{hint}"
        )
    _raise(problems)
