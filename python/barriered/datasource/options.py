"""The options of the "barriered" source, validated at query start.

Three kinds of options reach the source: its own (``upstream``, ``maxRowsPerChannel``,
``admissionFactors``, ``rowsPerPartition``, ``restoreFrom``), the upstream's (see each
upstream), and the ``spark.sql.streaming.barriered.*`` keys. Session keys reach the
Python worker through the hidden option ``barriered.sessionConf`` that
:func:`barriered.install` adds on ``load()`` of a classic or Spark Connect session (a
Python data source cannot read the session configuration itself); an option named after
a key overrides the session value. A source without the hidden option is refused: its
session keys would be silently replaced by defaults. Any other option is an error naming
it.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from barriered.config import KEYS, BarrieredConf, ConfigKey, resolve, split_options
from barriered.config.declaration import lookup
from barriered.config.source_options import (
    ADMISSION_FACTORS,
    MAX_ROWS_PER_CHANNEL,
    RESTORE_FROM,
    ROWS_PER_PARTITION,
    SESSION_CONF_OPTION,
    SESSION_EXTENSIONS,
)
from barriered.config.upstream_options import UPSTREAM, UPSTREAM_OPTIONS
from barriered.datasource.upstreams.options import Options, parse_channel_factors
from barriered.errors import ConfigError
from barriered.spelling import closest

#: The source's own options (the upstream's are in ``UPSTREAM_OPTIONS``).
SOURCE_OPTIONS: tuple[ConfigKey, ...] = (
    UPSTREAM,
    MAX_ROWS_PER_CHANNEL,
    ADMISSION_FACTORS,
    ROWS_PER_PARTITION,
    RESTORE_FROM,
)


@dataclass(frozen=True)
class SourceSettings:
    """The validated options of one barriered source."""

    conf: BarrieredConf
    upstream_options: Options
    upstream: str
    max_rows_per_channel: int | None
    rows_per_partition: int
    restore_from: str | None
    #: The session's ``spark.sql.extensions`` classes.
    extensions: tuple[str, ...] = ()
    #: Option ``admissionFactors`` as given (checked against the channels by
    #: :meth:`admission`).
    admission_factors: str = ""

    def admission(self, channels: int) -> list[int | None]:
        """Per channel, the most rows one micro-batch takes (None: no limit).

        Raises
        ------
        ConfigError
            If ``admissionFactors`` names a channel out of ``[0, channels)`` or twice, or a
            factor that is not a finite number above 0.
        """
        factors = parse_channel_factors(self.admission_factors, ADMISSION_FACTORS.name, channels)
        limit = self.max_rows_per_channel
        if limit is None:
            return [None] * channels
        # a factor large enough to overflow a float admits as much as no limit would
        return [
            max(1, math.floor(min(limit * factors.get(c, 1.0), sys.maxsize)))
            for c in range(channels)
        ]


def _did_you_mean(name: str, known: list[ConfigKey]) -> str:
    """`` (did you mean ...?)`` for an unknown option close to an option of the source or
    its upstream, or to a ``spark.sql.streaming.barriered.*`` key (which is also a source
    option), else ``""``."""
    candidates = {k.name: k for k in (*known, *KEYS)}
    match = closest(name, candidates)
    if match is None:
        return ""
    config_key = candidates[match]
    if config_key.owner:
        return f" (did you mean {match!r}?)"
    return f" (did you mean {config_key.name!r}, or the session key {config_key.key!r}?)"


def parse_source_options(options: Mapping[str, str]) -> SourceSettings:
    """Validate the options given to ``spark.readStream.format("barriered")``.

    Raises
    ------
    ConfigError
        Naming every unknown option (with a suggestion) or bad value, or when the
        session keys did not come with the options (no :func:`barriered.install`).
    """
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    if SESSION_CONF_OPTION not in opts:
        raise ConfigError(
            "the barriered source did not receive the session's "
            "spark.sql.streaming.barriered.* keys, so they would be ignored: call "
            "barriered.install(spark) on this session before "
            'spark.readStream.format("barriered")...load(), or read with '
            "barriered.read_stream(spark)"
        )
    session = json.loads(opts.pop(SESSION_CONF_OPTION) or "{}")
    _, rest = split_options(opts)
    conf = resolve(session, opts)
    upstream = UPSTREAM.read_str(rest)
    assert upstream is not None  # declared with a default
    known = [*SOURCE_OPTIONS, *UPSTREAM_OPTIONS[upstream]]
    names = {k.name.lower() for k in known if k.type != "prefix"}
    prefixes = tuple(k.name.lower() for k in known if k.type == "prefix")
    unknown = [k for k in rest if k not in names and not k.startswith(prefixes or ("\0",))]
    if unknown:
        hints = [f"{name!r}{_did_you_mean(name, known)}" for name in sorted(unknown)]
        listed = ", ".join(k.name + ("*" if k.type == "prefix" else "") for k in known)
        raise ConfigError(
            f"unknown option(s) for the barriered source with upstream {upstream!r}: "
            f"{', '.join(hints)}. Known options: {listed}, plus the "
            "spark.sql.streaming.barriered.* keys (see docs/configuration.md)"
        )
    max_rows = MAX_ROWS_PER_CHANNEL.read_int(rest)
    factors = ADMISSION_FACTORS.read_str(rest) or ""
    parse_channel_factors(factors, ADMISSION_FACTORS.name, sys.maxsize)  # the form, now
    if factors.strip() and max_rows is None:
        raise ConfigError(
            f"option {ADMISSION_FACTORS.name!r} scales {MAX_ROWS_PER_CHANNEL.name!r}, "
            f"which is not set: set {MAX_ROWS_PER_CHANNEL.name!r} too, or remove "
            f"{ADMISSION_FACTORS.name!r}"
        )
    rows_per_partition = ROWS_PER_PARTITION.read_int(rest)
    assert rows_per_partition is not None  # declared with a default
    conf.require_snapshot_path()
    restore_from = RESTORE_FROM.read_str(rest)
    blank = lookup(rest, RESTORE_FROM.name)
    if restore_from is None and blank is not None:
        raise ConfigError(
            f"option {RESTORE_FROM.name!r} is blank ({blank!r}): it would be ignored and the "
            "query would start without a restore. Give 'latest', a checkpoint id or a "
            f"savepoint path, or leave {RESTORE_FROM.name!r} out to start (or resume) "
            "without one"
        )
    if restore_from is not None and restore_from.lstrip("-").isdigit() and int(restore_from) < 1:
        raise ConfigError(
            f"option {RESTORE_FROM.name!r} must be 'latest', a checkpoint id >= 1 or a "
            f"savepoint path, got {restore_from!r}"
        )
    own = {k.name.lower() for k in SOURCE_OPTIONS}
    return SourceSettings(
        conf=conf,
        upstream_options=Options({k: v for k, v in rest.items() if k not in own}),
        upstream=upstream,
        max_rows_per_channel=max_rows,
        rows_per_partition=rows_per_partition,
        restore_from=restore_from,
        extensions=tuple(e.strip() for e in session.get(SESSION_EXTENSIONS, "").split(",")),
        admission_factors=factors,
    )
