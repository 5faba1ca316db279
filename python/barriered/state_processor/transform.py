"""Transform: one keyed operator's state of a checkpoint, changed by a user function,
written as a new savepoint.

The operator's state at the checkpoint is read as a DataFrame (its key columns and state
fields, the files of the checkpoint's ``state`` version, read by Spark on the executors).
The user's function returns the new state: rows filtered, values fixed, fields added,
removed or cast. Its key columns must keep their names and types (a key's key group is
computed from them). The savepoint is the checkpoint's :func:`savepoint export
<barriered.statestore.savepoints.export>` with that operator's registration and files
replaced; every other operator, the Spark operators' stores, the barrier positions, the
in-flight records and the upstream's manifest are copied unchanged. The origin is only
read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from barriered.api import key_group_column
from barriered.control.columns import KEY_GROUP
from barriered.errors import StateProcessorError
from barriered.files.fileio import join
from barriered.state_processor.target import Target
from barriered.state_processor.writer import KeyGroupWriter, write_state
from barriered.statestore.acks import DataFile
from barriered.statestore.dv_files import vector_rows
from barriered.statestore.keyed import OperatorSpec
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import RestorePoint, resolve
from barriered.statestore.savepoints import Savepoint, export
from barriered.statestore.state_schema import struct_schema

log = logging.getLogger(__name__)


def registered_operator(point: RestorePoint, operator: str) -> dict[str, Any]:
    """The registration of keyed operator ``operator`` on the checkpoint's path.

    Raises
    ------
    StateProcessorError
        Naming the operators there. Nothing is written.
    """
    found = point.operators()
    if operator not in found:
        raise StateProcessorError(
            f"{point.describe()} has no keyed operator {operator!r} (its operators: "
            f"{sorted(found) or 'none'}); nothing was written"
        )
    return found[operator]


def read_state(spark: SparkSession, point: RestorePoint, operator: str) -> DataFrame:
    """The operator's state at ``point``: its key columns and state fields, one row per key."""
    registration = registered_operator(point, operator)
    schema = StructType.fromJson(
        {
            "type": "struct",
            "fields": [*registration["key_type"]["fields"], *registration["state_type"]["fields"]],
        }
    )
    files = [f for f in point.state_files(operator) if f.live_rows > 0]
    if not files:
        return spark.createDataFrame([], schema)
    df = spark.read.schema(schema).parquet(*[join(point.origin.state_table, f.path) for f in files])
    table = point.origin.state_table
    deleted = [
        (
            f.path.rsplit("/", 1)[-1],
            vector_rows(f.dv, table, f"data file {f.path!r} of {point.describe()}"),
        )
        for f in files
        if f.dv is not None
    ]
    if not deleted:
        return df
    # rows a file's deletion vector deleted are not the checkpoint's state (Spark reads
    # Parquet files without Delta: the rows are dropped by their file and row index)
    gone = pd.DataFrame(
        {
            "__file": np.concatenate([np.full(len(rows), name, object) for name, rows in deleted]),
            "__row": np.concatenate([rows for _, rows in deleted]),
        }
    )
    rows = df.select(
        "*",
        F.col("_metadata.file_name").alias("__file"),
        F.col("_metadata.row_index").alias("__row"),
    )
    return rows.join(spark.createDataFrame(gone), ["__file", "__row"], "left_anti").drop(
        "__file", "__row"
    )


@dataclass(frozen=True)
class _Replaced:
    """The :class:`~barriered.statestore.savepoints.Rewrite` of a transform."""

    operator: str
    registration: dict[str, Any]
    df: DataFrame
    spec: OperatorSpec

    def write(self, out: SnapshotLayout, checkpoint_id: int) -> list[DataFile]:
        keys = self.spec.key_columns
        df = self.df.withColumn(KEY_GROUP, key_group_column(keys, self.spec.max_parallelism))
        return write_state(df, KeyGroupWriter(out.state_table, self.spec, checkpoint_id))


def _new_registration(old: dict[str, Any], new: DataFrame, where: str) -> dict[str, Any]:
    """The operator's registration with the state fields of ``new``.

    Raises
    ------
    StateProcessorError
        When a key column is missing or changed its type.
    """
    keys = [f["name"] for f in old["key_type"]["fields"]]
    key_type = StructType.fromJson(old["key_type"])
    for field in key_type.fields:
        if field.name not in new.columns:
            raise StateProcessorError(
                f"transform of operator {old['operator']!r} of {where}: the result has no key "
                f"column {field.name!r} (columns: {', '.join(new.columns)}); the key columns "
                f"{keys} must stay as they are; nothing was written"
            )
        now = new.schema[field.name].dataType
        if now != field.dataType:
            raise StateProcessorError(
                f"transform of operator {old['operator']!r} of {where}: key column "
                f"{field.name!r} was {field.dataType.simpleString()}, the result has "
                f"{now.simpleString()}; a key column's type decides its key group and must "
                "stay the same; nothing was written"
            )
    fields = [
        StructField(f.name, f.dataType, True) for f in new.schema.fields if f.name not in keys
    ]
    state_type = StructType(fields)
    registration = {
        **old,
        "state_schema": ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in fields),
        "state_type": state_type.jsonValue(),
    }
    try:
        struct_schema(registration["state_type"])
    except Exception as exc:
        raise StateProcessorError(
            f"transform of operator {old['operator']!r} of {where}: the new state {exc}; "
            "nothing was written"
        ) from None
    return registration


def transform(
    spark: SparkSession,
    snapshot: str,
    path: str,
    operator: str,
    function: Callable[[DataFrame], DataFrame],
    checkpoint: int | None = None,
) -> Savepoint:
    """Write ``function`` applied to one operator's state as a new savepoint (see
    :func:`barriered.state_processor.transform`)."""
    origin = SnapshotLayout.existing(snapshot)
    point = resolve(origin, "latest" if checkpoint is None else str(checkpoint), None)
    target = Target.empty(path)
    old = registered_operator(point, operator)
    new = function(read_state(spark, point, operator))
    if not isinstance(new, DataFrame):
        raise StateProcessorError(
            f"transform of operator {operator!r}: the function returned {type(new).__name__}, "
            "not a DataFrame; nothing was written"
        )
    registration = _new_registration(old, new, point.describe())
    spec = OperatorSpec(
        operator=operator,
        key_columns=tuple(registration["key_columns"]),
        key_schema=str(registration["key_schema"]),
        state_schema=str(registration["state_schema"]),
        output_schema=str(registration["output_schema"]),
        max_parallelism=int(registration["max_parallelism"]),
        key_type=StructType.fromJson(registration["key_type"]).json(),
        state_type=StructType.fromJson(registration["state_type"]).json(),
    )
    rewrite = _Replaced(operator, registration, new, spec)
    with target.writing():
        saved = export(origin, point.checkpoint_id, target.layout.root, rewrite=rewrite)
    log.info(
        "transform of operator %s of %s written to %s (state schema '%s')",
        operator,
        point.describe(),
        saved.path,
        registration["state_schema"],
    )
    return saved
