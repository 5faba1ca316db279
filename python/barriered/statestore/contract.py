"""The keyed processor's contract, checked on every call, in the Python worker.

What ``process_batch(rows, state)`` and ``process(key, rows, state)`` must return is
described in :mod:`barriered.statestore.vectorized`. A processor that breaks it fails the
query with a :class:`~barriered.errors.ProcessorError` naming the processor, its
operator, the method and the rule, before anything of the batch is kept: its output
would otherwise be committed with a column NULL, and a key held twice in the new state
would be merged again every batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from barriered.errors import ProcessorError

#: The contract, quoted in every error.
PROCESS_BATCH = (
    "process_batch(rows, state) returns a tuple (output, new_state): output is None or a "
    "DataFrame with the columns of output_schema, new_state a DataFrame with the key "
    "columns and the state fields, one row per key"
)
PROCESS = (
    "process(key, rows, state) returns None or a DataFrame with the columns of "
    "output_schema, and keeps the key's state with state.update({field: value, ...}) "
    "(every field of state_schema) or state.clear()"
)


@dataclass(frozen=True)
class Contract:
    """What one keyed operator's processor must return.

    Attributes
    ----------
    processor : str
        The processor's class name.
    operator : str
        The operator id on the snapshot path.
    method : str
        ``process_batch`` or ``process``: the method the user wrote.
    keys : tuple of str
        The key columns.
    state : pyarrow.Schema
        Key columns, then state fields, as their declared types.
    output : tuple of str
        The columns of ``output_schema`` (empty: not checked).
    """

    processor: str
    operator: str
    method: str
    keys: tuple[str, ...]
    state: pa.Schema
    output: tuple[str, ...] = ()

    @property
    def fields(self) -> list[str]:
        """The state fields (the state schema without the key columns)."""
        return [str(n) for n in self.state.names[len(self.keys) :]]

    def error(self, problem: str) -> ProcessorError:
        """The error for ``problem``, naming the processor, the method and the contract."""
        rule = PROCESS_BATCH if self.method == "process_batch" else PROCESS
        return ProcessorError(
            f"processor {self.processor} (operator {self.operator!r}): {self.method}() "
            f"{problem}. The contract: {rule}"
        )

    def result(self, result: Any) -> tuple[pd.DataFrame | None, pd.DataFrame]:
        """Check the shape of what ``process_batch`` returned: ``(output, new_state)``."""
        if not isinstance(result, tuple) or len(result) != 2:
            raise self.error(f"returned {_kind(result)}, not a tuple (output, new_state)")
        output, new = result
        if not isinstance(new, pd.DataFrame):
            raise self.error(
                f"returned {_kind(new)} as new_state, not a DataFrame (an empty one with the "
                "key columns and state fields removes the state of every key of rows)"
            )
        return output, new

    def check_output(self, output: Any) -> pd.DataFrame | None:
        """Check an output frame: None, or a DataFrame with exactly ``output_schema``'s
        columns (a missing one would be committed NULL in every row)."""
        if output is None:
            return None
        if not isinstance(output, pd.DataFrame):
            raise self.error(f"returned {_kind(output)} as output, not a DataFrame or None")
        if not self.output:
            return output
        columns = [str(c) for c in output.columns]
        missing = [c for c in self.output if c not in columns]
        extra = [c for c in columns if c not in self.output]
        if missing or extra:
            problems = []
            if missing:
                problems.append(f"lacks output column(s) {missing}")
            if extra:
                problems.append(f"has column(s) {extra} that output_schema does not declare")
            raise self.error(
                f"returned output that {' and '.join(problems)} (output_schema: "
                f"{list(self.output)})"
            )
        return output

    def new_state(self, new: pd.DataFrame) -> pa.Table:
        """``new_state`` as an Arrow table of the state schema, checked: every key column
        and state field present, each value of its declared type, each key once."""
        missing = [c for c in self.state.names if c not in new.columns]
        if missing:
            raise self.error(
                f"returned a new_state without the column(s) {missing} (it needs the key "
                f"columns {list(self.keys)} and the state fields {self.fields})"
            )
        arrays = []
        for f in self.state:
            try:
                arrays.append(pa.array(new[f.name], f.type, from_pandas=True))
            except (pa.ArrowException, TypeError, ValueError) as exc:
                raise self.error(
                    f"returned a new_state whose column {f.name!r} does not hold {f.type} "
                    f"values as declared ({type(exc).__name__}: {exc})"
                ) from None
        table = pa.Table.from_arrays(arrays, schema=self.state)
        keys = list(self.keys)
        index = pd.Index(new[keys[0]]) if len(keys) == 1 else pd.MultiIndex.from_frame(new[keys])
        if not index.is_unique:  # the fast check; the details only for the message
            twice = new.duplicated(keys, keep=False)
            if twice.any():
                first = new.loc[twice[twice].index[0], keys]
                key = dict(zip(self.keys, (_plain(v) for v in first), strict=True))
                raise self.error(
                    f"returned a new_state that holds the key {key} {int(twice.sum())} times "
                    "(each key's state is one row)"
                )
        return table

    def check_state_update(self, value: Any) -> dict[str, Any]:
        """Check ``state.update(value)`` of ``process``: a mapping with every state field."""
        if not isinstance(value, dict):
            raise self.error(f"called state.update() with {_kind(value)}, not a dict")
        missing = [f for f in self.fields if f not in value]
        if missing:
            raise self.error(f"called state.update() without the state field(s) {missing}")
        return {f: value[f] for f in self.fields}


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"a {type(value).__name__}"


def _plain(value: Any) -> Any:
    """A key value for a message (numpy scalars as Python values)."""
    return value.item() if isinstance(value, np.generic) else value
