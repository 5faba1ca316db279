"""The ``rate`` upstream: deterministic synthetic records per (channel, seq).

Record ``seq`` of channel ``c`` is a pure function of ``(c, seq)``, so any range can be
re-read on any machine (replay after restore needs nothing stored). Records appear at
``rowsPerSecond`` per channel from the stream's first start (kept in ``rate_start.json``
next to the source's manifest so a restarted query continues the same timeline), or all
at once when ``rowsPerSecond`` is 0 and ``rowsPerChannel`` bounds the stream. ``skew``
multiplies the rate (and bound) of chosen channels, so that with equal per-channel
admission those channels build a backlog and lag.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import pyarrow as pa

from barriered.config.upstream_options import (
    CHANNELS,
    DEFAULT_CHANNELS,
    KEYS,
    ROWS_PER_CHANNEL,
    ROWS_PER_SECOND,
    SKEW,
    UPSTREAM,
)
from barriered.datasource.upstreams.base import Upstream
from barriered.datasource.upstreams.options import parse_channel_factors
from barriered.errors import ConfigError
from barriered.files.fileio import join, read_json, write_json

SCHEMA = pa.schema([("user_id", pa.string()), ("amount", pa.int64())])


def record_key(channel: int, seq: int, keys: int) -> int:
    """Return the key number of record ``seq`` on ``channel`` (a fixed integer mix)."""
    return (seq * 2654435761 + channel * 40503 + 17) % keys


def record_amount(channel: int, seq: int) -> int:
    """Return the amount of record ``seq`` on ``channel`` (1..10)."""
    return (seq * 7 + channel * 3) % 10 + 1


class RateUpstream(Upstream):
    """Synthetic, replayable records: ``user_id`` (one of ``keys``) and ``amount``.

    Parameters
    ----------
    channels : int
        Number of channels.
    rows_per_second : float
        Production rate per channel; 0 means every record up to ``rows_per_channel`` is
        available at once.
    rows_per_channel : int or None
        Bound per channel (before skew); None for an endless stream.
    keys : int
        Number of distinct ``user_id`` values.
    skew : Mapping[int, float]
        Per-channel factor on rate and bound.
    state_dir : str
        Folder where the stream's start time is kept.
    """

    name = "rate"

    def __init__(
        self,
        channels: int,
        rows_per_second: float,
        rows_per_channel: int | None,
        keys: int,
        skew: Mapping[int, float],
        state_dir: str,
    ) -> None:
        if rows_per_second <= 0 and rows_per_channel is None:
            raise ConfigError(
                f"option {ROWS_PER_SECOND.name!r} is 0 but {ROWS_PER_CHANNEL.name!r} is not "
                "set: the rate upstream would produce an infinite burst; set one of them"
            )
        self.channels = channels
        self.rows_per_second = rows_per_second
        self.rows_per_channel = rows_per_channel
        self.keys = keys
        self.skew = dict(skew)
        self.state_dir = state_dir
        self._start_s: float | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str], state_dir: str) -> RateUpstream:
        """Build from source options (:data:`~barriered.datasource.upstreams.options.
        UPSTREAM_OPTIONS` of ``rate``)."""
        channels = CHANNELS.read_int(options) or DEFAULT_CHANNELS
        rate = ROWS_PER_SECOND.read_float(options)
        keys = KEYS.read_int(options)
        assert rate is not None and keys is not None  # declared with defaults
        skew = parse_channel_factors(SKEW.read_str(options) or "", SKEW.name, channels)
        rows_per_channel = ROWS_PER_CHANNEL.read_int(options)
        return cls(channels, rate, rows_per_channel, keys, skew, state_dir)

    def schema(self) -> pa.Schema:
        return SCHEMA

    def channel_count(self) -> int:
        return self.channels

    def is_finite(self) -> bool:
        return self.rows_per_channel is not None

    def check_available_now(self) -> None:
        """Refuse ``availableNow`` with ``rowsPerSecond > 0``: the records appear over time
        from the stream's first start, so such a run would end at once with what little
        existed at its start (none on a first run)."""
        if self.rows_per_second > 0:
            raise ConfigError(
                f"upstream 'rate' with option {ROWS_PER_SECOND.name!r} = "
                f"{self.rows_per_second:g} produces its records over time, so a "
                "trigger(availableNow=True) run would end at once with none: set "
                f"{ROWS_PER_SECOND.name!r} to 0 and {ROWS_PER_CHANNEL.name!r} to the records "
                "per channel (all available at once), or use a processingTime trigger"
            )

    def _bound(self, channel: int) -> float:
        if self.rows_per_channel is None:
            return math.inf
        return math.floor(self.rows_per_channel * self.skew.get(channel, 1.0))

    def _start(self) -> float:
        if self._start_s is None:
            path = join(self.state_dir, "rate_start.json")
            saved = read_json(path, default=None)
            if saved is None:
                saved = {"start_s": time.time()}
                write_json(path, saved)
            self._start_s = float(saved["start_s"])
        return self._start_s

    def available(self) -> list[int]:
        if self.rows_per_second <= 0:
            return [int(self._bound(c)) for c in range(self.channels)]
        elapsed = max(0.0, time.time() - self._start())
        out = []
        for c in range(self.channels):
            produced = math.floor(elapsed * self.rows_per_second * self.skew.get(c, 1.0))
            out.append(int(min(produced, self._bound(c))))
        return out

    def read(self, channel: int, start: int, end: int) -> pa.Table:
        seqs = range(start, end)
        users = [f"user-{record_key(channel, s, self.keys)}" for s in seqs]
        amounts = [record_amount(channel, s) for s in seqs]
        return pa.table({"user_id": users, "amount": amounts}, schema=SCHEMA)

    def describe(self) -> Mapping[str, object]:
        return {
            UPSTREAM.name: self.name,
            CHANNELS.name: self.channels,
            ROWS_PER_SECOND.name: self.rows_per_second,
            ROWS_PER_CHANNEL.name: self.rows_per_channel,
            KEYS.name: self.keys,
            SKEW.name: {str(k): v for k, v in self.skew.items()},
        }
