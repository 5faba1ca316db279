"""Schema evolution of keyed state: what a restore may change in an operator's state.

A processor whose ``state_schema`` differs from the snapshot's operator restores without
a manual transform when every difference is one of:

* a field was **added**: restored keys get the processor's default for it
  (``state_defaults = {"field": value}`` on the processor), else null;
* a field was **removed**: its restored values are dropped;
* a field's type was **widened** losslessly (``tinyint`` -> ``smallint`` -> ``int`` ->
  ``bigint``, ``float`` -> ``double``, an integer of at most 32 bits -> ``double``): the
  restored values are cast. Only into a new snapshot path: the ``state`` table of the
  snapshot's own path keeps the old column type.

Anything else (a key column or key type changed, a narrowing or a cast that can fail or
lose values such as ``string`` -> ``bigint`` or ``bigint`` -> ``int``) is refused,
naming the operator and the field, before anything is written; a transform
(:func:`barriered.state_processor.transform`) changes such state offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from barriered.errors import ConfigError

_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` converts to ``new`` exactly (a lossless widening)."""
    if old == new:
        return True
    if old in _INTS and new in _INTS:
        return _INTS.index(old) < _INTS.index(new)
    if new == pa.float64():
        return old == pa.float32() or old in _INTS[:3]
    return False


@dataclass(frozen=True)
class Evolution:
    """The differences between a snapshot's state fields and a processor's.

    Attributes
    ----------
    added, removed : tuple of str
        Fields only the processor has / only the snapshot has.
    widened : tuple of (str, str, str)
        ``(field, old type, new type)`` cast on restore.
    refused : tuple of str
        One sentence per change a restore cannot make (empty: compatible).
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    widened: tuple[tuple[str, str, str], ...] = ()
    refused: tuple[str, ...] = field(default=())

    @property
    def changed(self) -> bool:
        """Whether the state schemas differ at all."""
        return bool(self.added or self.removed or self.widened or self.refused)


def compare(old: pa.Schema, new: pa.Schema) -> Evolution:
    """Compare the state fields of the snapshot (``old``) and of the processor (``new``)."""
    added = tuple(f.name for f in new if f.name not in old.names)
    removed = tuple(f.name for f in old if f.name not in new.names)
    widened, refused = [], []
    for f in new:
        if f.name not in old.names:
            continue
        before = old.field(f.name).type
        if before == f.type:
            continue
        if widens(before, f.type):
            widened.append((f.name, str(before), str(f.type)))
        else:
            refused.append(
                f"field {f.name!r} was {before}, now {f.type}: not a lossless widening, so "
                "restored values could fail to convert or change"
            )
    return Evolution(added, removed, tuple(widened), tuple(refused))


def check_defaults(defaults: Mapping[str, Any], state: pa.Schema, operator: str) -> None:
    """Refuse ``state_defaults`` naming an unknown field or a value its type cannot hold.

    Raises
    ------
    ConfigError
        Naming the operator, the field and its type. Nothing is written.
    """
    for name, value in defaults.items():
        if name not in state.names:
            raise ConfigError(
                f"operator {operator!r}: state_defaults names {name!r}, which is not a field "
                f"of its state_schema ({', '.join(state.names)}); nothing was written"
            )
        try:
            pa.array([value], state.field(name).type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"operator {operator!r}: the default {value!r} of field {name!r} is not a "
                f"{state.field(name).type} ({exc}); nothing was written"
            ) from None


def conform(table: pa.Table, schema: pa.Schema, defaults: Mapping[str, Any]) -> pa.Table:
    """``table`` (restored state of an older schema) as ``schema``: removed fields dropped,
    added ones filled with their default (or null), widened ones cast."""
    columns = []
    for f in schema:
        if f.name in table.column_names:
            columns.append(table[f.name].cast(f.type))
        else:
            columns.append(pa.array([defaults.get(f.name)] * table.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)
