"""The options of the "barriered" source, validated at query start.

Three kinds of options reach the source: its own (``upstream``, ``maxRowsPerChannel``,
``rowsPerPartition``, ``restoreFrom``), the upstream's (see each upstream), and the
``spark.sql.streaming.barriered.*`` keys. Session keys reach the Python worker through
the hidden option ``barriered.sessionConf`` that :func:`barriered.install` adds on
``load()`` of a classic or Spark Connect session (a Python data source cannot read the
session configuration itself); an option named after a key overrides the session value.
A source without the hidden option is refused: its session keys would be silently
replaced by defaults. Any other option is an error naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from barriered.config import KEYS, BarrieredConf, closest, resolve, split_options
from barriered.datasource.upstreams.options import Options, int_option
from barriered.errors import ConfigError

SESSION_CONF_OPTION = "barriered.sessionconf"
#: The one session key outside ``spark.sql.streaming.barriered.*`` the hidden option
#: carries: a restore needs the provider's session extension (:mod:`barriered.provider`).
SESSION_EXTENSIONS = "spark.sql.extensions"

#: The source's own options (lower case, as PySpark passes them) and their docs.
SOURCE_OPTIONS: dict[str, str] = {
    "upstream": "Where records come from: rate (default), files, delta or kafka.",
    "maxrowsperchannel": "Admission control: most rows one micro-batch takes from a "
    "channel (default: no limit). A channel whose upstream grows faster lags.",
    "rowsperpartition": "Largest range of one channel read by one Spark task (default 100000).",
    "restorefrom": "Restore from 'latest' or a checkpoint id (of this snapshot path), or "
    "from a savepoint folder; use a new checkpointLocation (see statestore/README.md).",
}

#: Options of each upstream (lower case).
UPSTREAM_OPTIONS: dict[str, frozenset[str]] = {
    "rate": frozenset({"channels", "rowspersecond", "rowsperchannel", "keys", "skew"}),
    "files": frozenset({"path", "format", "channels", "channelby", "schema", "archiveto"}),
    "delta": frozenset({"path", "channels", "channelby", "startingversion"}),
    "kafka": frozenset(
        {
            "subscribe",
            "subscribepattern",
            "assign",
            "startingoffsets",
            "startingtimestamp",
            "failondataloss",
            "includeheaders",
            "kafkaconsumer.polltimeoutms",
        }
    ),
}
#: Prefixes of options passed on to an upstream's client (lower case).
UPSTREAM_PREFIXES: dict[str, str] = {"delta": "storageoptions.", "kafka": "kafka."}


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


def _did_you_mean(name: str, known: set[str]) -> str:
    """`` (did you mean ...?)`` for an unknown option close to a source option or to a
    ``spark.sql.streaming.barriered.*`` key (which is also a source option), else ``""``."""
    keys = {k.name.lower(): k for k in KEYS}
    match = closest(name, sorted(known | set(keys)))
    if match is None:
        return ""
    config_key = keys.get(match)
    if config_key is None:
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
    upstream = rest.get("upstream", "rate").lower()
    if upstream not in UPSTREAM_OPTIONS:
        raise ConfigError(
            f"option 'upstream' must be one of {sorted(UPSTREAM_OPTIONS)}, got {upstream!r}"
        )
    known = set(SOURCE_OPTIONS) | UPSTREAM_OPTIONS[upstream]
    prefix = UPSTREAM_PREFIXES.get(upstream)
    unknown = [k for k in rest if k not in known and not (prefix and k.startswith(prefix))]
    if unknown:
        hints = [f"{name!r}{_did_you_mean(name, known)}" for name in sorted(unknown)]
        raise ConfigError(
            f"unknown option(s) for the barriered source with upstream {upstream!r}: "
            f"{', '.join(hints)}. Known options: {', '.join(sorted(known))}, plus the "
            "spark.sql.streaming.barriered.* keys (see docs/configuration.md)"
        )
    max_rows = (
        int_option(rest, "maxrowsperchannel", 0, minimum=1)
        if rest.get("maxrowsperchannel")
        else None
    )
    conf.require_snapshot_path()
    restore_from = rest.get("restorefrom", "").strip() or None
    if restore_from is not None and restore_from.lstrip("-").isdigit() and int(restore_from) < 1:
        raise ConfigError(
            f"option 'restoreFrom' must be 'latest', a checkpoint id >= 1 or a savepoint "
            f"path, got {restore_from!r}"
        )
    return SourceSettings(
        conf=conf,
        upstream_options=Options({k: v for k, v in rest.items() if k not in SOURCE_OPTIONS}),
        upstream=upstream,
        max_rows_per_channel=max_rows,
        rows_per_partition=int_option(rest, "rowsperpartition", 100_000, minimum=1),
        restore_from=restore_from,
        extensions=tuple(e.strip() for e in session.get(SESSION_EXTENSIONS, "").split(",")),
    )
