"""Writing one keyed operator's state from a batch DataFrame, one file per key group.

The rows are grouped by ``_key_group`` (:func:`barriered.api.key_group_column`, the
expression the streaming operator groups by) and each key group's state is written on
the executor that holds it, by :func:`~barriered.statestore.acks.write_data_file`: the
columns of the ``state`` table's files (the key columns and state fields, ``key_group``,
``checkpoint_id``) in the operator's partition folder (``operator=<op>``). The driver
only collects the list of files (one row per key group) and commits them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from barriered.control.columns import KEY_GROUP
from barriered.errors import StateProcessorError
from barriered.statestore.acks import DataFile, write_data_file
from barriered.statestore.keyed import OperatorSpec, bound_processor
from barriered.statestore.state_schema import columns_schema
from barriered.statestore.vectorized import merge

log = logging.getLogger(__name__)

#: What each key group's writer returns: the file it wrote, or (``path`` null) a key
#: given more than once (``repeated``: the key as JSON, ``count``: its rows).
WRITTEN_DDL = (
    "key_group int, path string, size long, rows long, modification_time long, "
    "repeated string, count long"
)


@dataclass(frozen=True)
class KeyGroupWriter:
    """Writes the state of one key group (called by ``applyInArrow`` per group).

    Attributes
    ----------
    table_uri : str
        The ``state`` table of the savepoint.
    spec : OperatorSpec
        The operator (its key columns and state fields as registered).
    checkpoint_id : int
        The savepoint's checkpoint id (the ``checkpoint_id`` column of its files).
    processor : object or None
        None: the rows are the state (key columns and state fields, one row per key).
        Else the keyed processor that computes the state from the rows, as the
        streaming operator would from an empty state.
    """

    table_uri: str
    spec: OperatorSpec
    checkpoint_id: int
    processor: Any = None

    def state(self, rows: pa.Table) -> pa.Table:
        """The key group's state (key columns and state fields, typed) from its rows."""
        schema = columns_schema(self.spec.to_dict())
        if self.processor is None:
            return rows.select(schema.names).cast(schema)
        processor, contract = bound_processor(self.spec, self.processor)
        _, state = merge(schema.empty_table(), rows.to_pandas(), processor, contract)
        return state

    def repeated(self, rows: pa.Table) -> pa.Table | None:
        """With the state given per key: one row (``repeated``, ``count``) naming a key
        of the group that has several rows, else None. All rows of a key are in its key
        group, so this pass over the group is the whole check (no job of its own)."""
        if self.processor is not None:
            return None
        keys = list(self.spec.key_columns)
        counts = rows.select(keys).group_by(keys).aggregate([([], "count_all")])
        many = counts.filter(pc.greater(counts["count_all"], 1))
        if not many.num_rows:
            return None
        first = many.slice(0, 1).to_pylist()[0]
        key = {c: first[c] for c in keys}
        return pa.table(
            {
                "key_group": pa.array([None], pa.int32()),
                "path": pa.array([None], pa.string()),
                "size": pa.array([None], pa.int64()),
                "rows": pa.array([None], pa.int64()),
                "modification_time": pa.array([None], pa.int64()),
                "repeated": [repr(key)],
                "count": pa.array([first["count_all"]], pa.int64()),
            }
        )

    def __call__(self, key: Sequence[pa.Scalar], rows: pa.Table) -> pa.Table:
        key_group = int(key[0].as_py())
        rows = rows.drop_columns([KEY_GROUP])
        refused = self.repeated(rows)
        if refused is not None:
            return refused
        state = self.state(rows)
        written: list[DataFile] = []
        if state.num_rows:
            n = state.num_rows
            state = state.append_column("key_group", pa.array([key_group] * n, pa.int32()))
            state = state.append_column(
                "checkpoint_id", pa.array([self.checkpoint_id] * n, pa.int64())
            )
            written.append(
                write_data_file(
                    self.table_uri,
                    {"operator": self.spec.operator},
                    f"key-group-{key_group}-ckpt-{self.checkpoint_id}",
                    state,
                    distinct=self.spec.key_columns,
                )
            )
        return pa.table(
            {
                "key_group": pa.array([key_group] * len(written), pa.int32()),
                "path": [f.path for f in written],
                "size": pa.array([f.size for f in written], pa.int64()),
                "rows": pa.array([f.rows for f in written], pa.int64()),
                "modification_time": pa.array([f.modification_time for f in written], pa.int64()),
                "repeated": pa.array([None] * len(written), pa.string()),
                "count": pa.array([None] * len(written), pa.int64()),
            }
        )


def write_state(df: DataFrame, writer: KeyGroupWriter) -> list[DataFile]:
    """Write ``df`` (with its ``_key_group`` column) as the operator's state files.

    Returns
    -------
    list of DataFile
        One per key group with state, for the savepoint's ``state`` commit.

    Raises
    ------
    StateProcessorError
        When the state is given per key and a key has several rows (found while
        writing: the caller removes what was written, see
        :meth:`~barriered.state_processor.target.Target.writing`).
    """

    def write(key: Sequence[pa.Scalar], rows: pa.Table) -> pa.Table:
        return writer(key, rows)  # a function: Spark counts the arguments of what it gets

    written = df.groupBy(KEY_GROUP).applyInArrow(write, WRITTEN_DDL).collect()
    repeated = [r for r in written if r["repeated"] is not None]
    if repeated:
        raise StateProcessorError(
            f"operator {writer.spec.operator!r}: key {repeated[0]['repeated']} has "
            f"{repeated[0]['count']} rows; a key's state is one row (aggregate the rows "
            "first, or compute=True); nothing was written"
        )
    files = [
        DataFile(
            path=r["path"],
            size=int(r["size"]),
            rows=int(r["rows"]),
            partition_values={"operator": writer.spec.operator},
            modification_time=int(r["modification_time"]),
            stats=json.dumps(
                {
                    "numRecords": int(r["rows"]),
                    "minValues": {"key_group": int(r["key_group"])},
                    "maxValues": {"key_group": int(r["key_group"])},
                }
            ),
        )
        for r in written
    ]
    log.info(
        "operator %s: %d key group file(s), %d keys written to %s",
        writer.spec.operator,
        len(files),
        sum(f.rows for f in files),
        writer.table_uri,
    )
    return sorted(files, key=lambda f: f.path)
