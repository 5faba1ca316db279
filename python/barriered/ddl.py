"""Column lists written as Spark DDL (``"id long, price decimal(10,2)"``), read without Spark.

Used where no Spark session is at hand: the ``schema`` option of the ``files`` upstream and
the key columns an operator records for the command line's key lookups.
"""

from __future__ import annotations

from barriered.errors import ConfigError

__all__ = ["columns"]


def columns(ddl: str, what: str) -> list[tuple[str, str]]:
    """Split a DDL column list into ``(name, type)`` pairs.

    Commas split columns only at the top level (not those of ``decimal(10,2)`` or
    ``struct<a:int,b:int>``); names may be quoted with backticks; types are lower-cased
    and keep their clauses (``string collate utf8_lcase``).

    Parameters
    ----------
    ddl : str
        E.g. ``"id long, name string"``.
    what : str
        What holds the list, for the error message (e.g. ``"option 'schema'"``).

    Raises
    ------
    ConfigError
        When a part is not ``name type``, or a name appears twice.
    """
    pairs: list[tuple[str, str]] = []
    for part in _top_level(ddl):
        part = part.strip()
        if part.startswith("`"):
            name, _, type_name = part[1:].partition("`")
        else:
            name, _, type_name = part.partition(" ")
        type_name = type_name.strip().lower()
        if not name or not type_name:
            raise ConfigError(
                f"{what} must look like 'column type, column type' (e.g. 'id long, name "
                f"string'), got {part!r} in {ddl!r}"
            )
        if any(name == seen for seen, _ in pairs):
            raise ConfigError(f"{what}: column {name!r} appears twice in {ddl!r}")
        pairs.append((name, type_name))
    return pairs


def _top_level(text: str) -> list[str]:
    """Split ``text`` at the commas outside brackets (``()`` and ``<>``)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += (ch in "(<") - (ch in ")>")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [*parts, current]
