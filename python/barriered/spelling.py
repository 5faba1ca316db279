"""The "did you mean" of every unknown key or option name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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
