"""A snapshot path seen from a notebook: checkpoint history, keyed state, the plot.

``barriered.checkpoints``, ``barriered.state_table`` and ``barriered.plot_checkpoints``
take a snapshot path or a barriered query. In Databricks, ``display()`` each of them:
the DataFrames put what a person reads first in the first columns, and the plot is a
matplotlib figure.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from barriered.api import snapshot_path
from barriered.errors import CheckpointError, SnapshotStoreError
from barriered.files.fileio import read_json
from barriered.statestore import checkpoints_table, operators
from barriered.statestore.delta_tables import scan
from barriered.statestore.integrity import committed_checkpoints
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_schema import columns_schema
from barriered.tools.history import (
    channel_names,
    display_columns,
    open_history,
    pick_checkpoint,
    with_channel_names,
)
from barriered.tools.plot import checkpoint_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["checkpoints", "display", "plot_checkpoints", "state_table"]


#: The columns of the concise view (each row fits in 100 columns of ``show()``), and
#: what each shows: the id, the kind (checkpoint or savepoint), the mode its cut was
#: taken in, the status, the trigger's time of day (session time zone), the end-to-end
#: and alignment durations, the state bytes written, the in-flight rows stored, the acks.
CONCISE = (
    "id", "kind", "mode", "status", "triggered", "e2e_ms", "align_ms", "state_bytes",
    "inflight_rows", "acks",
)  # fmt: skip


def checkpoints(spark: SparkSession, path_or_query: Any, full: bool = False) -> DataFrame:
    """Return the checkpoint history (the ``_checkpoints`` table) as a DataFrame.

    One row per finished checkpoint, ordered by id. By default the concise view
    (:data:`CONCISE`: ``id, kind, mode, status, triggered, e2e_ms, align_ms,
    state_bytes, inflight_rows, acks``; ``mode`` is the mode the cut was taken in),
    which ``show()`` prints in 100 columns. With ``full=True`` every column: first the
    ones of Flink's checkpoint history, ``checkpoint_id, kind, mode, effective_mode,
    status, trigger_time`` (a timestamp), the durations in milliseconds
    (``end_to_end_duration_ms, alignment_duration_ms, start_delay_ms``), the sizes
    (``state_bytes, inflight_bytes, inflight_rows``), ``acks`` (``"n/N"``),
    ``failure_reason, mode_reason, end_time``; every other ``_checkpoints`` column
    follows.

    Parameters
    ----------
    spark : SparkSession
        The session.
    path_or_query : str or StreamingQuery
        A snapshot path, or a running/finished query whose source is barriered.
    full : bool
        Every column instead of the concise view.

    Returns
    -------
    DataFrame
        Empty (with the same columns) while no checkpoint has finished.

    Raises
    ------
    barriered.errors.SnapshotStoreError
        When the path does not exist or is not a snapshot path.
    """
    layout, rows = open_history(snapshot_path(path_or_query))
    rows = with_channel_names(rows, channel_names(layout))
    df = spark.createDataFrame(rows, schema=checkpoints_table.SCHEMA_DDL)
    derived = {
        "trigger_time": F.timestamp_millis("trigger_timestamp_ms"),
        "end_time": F.timestamp_millis("end_timestamp_ms"),
        "acks": F.concat_ws("/", F.col("num_acknowledged"), F.col("num_expected")),
    }
    columns = [derived.get(c, F.col(c)).alias(c) for c in display_columns()]
    history = df.select(*columns).orderBy("checkpoint_id", "end_time")
    if full:
        return history
    concise = {
        "id": F.col("checkpoint_id"),
        "mode": F.coalesce("effective_mode", "mode"),
        "triggered": F.date_format("trigger_time", "HH:mm:ss.SSS"),
        "e2e_ms": F.col("end_to_end_duration_ms"),
        "align_ms": F.col("alignment_duration_ms"),
    }
    return history.select(*[concise.get(c, F.col(c)).alias(c) for c in CONCISE])


def display(obj: Any) -> None:
    """Show ``obj`` where Databricks' ``display`` is missing (a notebook run with ``python``).

    A DataFrame is printed with ``show`` (its first 50 rows, values in full), a matplotlib
    figure is written to a PNG file in the temporary folder (its path printed), anything
    else is printed.

    Parameters
    ----------
    obj : DataFrame, Figure or any object
        What the notebook displays.
    """
    if isinstance(obj, DataFrame):  # classic and Spark Connect (any attribute is a column)
        obj.show(50, truncate=False)
    elif hasattr(obj, "savefig"):
        fd, path = tempfile.mkstemp(prefix="barriered-figure-", suffix=".png")
        os.close(fd)
        obj.savefig(path)
        print(f"figure written to {path}")
    else:
        print(obj)


def plot_checkpoints(path_or_query: Any, title: str | None = None) -> Figure:
    """Return the checkpoint plot of a snapshot path or query (``display(fig)`` shows it).

    End-to-end duration, alignment duration and bytes written over checkpoint ids, each
    checkpoint in the colour and marker of the mode its cut was taken in (see
    :mod:`barriered.tools.plot`).

    Parameters
    ----------
    path_or_query : str or StreamingQuery
        A snapshot path, or a query whose source is barriered.
    title : str, optional
        Figure title (default: the snapshot path).

    Returns
    -------
    matplotlib.figure.Figure
    """
    layout, rows = open_history(snapshot_path(path_or_query))
    return checkpoint_figure(rows, title or f"Checkpoints of {layout.root}")


def _store_table(
    spark: SparkSession, layout: SnapshotLayout, checkpoint_id: int, operator: str
) -> DataFrame:
    """One Spark operator's store table at ``checkpoint_id``."""
    committed = committed_checkpoints(layout).get(checkpoint_id)
    stores = operators.stores_of(committed[1] if committed else {})
    if operator not in stores:
        raise CheckpointError(
            f"{operator!r} is neither a keyed operator registered on {layout.root!r} nor "
            f"a Spark operator store of its checkpoint {checkpoint_id}, which holds the "
            f"stores {sorted(stores) or 'none'}"
        )
    version = stores[operator].get("version")
    uri = layout.operator_table(operator)
    df = None if version is None else _read_with_spark_delta(spark, uri, int(version))
    if df is None and version is not None:
        table = DeltaTable(uri, version=int(version), storage_options=dict(layout.storage_options))
        df = _arrow_frame(spark, table.to_pyarrow_table())
    if df is None:  # the store never held a row: its schema, no rows
        key = StructType.fromJson(json.loads(stores[operator]["key_schema"]))
        value = StructType.fromJson(json.loads(stores[operator]["value_schema"]))
        schema = (
            StructType()
            .add("hash", "int")
            .add("key", key)
            .add("value", value)
            .add("key_group", "int")
            .add("store_partition", "int")
        )
        df = spark.createDataFrame([], schema)
    return df.select("hash", "key", "value", "key_group", "store_partition")


