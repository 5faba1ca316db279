"""Bootstrap of Spark's own stateful operators' stores, for the JVM provider.

A query with a grouped aggregation (``groupBy().agg()``) or ``dropDuplicates`` keeps its
state in Spark's state store; under the provider (:mod:`barriered.provider`) a checkpoint
holds each store as a table ``operators/<op>-<store>`` (``hash``, ``key``, ``value``
structs of the store's own types) and a restore loads it into the query's stores. A
bootstrap writes those tables from batch rows, so the user names no internal layout:

* the streaming DataFrame of the query (as it will be started) is planned as a micro-batch
  (what ``explain()`` shows); its stateful operators, their ids, their stores' key and value
  types and the part of the plan that feeds each store come from that plan
  (``StoreBootstrap`` in ``jvm-shim/``);
* the batch rows replace the streaming source in that part of the plan, which Spark runs:
  an aggregation's store values are its aggregation buffers (sum and count of an average,
  ...) merged by Spark's own aggregate functions, a deduplication's keys are each key once;
* each row is written per key group by the provider's own file writer.

Spark Connect and serverless have no provider: there this part is refused (the keyed
state of ``barriered.keyed`` bootstraps on any session).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from barriered.control.columns import BARRIER, BARRIER_META, CHANNEL, SEQ
from barriered.errors import StateProcessorError
from barriered.provider import PROVIDER_CLASS
from barriered.statestore import operators
from barriered.statestore.acks import DataFile
from barriered.statestore.delta_tables import commit_files
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

_JVM_CLASS = "io.barriered.shim.StoreBootstrap"
_PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
#: Source columns a batch row need not have: a record's marker columns are null, its
#: channel and position are taken from the rows when they have them.
_OPTIONAL = (BARRIER, BARRIER_META, CHANNEL, SEQ)
_SUPPORTED = "a grouped aggregation (groupBy().agg()) or dropDuplicates"


@dataclass(frozen=True)
class SparkState:
    """The stores of a streaming query's own Spark stateful operators, to bootstrap from a
    batch DataFrame (JVM provider only).

    Attributes
    ----------
    query : DataFrame
        The streaming DataFrame the query will start (``writeStream`` is called on it),
        read from the barriered source with the same options as the bootstrap's
        ``source``: its stateful operators (a grouped aggregation, ``dropDuplicates``)
        are the ones written.
    df : DataFrame
        Batch rows like the stream's records: every column of the source's records, of
        the same types (``_channel``, ``_seq``, ``_barrier``, ``_barrier_meta`` may be
        left out). The query's own plan runs over them in place of the source.
    """

    query: DataFrame
    df: DataFrame


@dataclass(frozen=True)
class Planned:
    """What :func:`plan` found: the stores to write and the batch rows aligned to the
    source's columns."""

    state: SparkState
    stores: list[dict[str, Any]]
    rows: DataFrame


def _jvm_class(spark: SparkSession) -> Any:
    jvm = getattr(spark, "_jvm", None)
    if jvm is None or not hasattr(spark, "_jsparkSession"):
        raise StateProcessorError(
            "bootstrap of Spark's own stateful operators: this is a Spark Connect session, "
            "which has no barriered state store provider (Spark Connect and serverless "
            "load no custom jar); bootstrap them on a classic session of a dedicated cluster "
            "with barriered.with_state_store(builder). barriered.keyed state "
            "(KeyedState) bootstraps on Connect too; nothing was written"
        )
    if spark.conf.get(_PROVIDER_KEY, None) != PROVIDER_CLASS:
        raise StateProcessorError(
            "bootstrap of Spark's own stateful operators: the session's state store provider "
            f"is {spark.conf.get(_PROVIDER_KEY, None)!r}, not the barriered provider "
            f"{PROVIDER_CLASS!r}: only a query under it restores these stores. Start the "
            "session with barriered.with_state_store(builder); nothing was written"
        )
    return jvm.io.barriered.shim.StoreBootstrap


def _describe(spark: SparkSession, query: DataFrame) -> dict[str, Any]:
    if not query.isStreaming:
        raise StateProcessorError(
            "bootstrap of Spark's own stateful operators: SparkState.query is a batch "
            "DataFrame; give the streaming DataFrame the query starts (read with "
            'spark.readStream.format("barriered")); nothing was written'
        )
    return dict(json.loads(_jvm_class(spark).describe(query._jdf)))


