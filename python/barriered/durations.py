"""Durations as spark-barriered's configuration writes them: ``500ms``, ``10s``, ``2min``.

A number and a unit (``ms``, ``s``, ``m``/``min``, ``h``, ``d``, any case, optional space;
long forms such as ``seconds`` too); a bare number is milliseconds; the result must be a
whole number of milliseconds.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["DURATION_FORMS", "duration_ms", "format_duration", "parse_duration_ms"]

DURATION_FORMS = (
    "a number with a unit: '500ms', '10s', '1.5s', '2min' (or '2m'), '1h', '1d'; "
    "a bare number is milliseconds ('1500')"
)
_DURATION_RE = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*([a-z]*)$")
_UNIT_MS: dict[str, int] = {}
for _names, _ms in (
    (("", "ms", "milli", "millis", "millisecond", "milliseconds"), 1),
    (("s", "sec", "secs", "second", "seconds"), 1000),
    (("m", "min", "mins", "minute", "minutes"), 60_000),
    (("h", "hour", "hours"), 3_600_000),
    (("d", "day", "days"), 86_400_000),
):
    for _name in _names:
        _UNIT_MS[_name] = _ms


def duration_ms(text: str) -> int:
    """Parse a duration to ms; ``ValueError(reason)`` without the accepted forms."""
    match = _DURATION_RE.match(text.strip().lower())
    if match is None or match.group(2) not in _UNIT_MS:
        raise ValueError("not a duration")
    ms = Decimal(match.group(1)) * _UNIT_MS[match.group(2)]
    if ms != ms.to_integral_value():
        raise ValueError(f"{ms.normalize():f}ms is not a whole number of milliseconds")
    return int(ms)


def parse_duration_ms(text: str) -> int:
    """Parse a duration such as ``"10s"``, ``"1.5s"``, ``"2min"`` or ``"1500"`` (ms).

    Parameters
    ----------
    text : str
        A number with an optional unit (``ms``, ``s``, ``m``/``min``, ``h``, ``d``, any
        case, optional space; long forms such as ``seconds`` are also accepted).
        Without a unit the number is milliseconds.

    Returns
    -------
    int
        The duration in milliseconds.

    Raises
    ------
    ValueError
        If ``text`` is not such a duration or is not a whole number of milliseconds
        (:meth:`ConfigKey.parse` turns this into a :class:`~barriered.errors.ConfigError`
        naming the key).

    Examples
    --------
    >>> parse_duration_ms("1.5s"), parse_duration_ms("2min"), parse_duration_ms("1500")
    (1500, 120000, 1500)
    """
    try:
        return duration_ms(text)
    except ValueError as exc:
        raise ValueError(f"{exc}; expected {DURATION_FORMS}") from None


def format_duration(ms: int) -> str:
    """Format milliseconds with the largest unit that divides them exactly.

    Parameters
    ----------
    ms : int
        A duration in milliseconds.

    Returns
    -------
    str
        E.g. ``"10s"``, ``"10min"``, ``"1500ms"``, ``"0s"``; parsed back by
        :func:`parse_duration_ms` to the same value.
    """
    if ms == 0:
        return "0s"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
