"""The merge of one call's rows into the keyed state, vectorized.

The state is one Arrow table: the key columns and the state fields, one row per key.
The keyed operator runs once per Spark partition's key groups and micro-batch and hands
the partition's rows and the state of the keys present in them to the processor in one call,
:meth:`BatchProcessor.process_batch`, and
merges what it returns back into the table with a few pandas operations (no per-key
work outside the processor). A processor that implements only the per-key
``process(key, rows, state)`` runs through :class:`PerKey`, on the same merge.

The contract of ``process_batch(rows, state) -> (output, new_state)``:

* ``rows``: every data row of the partition's key groups in this micro-batch, in
  ``(_channel, _seq)`` order, with the stream's own columns (no ``_channel``/``_seq``/
  ``_barrier`` columns);
* ``state``: one row per key of ``rows`` that has state (key columns and state fields;
  a key without state has no row);
* ``output``: the rows to emit, or None: a DataFrame with exactly the columns of
  ``output_schema`` (a missing or undeclared column is refused, not committed NULL);
* ``new_state``: the new state of the keys of ``rows`` (key columns and state fields,
  one row per key, each value of its declared type): it replaces theirs; a key of
  ``rows`` missing from it loses its state; a key that is not in ``rows`` may be added
  too. Keys not in ``rows`` and not in ``new_state`` keep their state untouched. A key
  held twice is refused, naming the key.

State fields may be of any type Spark SQL offers that Delta stores (numbers, strings,
booleans, binary, date, timestamp, timestamp_ntz, decimal, arrays, maps, structs). In
``state`` they are what pandas makes of Arrow: an array a numpy array, a map a list of
``(key, value)`` pairs, a struct a dict, a timestamp a ``pandas.Timestamp``;
``new_state`` may hold the same, or lists and dicts. The per-key ``process`` gets
Python values (an array a list, a map and a struct a dict).

A processor that breaks the contract (no tuple returned, a wrong column, a value its
declared type cannot hold, a key twice) fails the query with a
:class:`~barriered.errors.ProcessorError` naming the processor, its operator, the method
and the contract (:mod:`barriered.statestore.contract`); nothing of the batch is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from barriered.statestore.contract import Contract

log = logging.getLogger(__name__)


class BatchProcessor(Protocol):
    """A keyed processor called once per Spark partition's key groups and micro-batch.

    Attributes
    ----------
    state_schema : str
        DDL of the per-key state, e.g. ``"total long, count long"``.
    output_schema : str
        DDL of the output rows.
    """

    state_schema: str
    output_schema: str

    def process_batch(
        self, rows: pd.DataFrame, state: pd.DataFrame
    ) -> tuple[pd.DataFrame | None, pd.DataFrame]:
        """Return the output rows and the new state of the keys of ``rows`` (the
        contract: this module's docstring; a breach is a ``ProcessorError``)."""
        ...


def key_index(frame: pd.DataFrame, keys: list[str]) -> pd.Index:
    """The keys of ``frame`` (its ``keys`` columns) as an index."""
    if len(keys) == 1:
        return cast(pd.Index, pd.Index(frame[keys[0]]))
    return cast(pd.Index, pd.MultiIndex.from_arrays([frame[k] for k in keys]))


def _has_key(table: pa.Table, frame: pd.DataFrame, keys: list[str]) -> pa.ChunkedArray:
    """Whether each row of ``table`` has one of the keys of ``frame``."""
    if len(keys) == 1:
        key = keys[0]
        values = pa.array(frame[key].unique(), table.schema.field(key).type, from_pandas=True)
        return pc.is_in(table[key], value_set=values)
    index = key_index(table.select(keys).to_pandas(), keys)
    return pa.chunked_array([pa.array(index.isin(key_index(frame, keys)))])


def merge(
    state: pa.Table,
    rows: pd.DataFrame,
    processor: BatchProcessor,
    contract: Contract,
    locate: Callable[[pa.Table, pa.Table], pa.Table] | None = None,
) -> tuple[pd.DataFrame | None, pa.Table]:
    """Run ``processor`` on one call's ``rows`` and return its output and new state.

    Only the state of the keys present in ``rows`` is converted to pandas; the rest of
    the state stays Arrow and is carried over as it is.

    Parameters
    ----------
    state : pyarrow.Table
        The key group's state (key columns, state fields: ``contract.state``).
    rows : pandas.DataFrame
        The key group's data rows of this micro-batch, in order.
    processor : BatchProcessor
        The user's processor (a per-key one wrapped in :class:`PerKey`).
    contract : Contract
        What it must return (its key columns, state schema and output columns).
    locate : callable, optional
        When ``state`` has columns beyond ``contract.state`` (the keyed operator's
        ``_key_group``): ``locate(new, old)`` returns the processor's new state ``new``
        with those columns added, ``old`` being the previous state rows (all columns) of
        the keys of ``rows`` and of keys ``new`` replaces.

    Returns
    -------
    tuple
        The output frame (or None) and the new state table.

    Raises
    ------
    ProcessorError
        When the processor broke its contract (see the module's docstring).
    """
    keys = list(contract.keys)
    if state.num_rows:
        present = _has_key(state, rows, keys)
        given, kept = state.filter(present), state.filter(pc.invert(present))
    else:
        given, kept = state, state
    shown = given if locate is None else given.select(contract.state.names)
    output, new = contract.result(processor.process_batch(rows, shown.to_pandas()))
    output = contract.check_output(output)
    table = contract.new_state(new)
    old = given
    if table.num_rows and kept.num_rows:
        # Keys of new_state outside rows replace their state as well.
        outside = _has_key(kept, new, keys)
        if locate is not None:
            old = pa.concat_tables([given, kept.filter(outside)])
        kept = kept.filter(pc.invert(outside))
    if locate is not None:
        table = locate(table, old)
    return output, pa.concat_tables([kept, table]).combine_chunks()


class KeyState:
    """The state of one key, as handed to ``process(key, rows, state)``.

    ``get()`` returns a dict (field name -> value) or None, ``update(dict)`` replaces it
    (every state field must be present), ``clear()`` removes it.
    """

    def __init__(self, value: dict[str, Any] | None, contract: Contract) -> None:
        self._value = value
        self._contract = contract
        self.changed = False

    def get(self) -> dict[str, Any] | None:
        """Return this key's state, or None when it has none."""
        return None if self._value is None else dict(self._value)

    def update(self, value: dict[str, Any]) -> None:
        """Replace this key's state with ``value`` (every state field must be present)."""
        self._value = self._contract.check_state_update(value)
        self.changed = True

    def clear(self) -> None:
        """Remove this key's state."""
        self._value = None
        self.changed = True


def python_value(value: Any, kind: pa.DataType | None = None) -> Any:
    """A value of a pandas frame made from Arrow as a plain Python value (NaN/NaT as None;
    with its Arrow type ``kind``, an array as a list, a map and a struct as a dict)."""
    if kind is not None and pa.types.is_map(kind):
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return None
        return {python_value(k, kind.key_type): python_value(v, kind.item_type) for k, v in value}
    if kind is not None and pa.types.is_struct(kind):
        if not isinstance(value, dict):
            return None
        return {f.name: python_value(value.get(f.name), f.type) for f in kind}
    if isinstance(value, (np.ndarray, list)):
        inner = kind.value_type if kind is not None and pa.types.is_list(kind) else None
        return [python_value(v, inner) for v in value]
    if value is None or (not isinstance(value, (str, bytes)) and bool(pd.isna(value))):
        return None
    return value.item() if isinstance(value, np.generic) else value


class PerKey:
    """A per-key ``process(key, rows, state)`` processor as a :class:`BatchProcessor`.

    Keys are handed over in their order of first appearance, each with its rows in
    ``(_channel, _seq)`` order.
    """

    def __init__(self, processor: Any, contract: Contract) -> None:
        self.processor = processor
        self.state_schema = processor.state_schema
        self.output_schema = processor.output_schema
        self.contract = contract

    def process_batch(
        self, rows: pd.DataFrame, state: pd.DataFrame
    ) -> tuple[pd.DataFrame | None, pd.DataFrame]:
        """Call ``process`` per key of ``rows``; collect outputs and new states."""
        keys, fields = list(self.contract.keys), self.contract.fields
        types = {f.name: f.type for f in self.contract.state}
        known: dict[tuple[Any, ...], dict[str, Any]] = {}
        for record in state.to_dict("records"):
            known[tuple(python_value(record[k]) for k in keys)] = {
                f: python_value(record[f], types[f]) for f in fields
            }
        outputs: list[pd.DataFrame] = []
        new_rows: list[dict[str, Any]] = []
        groups = rows.groupby(keys, sort=False, dropna=False).indices
        for user_key, positions in groups.items():
            key = tuple(
                python_value(v) for v in (user_key if isinstance(user_key, tuple) else (user_key,))
            )
            key_state = KeyState(known.get(key), self.contract)
            out = self.processor.process(
                key, rows.iloc[positions].reset_index(drop=True), key_state
            )
            out = self.contract.check_output(out)
            if out is not None and len(out):
                outputs.append(out)
            value = key_state.get()
            if value is not None:
                new_rows.append({**dict(zip(keys, key, strict=True)), **value})
        new = pd.DataFrame(new_rows, columns=[*keys, *fields])
        return (pd.concat(outputs, ignore_index=True) if outputs else None), new
