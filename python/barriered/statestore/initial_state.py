"""A keyed operator's state on restore: read from the ``state`` table, in parallel.

With ``restoreFrom`` the source puts the restored checkpoint (snapshot path, id, state
table version) in the metadata of the ``_barrier`` column. ``barriered.keyed(...)
.process(...)`` then checks that the processor matches the operator that wrote the
snapshot (key columns, key types, state schema) and hands the operator's files at that
version to Spark as the initial state of ``transformWithStateInPandas``: the driver
only lists files (Delta metadata); executors read them, each key group landing in
whichever Spark partition owns it now, so the number of partitions is free.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType, _parse_datatype_string

from barriered.datasource.columns import KEY_GROUP
from barriered.errors import RestoreError
from barriered.statestore.delta_tables import current_files, open_table
from barriered.statestore.fileio import join, read_json
from barriered.statestore.keyed import OperatorSpec
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

#: Columns of the initial-state DataFrame (grouped by ``_key_group``).
INITIAL_STATE_DDL = f"{KEY_GROUP} int, key string, value string"


def _schema(ddl: str) -> StructType:
    return cast(StructType, _parse_datatype_string(ddl))


def check_operator(spec: OperatorSpec, registered: Mapping[str, Any] | None, where: str) -> None:
    """Refuse a processor whose keys or state schema differ from the snapshot's operator.

    Raises
    ------
    RestoreError
        Naming the operator, what differs (both values) and what to do.
    """
    if registered is None:
        return
    problems = []
    if list(registered["key_columns"]) != list(spec.key_columns):
        problems.append(
            f"key columns were {list(registered['key_columns'])}, now {list(spec.key_columns)}"
        )
    elif _schema(str(registered["key_schema"])) != _schema(spec.key_schema):
        problems.append(f"key types were '{registered['key_schema']}', now '{spec.key_schema}'")
    if _schema(str(registered["state_schema"])) != _schema(spec.state_schema):
        problems.append(
            f"the state schema was '{registered['state_schema']}', the processor declares "
            f"'{spec.state_schema}'"
        )
    if problems:
        raise RestoreError(
            f"cannot restore operator {spec.operator!r} from {where}: "
            + "; ".join(problems)
            + ". Keyed state can only be restored into the same keys and state schema: "
            "change the processor back, or give it another name (process(..., name=...)) "
            "to start it empty"
        )


def initial_state(spark: SparkSession, restore: Mapping[str, Any], spec: OperatorSpec) -> DataFrame:
    """Return the operator's state at the restored checkpoint as ``_key_group, key, value``.

    Parameters
    ----------
    spark : SparkSession
    restore : mapping
        ``{"root", "checkpoint_id", "state_version"}`` from the source's metadata.
    spec : OperatorSpec
        The operator being restored.

    Raises
    ------
    RestoreError
        When the processor does not match the snapshot's operator.
    """
    origin = SnapshotLayout.configured(str(restore["root"]))
    cid, version = int(restore["checkpoint_id"]), int(restore["state_version"])
    where = f"checkpoint {cid} of {origin.root!r}"
    check_operator(spec, read_json(origin.operator_file(spec.operator), default=None), where)
    table = open_table(origin.state_table, version, origin.storage_options)
    paths = [
        join(origin.state_table, f["path"])
        for f in (current_files(table) if table is not None else [])
        if f["partition_values"].get("operator") == spec.operator
    ]
    log.info(
        "restore: operator %s loads %d key group file(s) of %s (state version %d)",
        spec.operator,
        len(paths),
        where,
        version,
    )
    if not paths:
        return spark.createDataFrame([], INITIAL_STATE_DDL)
    files = spark.read.option("basePath", origin.state_table).parquet(*paths)
    return files.select(
        F.col("key_group").cast("int").alias(KEY_GROUP), F.col("key"), F.col("value")
    )
