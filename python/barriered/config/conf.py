"""The parsed configuration of one query, :class:`BarrieredConf`, and how it is resolved.

:func:`resolve` parses the session keys and the source's overriding options (declared
in :mod:`barriered.config.keys`) into a :class:`BarrieredConf`, one field per key;
:func:`check_restore_compatible` refuses a restore that changes a key fixed for the life
of a snapshot path.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from barriered.config.declaration import PREFIX, ConfigKey, ConfigValue
from barriered.config.keys import (
    KEYS,
    KEYS_BY_FIELD,
    KEYS_BY_LOWER,
    KEYS_BY_NAME,
    MAX_PARALLELISM,
    MODE,
    SNAPSHOT_PATH,
    SNAPSHOT_STORAGE_OPTIONS,
    UNALIGNED_ENABLED,
    suggestion,
)
from barriered.errors import ConfigError
from barriered.files.fileio import folder_problem
from barriered.files.storage_options import check_option_names

__all__ = ["BarrieredConf", "check_restore_compatible", "field_value", "resolve", "split_options"]


def field_value(config_key: ConfigKey, value: ConfigValue) -> ConfigValue:
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


def _default(field: str) -> ConfigValue:
    """The declared default of the key of :class:`BarrieredConf` field ``field``."""
    return field_value(KEYS_BY_FIELD[field], KEYS_BY_FIELD[field].default_value)


def _default_int(field: str) -> int:
    value = _default(field)
    assert isinstance(value, int)
    return value


def _default_bool(field: str) -> bool:
    value = _default(field)
    assert isinstance(value, bool)
    return value


def _default_str(field: str) -> str:
    value = _default(field)
    assert isinstance(value, str)
    return value


@dataclass(frozen=True)
class BarrieredConf:
    """The validated, typed configuration of one barriered query.

    Build it with :func:`resolve`; the defaults below come from the key declarations.
    Constructing it directly validates every field the same way.

    Attributes
    ----------
    checkpoint_interval_ms, ..., provider_change_detection
        One field per session key, named by its declaration's ``field`` (the key's name
        in snake case; durations in milliseconds, with an ``_ms`` suffix); its type and
        default come from the declaration (see ``docs/configuration.md``). ``mode`` is
        the bool ``exactly_once`` (see :attr:`mode`).

    Raises
    ------
    ConfigError
        If a field is out of range, or ``unaligned_enabled`` is set without
        ``exactly_once``.
    """

    checkpoint_interval_ms: int = _default_int("checkpoint_interval_ms")
    checkpoint_timeout_ms: int = _default_int("checkpoint_timeout_ms")
    min_pause_ms: int = _default_int("min_pause_ms")
    max_concurrent_checkpoints: int = _default_int("max_concurrent_checkpoints")
    tolerable_checkpoint_failures: int = _default_int("tolerable_checkpoint_failures")
    exactly_once: bool = _default_bool("exactly_once")
    unaligned_enabled: bool = _default_bool("unaligned_enabled")
    unaligned_adaptive: bool = _default_bool("unaligned_adaptive")
    aligned_checkpoint_timeout_ms: int = _default_int("aligned_checkpoint_timeout_ms")
    max_parallelism: int = _default_int("max_parallelism")
    snapshot_path: str | None = None  # no default: required by the source
    snapshot_storage_options: str = _default_str("snapshot_storage_options")
    retained_checkpoints: int = _default_int("retained_checkpoints")
    retention_min_age_ms: int = _default_int("retention_min_age_ms")
    retention_history_size: int = _default_int("retention_history_size")
    retention_maintenance_interval: int = _default_int("retention_maintenance_interval")
    inflight_capture: str = _default_str("inflight_capture")
    buffer_per_channel: int = _default_int("buffer_per_channel")
    coordinator_timeout_ms: int = _default_int("coordinator_timeout_ms")
    lease_timeout_ms: int = _default_int("lease_timeout_ms")
    provider_change_detection: str = _default_str("provider_change_detection")
    keyed_write_buffer_size: int = _default_int("keyed_write_buffer_size")
    keyed_max_runs: int = _default_int("keyed_max_runs")
    keyed_local_cache_size: int = _default_int("keyed_local_cache_size")
    keyed_local_cache_dir: str | None = None
    metrics_prometheus_port: int | None = None
    metrics_host: str = _default_str("metrics_host")
    metrics_open_telemetry: bool = _default_bool("metrics_open_telemetry")
    autoscale_enabled: bool = _default_bool("autoscale_enabled")
    autoscale_min_partitions: int = _default_int("autoscale_min_partitions")
    autoscale_max_partitions: int = _default_int("autoscale_max_partitions")
    autoscale_scale_up_backlog: int = _default_int("autoscale_scale_up_backlog")
    autoscale_scale_down_backlog: int = _default_int("autoscale_scale_down_backlog")
    autoscale_checkpoints: int = _default_int("autoscale_checkpoints")
    autoscale_cool_down_ms: int = _default_int("autoscale_cool_down_ms")

    def __post_init__(self) -> None:
        for config_key in KEYS:
            value = getattr(self, config_key.field)
            if value is None and config_key.default is None:
                continue
            expected: type = (
                bool
                if config_key.type == "bool" or config_key is MODE
                else (int if config_key.type in ("int", "duration", "bytes") else str)
            )
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise ConfigError(
                    f"{config_key.key}: field {config_key.field} must be "
                    f"{expected.__name__}, got {value!r}"
                )
            # Round-trip through the parser: the same bounds and choices as resolve().
            parsed = config_key.parse(config_key.format(_key_value(config_key, value)))
            if field_value(config_key, parsed) != value:
                raise ConfigError(
                    f"{config_key.key}: invalid value {value!r}; expected "
                    f"{config_key.accepted_forms()}"
                )
        check_option_names(self.storage_options, SNAPSHOT_STORAGE_OPTIONS.key)
        if self.unaligned_enabled and not self.exactly_once:
            raise ConfigError(
                f"{UNALIGNED_ENABLED.key}=true needs {MODE.key}=exactlyOnce, but mode is "
                "atLeastOnce (an at-least-once checkpoint never aligns, so there is "
                f"nothing to unalign); set {UNALIGNED_ENABLED.name}=false or "
                f"{MODE.name}=exactlyOnce"
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
                f".option({SNAPSHOT_PATH.name!r}, ...) on the barriered source (a directory for "
                "the Delta tables of this query's checkpoints)"
            )
        problem = folder_problem(self.snapshot_path)
        if problem is not None:
            raise ConfigError(
                f"{SNAPSHOT_PATH.key} (or the source option {SNAPSHOT_PATH.name!r}) is "
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


_FIELDS = {f.name for f in dataclasses.fields(BarrieredConf)}
if set(KEYS_BY_FIELD) != _FIELDS:  # a key without a field, or a field without a key
    raise ValueError(f"BarrieredConf fields differ from the keys: {_FIELDS ^ set(KEYS_BY_FIELD)}")


def _option_key(name: str) -> tuple[ConfigKey | None, str | None]:
    """Classify a source option name: (barriered key, None), (None, error) or (None, None)."""
    lower = name.lower()
    if lower.startswith(PREFIX.lower()):
        short = lower[len(PREFIX) :]
        if short not in KEYS_BY_LOWER:
            return None, (
                f"unknown source option {name!r}{suggestion(name[len(PREFIX) :], full=False)}"
            )
        return KEYS_BY_LOWER[short], None
    return KEYS_BY_LOWER.get(lower), None


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
            problems.append(f"unknown configuration key {name!r}{suggestion(short)}")
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
            values[config_key.field] = field_value(config_key, parsed)
        except ConfigError as exc:
            problems.append(str(exc))
    _raise(problems)
    return BarrieredConf(**values)  # type: ignore[arg-type]


def _previous_values(previous: Mapping[str, object]) -> dict[ConfigKey, object]:
    found: dict[ConfigKey, object] = {}
    for name, value in previous.items():
        short = name[len(PREFIX) :] if name.startswith(PREFIX) else name
        config_key = KEYS_BY_NAME.get(short) or KEYS_BY_FIELD.get(short)
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