def state_table(
    spark: SparkSession,
    path_or_query: Any,
    checkpoint: int | None = None,
    operator: str | None = None,
) -> DataFrame:
    """Return the keyed state of a completed checkpoint as a DataFrame.

    Columns: ``operator, key_group``, the key columns and state fields of the keyed
    operators as their Spark types (``user_id``, ``total``, ...), and ``checkpoint_id``
    (the checkpoint that last rewrote the key group). With ``operator``, only that
    operator's rows and columns (``key_group``, its keys and fields, ``checkpoint_id``).
    The ``state`` table is read at the checkpoint's version with Spark's Delta reader
    when the session has one (Databricks), else with delta-rs through Arrow on the
    driver.

    Parameters
    ----------
    spark : SparkSession
        The session.
    path_or_query : str or StreamingQuery
        A snapshot path, or a query whose source is barriered.
    checkpoint : int, optional
        A completed checkpoint id (default: the latest completed one).
    operator : str, optional
        One keyed operator (``process(..., name=)``; default: all of them), or a Spark
        operator's store captured by the JVM provider (``"<operator id>-<store name>"``,
        e.g. ``"0-default"``; ``barriered inspect`` lists them): its table at the
        checkpoint, with columns ``hash, key, value, key_group, store_partition``
        (``key`` and ``value``: structs of the operator's own types).

    Raises
    ------
    barriered.errors.CheckpointError
        When that checkpoint does not exist or was aborted, or holds no such operator
        (neither a keyed operator nor a captured store).
    """
    layout, rows = open_history(snapshot_path(path_or_query))
    row = pick_checkpoint(layout, rows, checkpoint)
    columns: list[str] | None = None
    if operator is not None:
        registered = read_json(layout.operator_file(operator), default=None)
        if registered is None:
            return _store_table(spark, layout, int(row["checkpoint_id"]), operator)
        columns = ["key_group", *columns_schema(registered).names, "checkpoint_id"]
    version = int(row["state_table_version"])
    df = _read_with_spark_delta(spark, layout.state_table, version)
    if df is None:
        try:
            opened = DeltaTable(
                layout.state_table, version=version, storage_options=dict(layout.storage_options)
            )
            table = scan(opened)  # the deletion vectors applied
        except Exception as exc:  # delta-rs raises several types for missing/corrupt tables
            raise SnapshotStoreError(
                f"cannot read {layout.state_table!r} at version {version}: {exc}"
            ) from exc
        df = _arrow_frame(spark, table)
    if operator is None:
        return df
    return df.where(F.col("operator") == operator).select(*(columns or []))


def _arrow_frame(spark: SparkSession, table: pa.Table) -> DataFrame:
    """A Delta table read by delta-rs as a DataFrame of its own types (a timestamp
    without time zone stays ``timestamp_ntz``; Spark's default makes it ``timestamp``).

    Empty record batches are dropped first: ``createDataFrame`` keeps no row after one
    (pyspark 4.3; delta-rs yields one for a file whose deletion vector holds every row,
    and the rows of the files after it were lost)."""
    batches = [b for b in table.to_batches() if b.num_rows]
    whole = pa.Table.from_batches(batches, schema=table.schema)
    return spark.createDataFrame(whole, schema=from_arrow_schema(table.schema))


def _read_with_spark_delta(spark: SparkSession, uri: str, version: int) -> DataFrame | None:
    """The Delta table at ``version`` through Spark, or None when Spark has no Delta.

    A Spark Connect session resolves the format only when the plan is analysed, so the
    schema is asked for here: a missing Delta reader must show now, not at the first
    action on the returned DataFrame.
    """
    try:
        df = spark.read.format("delta").option("versionAsOf", version).load(uri)
        df.schema  # noqa: B018 - analyses the plan (Spark Connect defers it)
        return df
    except Exception as exc:
        if "DATA_SOURCE_NOT_FOUND" in str(exc):
            log.debug("no Delta reader in this session; reading %s with delta-rs", uri)
            return None
        raise
