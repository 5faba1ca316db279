"""Settings of the checkpoint coordinator (validated, immutable), derived from the keys.

:class:`CoordinatorSettings` is the coordinator's view of ten
``spark.sql.streaming.barriered.*`` keys (:data:`SETTING_KEYS`), already parsed into
milliseconds and counts: each of those fields takes its default and bounds from the key's
declaration in :mod:`barriered.config.keys`, and a bad value raises
:class:`~barriered.errors.ConfigError` naming the field, the key and the declared bounds.
Three more fields tune the mode policy and the in-memory statistics; they have no key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from barriered.config import (
    ALIGNED_CHECKPOINT_TIMEOUT,
    BUFFER_PER_CHANNEL,
    CHECKPOINT_INTERVAL,
    CHECKPOINT_TIMEOUT,
    MAX_CONCURRENT_CHECKPOINTS,
    MIN_PAUSE_BETWEEN_CHECKPOINTS,
    MODE,
    TOLERABLE_CHECKPOINT_FAILURES,
    UNALIGNED_ADAPTIVE,
    UNALIGNED_ENABLED,
    ConfigKey,
)
from barriered.config.conf import field_value
from barriered.errors import ConfigError

if TYPE_CHECKING:
    from barriered.config import BarrieredConf

__all__ = ["FIELD_KEYS", "SETTING_KEYS", "CoordinatorSettings", "settings_from_conf"]

#: Field of :class:`CoordinatorSettings` -> the declaration of the key it is read from.
FIELD_KEYS: dict[str, ConfigKey] = {
    "checkpoint_interval_ms": CHECKPOINT_INTERVAL,
    "checkpoint_timeout_ms": CHECKPOINT_TIMEOUT,
    "min_pause_ms": MIN_PAUSE_BETWEEN_CHECKPOINTS,
    "max_concurrent": MAX_CONCURRENT_CHECKPOINTS,
    "tolerable_failures": TOLERABLE_CHECKPOINT_FAILURES,
    "exactly_once": MODE,
    "unaligned_enabled": UNALIGNED_ENABLED,
    "adaptive": UNALIGNED_ADAPTIVE,
    "aligned_timeout_ms": ALIGNED_CHECKPOINT_TIMEOUT,
    "buffer_per_channel_rows": BUFFER_PER_CHANNEL,
}

#: Field of :class:`CoordinatorSettings` -> the full session key it is read from.
SETTING_KEYS: dict[str, str] = {name: k.key for name, k in FIELD_KEYS.items()}


def _default(name: str) -> int:
    value = field_value(FIELD_KEYS[name], FIELD_KEYS[name].default_value)
    assert isinstance(value, int)  # bool is an int
    return value


@dataclass(frozen=True)
class CoordinatorSettings:
    """What the checkpoint coordinator needs to know, in milliseconds and counts.

    Parameters
    ----------
    checkpoint_interval_ms, checkpoint_timeout_ms, min_pause_ms : int
        ``checkpointInterval``, ``checkpointTimeout``, ``minPauseBetweenCheckpoints``.
    max_concurrent, tolerable_failures : int
        ``maxConcurrentCheckpoints``, ``tolerableCheckpointFailures``.
    exactly_once : bool
        ``mode == exactlyOnce`` (``False``: barriers never block, no in-flight capture).
    unaligned_enabled, adaptive : bool
        ``unaligned.enabled``, ``unaligned.adaptive``.
    aligned_timeout_ms : int
        ``alignedCheckpointTimeout``.
    buffer_per_channel_rows : int
        ``bufferPerChannel``: the backlog behind a barrier is never larger, so the mode
        policy caps a channel's backlog at it.
    alignment_history_size : int, default 5
        The mode policy looks at the alignments of the last this-many completed
        checkpoints (>= 1).
    alignment_min_samples : int, default 3
        The median of recent alignments is only used with at least this many samples
        (>= 1 and <= ``alignment_history_size``).
    stats_history_size : int, default 1000
        Finished checkpoints whose statistics are kept in memory (>= 1); pending ones are
        always kept. The full history lives in the ``_checkpoints`` table.

    The fields named after a key (:data:`FIELD_KEYS`) default to, and are bounded by,
    its declaration (see ``docs/configuration.md``).

    Raises
    ------
    barriered.errors.ConfigError
        If a field has the wrong type or is out of range; the message names the field,
        its key and the declared bounds.
    """

    checkpoint_interval_ms: int = _default("checkpoint_interval_ms")
    checkpoint_timeout_ms: int = _default("checkpoint_timeout_ms")
    min_pause_ms: int = _default("min_pause_ms")
    max_concurrent: int = _default("max_concurrent")
    tolerable_failures: int = _default("tolerable_failures")
    exactly_once: bool = bool(_default("exactly_once"))
    unaligned_enabled: bool = bool(_default("unaligned_enabled"))
    adaptive: bool = bool(_default("adaptive"))
    aligned_timeout_ms: int = _default("aligned_timeout_ms")
    buffer_per_channel_rows: int = _default("buffer_per_channel_rows")
    alignment_history_size: int = 5
    alignment_min_samples: int = 3
    stats_history_size: int = 1000

    def __post_init__(self) -> None:
        for name, config_key in FIELD_KEYS.items():
            if config_key.type == "bool" or config_key is MODE:
                _check_bool(self, name)
            else:
                _check_int(self, name, config_key)
        for name in ("alignment_history_size", "alignment_min_samples", "stats_history_size"):
            _check_int(self, name, None)
        if self.alignment_min_samples > self.alignment_history_size:
            raise ConfigError(
                f"CoordinatorSettings.alignment_min_samples must be <= "
                f"alignment_history_size ({self.alignment_history_size}), "
                f"got {self.alignment_min_samples}"
            )


def _where(name: str) -> str:
    key = SETTING_KEYS.get(name)
    return f"CoordinatorSettings.{name}" + (f" ({key})" if key else "")


def _check_int(settings: CoordinatorSettings, name: str, config_key: ConfigKey | None) -> None:
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{_where(name)} must be an integer, got {type(value).__name__} {value!r}"
        )
    if config_key is None:
        if value < 1:
            raise ConfigError(f"{_where(name)} must be > 0, got {value}")
        return
    if not config_key.in_range(value):
        unit = " ms" if config_key.type == "duration" else ""
        bounds = config_key.range_text().removeprefix(",")
        raise ConfigError(f"{_where(name)} must be{bounds}, got {value}{unit}")


def _check_bool(settings: CoordinatorSettings, name: str) -> None:
    value = getattr(settings, name)
    if not isinstance(value, bool):
        raise ConfigError(f"{_where(name)} must be a bool, got {type(value).__name__} {value!r}")


def settings_from_conf(conf: BarrieredConf) -> CoordinatorSettings:
    """Map the session/source configuration onto the coordinator's settings."""
    return CoordinatorSettings(
        **{name: getattr(conf, config_key.field) for name, config_key in FIELD_KEYS.items()}
    )
