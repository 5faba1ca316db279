"""Settings of the checkpoint coordinator (validated, immutable).

:class:`CoordinatorSettings` is the coordinator's own view of the
``spark.sql.streaming.barriered.*`` keys, already parsed into milliseconds and counts.
Every field is checked in ``__post_init__``; a bad value raises
:class:`~barriered.errors.ConfigError` naming the field and the Spark key it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from barriered.errors import ConfigError

if TYPE_CHECKING:
    from barriered.config import BarrieredConf

__all__ = ["SETTING_KEYS", "CoordinatorSettings"]

_PREFIX = "spark.sql.streaming.barriered."

SETTING_KEYS: dict[str, str] = {
    "checkpoint_interval_ms": _PREFIX + "checkpointInterval",
    "checkpoint_timeout_ms": _PREFIX + "checkpointTimeout",
    "min_pause_ms": _PREFIX + "minPauseBetweenCheckpoints",
    "max_concurrent": _PREFIX + "maxConcurrentCheckpoints",
    "tolerable_failures": _PREFIX + "tolerableCheckpointFailures",
    "exactly_once": _PREFIX + "mode",
    "unaligned_enabled": _PREFIX + "unaligned.enabled",
    "adaptive": _PREFIX + "unaligned.adaptive",
    "aligned_timeout_ms": _PREFIX + "alignedCheckpointTimeout",
    "buffer_per_channel_rows": _PREFIX + "bufferPerChannel",
}
"""Field of :class:`CoordinatorSettings` -> the Spark configuration key it is read from."""


@dataclass(frozen=True)
class CoordinatorSettings:
    """What the checkpoint coordinator needs to know, in milliseconds and counts.

    Parameters
    ----------
    checkpoint_interval_ms : int, default 10000
        Time between two periodic checkpoint triggers (> 0).
    checkpoint_timeout_ms : int, default 600000
        A checkpoint still pending this long after its trigger is aborted as ``"expired"``
        (> 0).
    min_pause_ms : int, default 0
        Minimum time between the end (completion or abort) of a checkpoint and the next
        periodic trigger (>= 0).
    max_concurrent : int, default 1
        Periodic checkpoints are only triggered while fewer than this many checkpoints
        (savepoints included) are pending (>= 1).
    tolerable_failures : int, default 0
        Consecutive checkpoint failures tolerated; one more fails the query (>= 0).
    exactly_once : bool, default True
        ``False`` selects at-least-once mode (barriers never block, no in-flight capture).
    unaligned_enabled : bool, default False
        Whether checkpoints may be unaligned (barriers overtake the backlog).
    adaptive : bool, default True
        Whether the policy may start a checkpoint unaligned at once from measured
        signals (else it always starts aligned with the timeout).
    aligned_timeout_ms : int, default 0
        With unaligned enabled: how long an alignment may last before the checkpoint
        switches to unaligned; ``0`` means unaligned straight away (>= 0).
    buffer_per_channel_rows : int or None, default None
        The source's per-channel read-ahead bound: the backlog behind a barrier is never
        larger, so the mode policy caps a channel's backlog at it (> 0 when set).
    alignment_history_size : int, default 5
        The mode policy looks at the alignments of the last this-many completed
        checkpoints (>= 1).
    alignment_min_samples : int, default 3
        The median of recent alignments is only used with at least this many samples
        (>= 1 and <= ``alignment_history_size``).
    stats_history_size : int, default 1000
        Finished checkpoints whose statistics are kept in memory (>= 1); pending ones are
        always kept. The full history lives in the ``_checkpoints`` table.

    Raises
    ------
    barriered.errors.ConfigError
        If a field has the wrong type or is out of range; the message names the field.
    """

    checkpoint_interval_ms: int = 10_000
    checkpoint_timeout_ms: int = 600_000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    exactly_once: bool = True
    unaligned_enabled: bool = False
    adaptive: bool = True
    aligned_timeout_ms: int = 0
    buffer_per_channel_rows: int | None = None
    alignment_history_size: int = 5
    alignment_min_samples: int = 3
    stats_history_size: int = 1000

    def __post_init__(self) -> None:
        _check_int(self, "checkpoint_interval_ms", 1)
        _check_int(self, "checkpoint_timeout_ms", 1)
        _check_int(self, "min_pause_ms", 0)
        _check_int(self, "max_concurrent", 1)
        _check_int(self, "tolerable_failures", 0)
        _check_bool(self, "exactly_once")
        _check_bool(self, "unaligned_enabled")
        _check_bool(self, "adaptive")
        _check_int(self, "aligned_timeout_ms", 0)
        if self.buffer_per_channel_rows is not None:
            _check_int(self, "buffer_per_channel_rows", 1)
        _check_int(self, "alignment_history_size", 1)
        _check_int(self, "alignment_min_samples", 1)
        _check_int(self, "stats_history_size", 1)
        if self.alignment_min_samples > self.alignment_history_size:
            raise ConfigError(
                f"CoordinatorSettings.alignment_min_samples must be <= "
                f"alignment_history_size ({self.alignment_history_size}), "
                f"got {self.alignment_min_samples}"
            )


def _where(name: str) -> str:
    key = SETTING_KEYS.get(name)
    return f"CoordinatorSettings.{name}" + (f" ({key})" if key else "")


def _check_int(settings: CoordinatorSettings, name: str, minimum: int) -> None:
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{_where(name)} must be an integer, got {type(value).__name__} {value!r}"
        )
    if value < minimum:
        bound = "> 0" if minimum == 1 else f">= {minimum}"
        raise ConfigError(f"{_where(name)} must be {bound}, got {value}")


def _check_bool(settings: CoordinatorSettings, name: str) -> None:
    value = getattr(settings, name)
    if not isinstance(value, bool):
        raise ConfigError(f"{_where(name)} must be a bool, got {type(value).__name__} {value!r}")


def settings_from_conf(conf: BarrieredConf) -> CoordinatorSettings:
    """Map the session/source configuration onto the coordinator's settings."""
    return CoordinatorSettings(
        checkpoint_interval_ms=conf.checkpoint_interval_ms,
        checkpoint_timeout_ms=conf.checkpoint_timeout_ms,
        min_pause_ms=conf.min_pause_ms,
        max_concurrent=conf.max_concurrent_checkpoints,
        tolerable_failures=conf.tolerable_checkpoint_failures,
        exactly_once=conf.exactly_once,
        unaligned_enabled=conf.unaligned_enabled,
        adaptive=conf.unaligned_adaptive,
        aligned_timeout_ms=conf.aligned_checkpoint_timeout_ms,
        buffer_per_channel_rows=conf.buffer_per_channel,
    )
