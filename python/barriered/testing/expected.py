"""What a keyed state must hold, computed in batch from an upstream's own records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from barriered.datasource.upstreams.base import Upstream


def running_totals(
    upstream: Upstream, ends: Mapping[int, int], key: str = "user_id", value: str = "amount"
) -> dict[str, int]:
    """Sum of ``value`` per ``key`` over the records of each channel ``c`` before ``ends[c]``.

    This is the state :class:`barriered.examples.RunningTotals` holds (its ``total``)
    after exactly those records, so a snapshot whose barrier positions are ``ends`` must
    equal it.

    Parameters
    ----------
    upstream : Upstream
        The upstream the query read (any replayable one).
    ends : mapping of int to int
        The end position per channel (channels not named contribute nothing).
    key, value : str
        The key and the summed column.
    """
    totals: Counter[str] = Counter()
    for channel, end in ends.items():
        table = upstream.read(channel, 0, end)
        for k, v in zip(table[key].to_pylist(), table[value].to_pylist(), strict=True):
            totals[k] += v
    return dict(totals)