def _aligned(df: DataFrame, schema: StructType, names: list[str]) -> DataFrame:
    """``df`` with the source's columns, in its order and types (refused otherwise)."""
    columns = []
    for field in schema.fields:
        if field.name not in df.columns:
            if field.name not in _OPTIONAL:
                raise StateProcessorError(
                    f"bootstrap of Spark operator store(s) {names}: the batch DataFrame has no "
                    f"column {field.name!r} of the stream's records (its columns: "
                    f"{', '.join(df.columns)}); the query's plan reads it; nothing was written"
                )
            columns.append(F.lit(None).cast(field.dataType).alias(field.name))
            continue
        given = df.schema[field.name].dataType
        if field.name in (BARRIER, BARRIER_META):
            columns.append(F.lit(None).cast(field.dataType).alias(field.name))
        elif given != field.dataType:
            raise StateProcessorError(
                f"bootstrap of Spark operator store(s) {names}: column {field.name!r} is "
                f"{given.simpleString()} in the batch DataFrame but "
                f"{field.dataType.simpleString()} in the stream's records, so the query's "
                "plan would compute other keys and values from it; cast it to the stream's "
                "type; nothing was written"
            )
        else:
            columns.append(F.col(field.name))
    return df.select(*columns)


def plan(spark: SparkSession, state: SparkState) -> Planned:
    """Plan the query's stores and check the batch rows against its source.

    Raises
    ------
    StateProcessorError
        On Spark Connect, without the provider, for a batch ``query``, a query with a
        stateful operator no bootstrap writes (named with its operator id) or with none,
        a query of more than one streaming source, or batch rows that miss a column of the
        source or have it with another type. Nothing is written.
    """
    found = _describe(spark, state.query)
    unsupported = list(found["unsupported"])
    if unsupported:
        raise StateProcessorError(
            f"bootstrap of Spark's own stateful operators: the query's {', '.join(unsupported)} "
            f"cannot be bootstrapped (supported: {_SUPPORTED}, each over the source directly); "
            "nothing was written"
        )
    stores = list(found["stores"])
    if not stores:
        raise StateProcessorError(
            "bootstrap of Spark's own stateful operators: the query has no stateful operator "
            f"(supported: {_SUPPORTED}), so there is no store to write; for barriered.keyed "
            "state use KeyedState; nothing was written"
        )
    names = [str(s["operator"]) for s in stores]
    if len(found["sources"]) != 1:
        raise StateProcessorError(
            f"bootstrap of Spark operator store(s) {names}: the query reads "
            f"{len(found['sources'])} streaming sources ({found['sources']}); a bootstrap "
            "replaces one source by the batch rows; nothing was written"
        )
    schema = StructType.fromJson(json.loads(found["source_schema"]))
    return Planned(state, stores, _aligned(state.df, schema, names))


def write(
    spark: SparkSession, planned: Planned, out: SnapshotLayout, max_parallelism: int, cid: int
) -> dict[str, dict[str, Any]]:
    """Write and commit the planned stores into ``out``; return the state commit's
    :data:`~barriered.statestore.operators.VERSIONS_KEY` value (per store: its table's
    version, its key and value schemas, no watermark)."""
    written = json.loads(
        _jvm_class(spark).write(
            planned.state.query._jdf, planned.rows._jdf, out.root, max_parallelism, cid
        )
    )
    versions: dict[str, dict[str, Any]] = {}
    for store in planned.stores:
        name = str(store["operator"])
        files = [
            DataFile(
                path=f["path"],
                size=int(f["size"]),
                rows=int(f["rows"]),
                partition_values={k: str(v) for k, v in f["partition_values"].items()},
                modification_time=int(f["modification_time"]),
            )
            for f in written.get(name, [])
        ]
        version = None
        if files:
            uri = out.operator_table(name)
            version = commit_files(
                uri,
                operators.file_schema(uri, files[0].path),
                operators.PARTITIONS,
                cid,
                files,
                storage_options=out.storage_options,
            ).version
        versions[name] = {
            "version": version,
            "key_schema": store["key_schema"],
            "value_schema": store["value_schema"],
            "watermark_ms": None,
        }
        log.info(
            "store %s (%s): %d key group file(s), %d rows",
            name,
            store["kind"],
            len(files),
            sum(f.rows for f in files),
        )
    return versions


__all__ = ["Planned", "SparkState", "plan", "write"]
