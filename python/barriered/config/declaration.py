"""The declaration of one setting, :class:`ConfigKey`, and how its values are parsed.

Every setting of spark-barriered, a ``spark.sql.streaming.barriered.*`` session key
(:mod:`barriered.config.keys`) or an option of the source, an upstream or the sink, is
one :class:`ConfigKey`: its name, type, default, doc, bounds and whether a restore may
change it. Parsing, validation, the "did you mean" of unknown names, the error messages
and the reference tables of ``docs/configuration.md`` all read the declaration.

Values are strings, as in Spark's conf:

* durations: ``500ms``, ``10s``, ``1.5s``, ``2min``, ... (:mod:`barriered.durations`);
* sizes: ``512k``, ``64m``, ``10g`` (binary units, as Spark's byte strings), or bytes;
* booleans: ``true`` / ``false`` (any case);
* integers: decimal digits with an optional sign; floats: a decimal number;
* enums: one of the choices, any case (the canonical spelling is kept).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from barriered.durations import DURATION_FORMS, duration_ms, format_duration
from barriered.errors import ConfigError

__all__ = ["PREFIX", "ConfigKey", "ConfigValue", "ValueType", "lookup"]

#: Prefix of every session configuration key of spark-barriered.
PREFIX = "spark.sql.streaming.barriered."

ValueType = Literal[
    "duration", "bytes", "int", "float", "bool", "enum", "str", "path", "json", "prefix"
]
"""The type of a value (durations are parsed to milliseconds, sizes to bytes; ``prefix``
declares a family of options under the name, passed on to a client unparsed)."""

ConfigValue = int | float | bool | str | None
"""A parsed value: ``int`` (ints, durations in ms), ``float``, ``bool``, ``str``."""

_INT_RE = re.compile(r"^[+-]?\d+$")
_BYTES_RE = re.compile(r"^(\d+)\s*([kmgt]?)b?$", re.IGNORECASE)
_BYTE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
BYTES_FORMS = "a size such as 512k, 64m or 10g (binary units), or a number of bytes"


def byte_count(text: str) -> int:
    """The bytes of a size (``64m``, ``10g``, ``4096``).

    Raises
    ------
    ValueError
        When ``text`` is not a size.
    """
    found = _BYTES_RE.match(text.strip())
    if found is None:
        raise ValueError("not a size")
    return int(found.group(1)) * _BYTE_UNITS[found.group(2).lower()]


def format_bytes(count: int) -> str:
    """``count`` bytes in the largest binary unit that divides it (``64m``)."""
    for unit in ("t", "g", "m", "k"):
        if count and count % _BYTE_UNITS[unit] == 0:
            return f"{count // _BYTE_UNITS[unit]}{unit}"
    return str(count)


@dataclass(frozen=True)
class ConfigKey:
    """The declaration of one setting: a session key or an option.

    Parameters
    ----------
    name : str
        The name without :data:`PREFIX`, e.g. ``"checkpointInterval"``; a session key's
        per-source option has the same name.
    type : {"duration", "bytes", "int", "float", "bool", "enum", "str", "path", "json", "prefix"}
        How the string value is parsed (durations to milliseconds, sizes to bytes).
    default : str or None
        The default as a string, like Spark's ``createWithDefaultString``; ``None`` if
        there is none (the component that needs a value says so).
    doc : str
        One or two sentences for the reference table.
    field : str, default ""
        The :class:`~barriered.config.BarrieredConf` field of a session key.
    choices : tuple of str, default ()
        The canonical spellings of an ``enum``.
    min_value, max_value : int or None, default None
        Inclusive bounds of an ``int`` or ``float``, of a ``duration`` in milliseconds, or
        of a size in bytes.
    restore_may_change : bool, default True
        Whether a restore may use another value than the snapshot was taken with.
    owner : str, default ""
        ``""`` for a session key; else what the option belongs to, as error messages
        name it, e.g. ``"source option"`` or ``"rate upstream option"``.
    default_doc : str or None, default None
        The reference table's default when it is computed rather than a fixed value.
    """

    name: str
    type: ValueType
    default: str | None
    doc: str
    field: str = ""
    choices: tuple[str, ...] = ()
    min_value: int | None = None
    max_value: int | None = None
    restore_may_change: bool = True
    owner: str = ""
    default_doc: str | None = None

    def __post_init__(self) -> None:
        if self.type == "enum" and not self.choices:
            raise ValueError(f"enum key {self.name} declares no choices")
        if self.default is not None:
            self.parse(self.default)  # a declaration with a bad default is a bug

    @property
    def key(self) -> str:
        """The full session key (``spark.sql.streaming.barriered.<name>``), or an
        option's name."""
        return self.name if self.owner else PREFIX + self.name

    @property
    def where(self) -> str:
        """How error messages name this setting: the full key, or its owner and quoted
        name (e.g. source option and the name)."""
        return f"{self.owner} {self.name!r}" if self.owner else self.key

    @property
    def default_value(self) -> ConfigValue:
        """The parsed default (``None`` if there is none)."""
        return None if self.default is None else self.parse(self.default)

    def accepted_forms(self) -> str:
        """Describe the values this setting accepts, for error messages.

        Returns
        -------
        str
            E.g. ``"one of exactlyOnce, atLeastOnce (any case)"``.
        """
        if self.type == "duration":
            return DURATION_FORMS + self.range_text()
        if self.type == "bytes":
            return BYTES_FORMS + self.range_text()
        if self.type in ("int", "float"):
            return ("an integer" if self.type == "int" else "a number") + self.range_text()
        if self.type == "bool":
            return "true or false"
        if self.type == "enum":
            return f"one of {', '.join(self.choices)} (any case)"
        if self.type == "json":
            return 'a JSON object of strings, e.g. {"AWS_REGION": "eu-west-1"}'
        return "a non-empty path" if self.type == "path" else "a non-empty string"

    def range_text(self) -> str:
        """The declared bounds as text, e.g. ``", at least 10ms"`` (``""`` if none)."""
        fmt = {"duration": format_duration, "bytes": format_bytes}.get(self.type, str)
        lo, hi = self.min_value, self.max_value
        if lo is not None and hi is not None:
            return f", from {fmt(lo)} to {fmt(hi)}"
        if lo is not None:
            return f", at least {fmt(lo)}"
        if hi is not None:
            return f", at most {fmt(hi)}"
        return ""

    def parse(self, raw: object, origin: str | None = None) -> ConfigValue:
        """Parse and validate one value of this setting.

        Parameters
        ----------
        raw : object
            The value, normally a string; ``bool`` and ``int`` are accepted too.
        origin : str, optional
            How the value was set, for the error message; :attr:`where` by default,
            e.g. "source option" and the quoted name.

        Returns
        -------
        int, float, bool or str
            Milliseconds for durations, ``int``, ``float``, ``bool``, the canonical enum
            spelling, or the stripped string/path.

        Raises
        ------
        ConfigError
            Naming ``origin``, the bad value and the accepted forms.
        """
        where = origin or self.where
        text = (str(raw).lower() if isinstance(raw, bool) else str(raw)).strip()

        def bad(reason: str) -> ConfigError:
            shown = "(not shown: it may hold credentials)" if self.type == "json" else repr(raw)
            return ConfigError(
                f"{where}: invalid value {shown} ({reason}); expected {self.accepted_forms()}"
            )

        amount = {"duration": duration_ms, "bytes": byte_count}.get(self.type)
        if amount is not None:  # milliseconds, or bytes
            try:
                parsed = amount(text)
            except ValueError as exc:
                raise bad(str(exc)) from None
            self.check_range(parsed, where, raw)
            return parsed
        if self.type == "int":
            if not _INT_RE.match(text):
                raise bad("not an integer")
            number = int(text)
            self.check_range(number, where, raw)
            return number
        if self.type == "float":
            try:
                real = float(text)
            except ValueError:
                raise bad("not a number") from None
            if not math.isfinite(real):
                raise bad("not a finite number")
            self.check_range(real, where, raw)
            return real
        if self.type == "bool":
            if text.lower() not in ("true", "false"):
                raise bad("not a boolean")
            return text.lower() == "true"
        if self.type == "enum":
            for choice in self.choices:
                if choice.lower() == text.lower():
                    return choice
            raise bad("not one of the choices")
        if self.type == "json":
            try:
                parsed = json.loads(text or "{}")
            except ValueError:
                raise bad("not JSON") from None
            if not isinstance(parsed, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()
            ):
                raise bad("not an object of string values")
            return json.dumps(parsed, sort_keys=True)
        if not text:
            raise bad("empty")
        return text

    def check_range(self, value: float, where: str | None = None, raw: object = None) -> None:
        """Raise if ``value`` lies outside the declared bounds.

        Parameters
        ----------
        value : int or float
            A parsed value (milliseconds for a duration).
        where : str, optional
            How the message names the setting (:attr:`where` by default).
        raw : object, optional
            The value as given, quoted by the message (``value`` by default).

        Raises
        ------
        ConfigError
            Naming the setting, the value and the declared bounds.
        """
        if not self.in_range(value):
            shown = value if raw is None else raw
            raise ConfigError(
                f"{where or self.where}: value {shown!r} is out of range; expected "
                f"{self.accepted_forms()}"
            )

    def in_range(self, value: float) -> bool:
        """Whether ``value`` lies within the declared bounds (inclusive)."""
        lo, hi = self.min_value, self.max_value
        return (lo is None or value >= lo) and (hi is None or value <= hi)

    def format(self, value: ConfigValue) -> str:
        """Format a parsed value as a string that :meth:`parse` reads back.

        Parameters
        ----------
        value : int, float, bool, str or None
            A parsed value of this setting.

        Returns
        -------
        str
            E.g. ``"10s"``, ``"true"``, ``"exactlyOnce"``; ``""`` for ``None``.
        """
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if self.type == "duration" and isinstance(value, int):
            return format_duration(value)
        if self.type == "bytes" and isinstance(value, int):
            return format_bytes(value)
        return str(value)

    # -- reading an option from a source's or sink's options --------------------------

    def given(self, options: Mapping[str, str]) -> str | None:
        """This option's value in ``options`` (names in any case), stripped; None when it
        is absent or blank."""
        raw = lookup(options, self.name)
        return None if raw is None or not str(raw).strip() else str(raw).strip()

    def read(self, options: Mapping[str, str]) -> ConfigValue:
        """This option's parsed value in ``options`` (names in any case), or its
        default when it is absent or blank.

        Raises
        ------
        ConfigError
            For a bad value (see :meth:`parse`).
        """
        raw = self.given(options)
        return self.default_value if raw is None else self.parse(raw)

    def read_int(self, options: Mapping[str, str]) -> int | None:
        """:meth:`read` of an ``int``, ``duration`` or ``bytes`` option."""
        value = self.read(options)
        assert value is None or (isinstance(value, int) and not isinstance(value, bool))
        return value

    def read_float(self, options: Mapping[str, str]) -> float | None:
        """:meth:`read` of a ``float`` option."""
        value = self.read(options)
        assert value is None or isinstance(value, float)
        return value

    def read_bool(self, options: Mapping[str, str]) -> bool:
        """:meth:`read` of a ``bool`` option (with a default)."""
        value = self.read(options)
        assert isinstance(value, bool)
        return value

    def read_str(self, options: Mapping[str, str]) -> str | None:
        """:meth:`read` of a ``str``, ``path`` or ``enum`` option."""
        value = self.read(options)
        assert value is None or isinstance(value, str)
        return value


def lookup(options: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name`` in ``options``, matching names in any case."""
    if name in options:
        return options[name]
    lower = name.lower()
    for given, value in options.items():
        if str(given).lower() == lower:
            return value
    return None
