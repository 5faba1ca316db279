"""Bootstrap: a savepoint written from batch DataFrames instead of a running query.

The savepoint has exactly the layout :func:`barriered.savepoint` writes (one completed
checkpoint, id 1, kind ``savepoint``, aligned, nothing in flight), so a streaming query
restores it with ``restoreFrom=<folder>`` like any savepoint:

* ``_coordinator/config.json``: the configuration the source options and the session
  resolve to (``maxParallelism`` above all), the channels and the upstream;
* ``_source/``: the upstream's manifest as of the bootstrap (``files``, ``delta``), so
  positions mean the same records to the restored query;
* ``state``: each operator's state, one file per key group, in the key group the streaming
  operator computes (:func:`barriered.api.key_group_column`);
* the state commit's barrier positions: per channel, where the bootstrap's data ends and
  the restored query starts reading (default: everything the upstream holds now);
* ``_checkpoints`` and ``_savepoint.json`` (written last).

Every check runs before anything is written; a failure while writing (a Spark job that
fails) removes what the bootstrap wrote, so the folder is as it was.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from barriered import wall_time
from barriered.api import key_group_column, operator_spec
from barriered.config import SNAPSHOT_PATH
from barriered.config.source_options import RESTORE_FROM, SESSION_CONF_OPTION
from barriered.control.columns import KEY_GROUP
from barriered.datasource.options import parse_source_options
from barriered.datasource.source import config_record, upstream_of
from barriered.datasource.upstreams.base import Upstream
from barriered.errors import StateProcessorError
from barriered.files.fileio import copy_tree, write_json
from barriered.session import session_conf
from barriered.state_processor import stores
from barriered.state_processor.stores import SparkState
from barriered.state_processor.target import Target
from barriered.state_processor.writer import KeyGroupWriter, write_state
from barriered.statestore import checkpoints_table, operators
from barriered.statestore.acks import DataFile
from barriered.statestore.delta_tables import as_json
from barriered.statestore.evolution import widens
from barriered.statestore.keyed import OperatorSpec
from barriered.statestore.savepoints import Savepoint
from barriered.statestore.state_commit import commit_copies
from barriered.statestore.state_schema import struct_schema, table_schema

log = logging.getLogger(__name__)

#: The checkpoint id of a bootstrapped savepoint (a restored query numbers from 2).
BOOTSTRAP_ID = 1


@dataclass(frozen=True)
class KeyedState:
    """The state of one ``barriered.keyed`` operator, to bootstrap from a DataFrame.

    Attributes
    ----------
    df : DataFrame
        A batch DataFrame: with ``compute=False`` one row per key (key columns and the
        processor's state fields); with ``compute=True`` input rows like the stream's.
    key_columns : sequence of str
        The key columns, as given to :func:`barriered.keyed`.
    processor : object
        The processor the streaming query runs (its ``state_schema``,
        ``output_schema``; with ``compute=True`` also its ``process_batch`` or
        ``process``).
    name : str, optional
        The operator id (``process(..., name=)``; default: the class name in snake_case).
    compute : bool, default False
        Compute each key's state by running the processor over its rows, from an empty
        state, as the stream would (one call per key group; rows in the DataFrame's
        order, which Spark does not define: an order-sensitive processor should be
        given its state instead).
    """

    df: DataFrame
    key_columns: Sequence[str]
    processor: Any
    name: str | None = None
    compute: bool = False


def _settings_and_upstream(
    spark: SparkSession, target: str, source: Mapping[str, str], state_dir: str
) -> tuple[Any, Upstream]:
    snapshot_path = SNAPSHOT_PATH.name
    options = {str(k): str(v) for k, v in source.items() if k.lower() != snapshot_path.lower()}
    if any(k.lower() == RESTORE_FROM.name.lower() for k in options):
        raise StateProcessorError(
            f"bootstrap: the source options give {RESTORE_FROM.name!r}, but a bootstrap writes a "
            "savepoint from batch data, not from another snapshot; nothing was written. "
            "Remove it (to change a snapshot's state, use transform)"
        )
    options[SESSION_CONF_OPTION] = json.dumps(session_conf(spark))
    options[snapshot_path] = target
    settings = parse_source_options(options)
    return settings, upstream_of(settings, state_dir, None)


def _positions(upstream: Upstream, positions: Sequence[int] | None) -> list[int]:
    upstream.discover()
    available = list(upstream.available())
    if positions is None:
        return available
    given = [int(p) for p in positions]
    if len(given) != len(available):
        raise StateProcessorError(
            f"bootstrap: {len(given)} starting positions given, but the {upstream.name} "
            f"upstream has {len(available)} channels; give one position per channel (or "
            "none: everything it holds now); nothing was written"
        )
    beyond = [(c, p, a) for c, (p, a) in enumerate(zip(given, available, strict=True)) if p > a]
    if beyond or any(p < 0 for p in given):
        channel, wanted, end = beyond[0] if beyond else (given.index(min(given)), min(given), 0)
        raise StateProcessorError(
            f"bootstrap: starting position {wanted} of channel {channel} is outside what the "
            f"{upstream.name} upstream holds (0 to {end}); nothing was written"
        )
    return given


def _spec(state: KeyedState, max_parallelism: int, upstream: Upstream) -> OperatorSpec:
    """The operator's registration, checked against the rows and the stream's columns."""
    missing = [c for c in state.key_columns if c not in state.df.columns]
    if missing:
        raise StateProcessorError(
            f"bootstrap: key column(s) {missing} are not columns of the DataFrame "
            f"({', '.join(state.df.columns)}); nothing was written"
        )
    spec = operator_spec(
        state.df.schema, state.key_columns, state.processor, state.name, max_parallelism
    )
    fields = struct_schema(spec.to_dict()["state_type"]).names
    absent = [f for f in fields if f not in state.df.columns]
    if not state.compute and absent:
        raise StateProcessorError(
            f"bootstrap of operator {spec.operator!r}: state field(s) {absent} of its "
            f"state_schema '{spec.state_schema}' are not columns of the DataFrame; give one "
            "row per key with the key columns and every state field, or compute=True to run "
            "the processor over input rows; nothing was written"
        )
    declared = struct_schema(spec.to_dict()["state_type"])
    for name in [] if state.compute else fields:
        given_type = struct_schema(StructType([state.df.schema[name]]).jsonValue()).field(0).type
        if not widens(given_type, declared.field(name).type):
            raise StateProcessorError(
                f"bootstrap of operator {spec.operator!r}: state field {name!r} is "
                f"{state.df.schema[name].dataType.simpleString()} in the DataFrame, the "
                f"state_schema declares {declared.field(name).type}: cast the column (only "
                "lossless widenings are taken as they are); nothing was written"
            )
    stream = from_arrow_schema(upstream.schema())
    for column in state.key_columns:
        given = state.df.schema[column].dataType
        if column in stream.names and stream[column].dataType != given:
            raise StateProcessorError(
                f"bootstrap of operator {spec.operator!r}: key column {column!r} is "
                f"{given.simpleString()} here but {stream[column].dataType.simpleString()} "
                f"in the {upstream.name} upstream's records, so the stream would hash it "
                "into other key groups; cast it to the stream's type; nothing was written"
            )
    return spec


def bootstrap(
    spark: SparkSession,
    path: str,
    source: Mapping[str, str],
    states: Sequence[KeyedState | SparkState],
    positions: Sequence[int] | None = None,
) -> Savepoint:
    """Write a savepoint holding ``states`` (see :func:`barriered.state_processor.bootstrap`)."""
    with tempfile.TemporaryDirectory(prefix="barriered-bootstrap-") as scratch:
        target = Target.empty(path)
        settings, upstream = _settings_and_upstream(spark, target.layout.root, source, scratch)
        starts = _positions(upstream, positions)
        mp = settings.conf.max_parallelism
        keyed = [s for s in states if isinstance(s, KeyedState)]
        queries = [s for s in states if isinstance(s, SparkState)]
        if len(queries) > 1:
            raise StateProcessorError(
                f"bootstrap: {len(queries)} SparkState given; the stores of Spark's own "
                "operators belong to one streaming query: give one; nothing was written"
            )
        planned = [stores.plan(spark, q) for q in queries]
        specs = [_spec(s, mp, upstream) for s in keyed]
        names = [s.operator for s in specs]
        if len(set(names)) != len(names):
            raise StateProcessorError(
                f"bootstrap: operator names {names} repeat; give each KeyedState its own "
                "name; nothing was written"
            )
        schema = table_schema([s.to_dict() for s in specs])
        upstream.persist()
        with target.writing():
            return _write(
                target, settings, upstream, starts, keyed, specs, schema, scratch, planned
            )


def _write(
    target: Target,
    settings: Any,
    upstream: Upstream,
    starts: list[int],
    states: Sequence[KeyedState],
    specs: list[OperatorSpec],
    schema: Any,
    scratch: str,
    planned: list[stores.Planned],
) -> Savepoint:
    out = target.layout
    started = wall_time.now_ms()
    write_json(out.config_file, config_record(settings, upstream))
    for spec in specs:
        write_json(out.operator_file(spec.operator), spec.to_dict())
    copy_tree(scratch, out.source_dir)
    files: list[DataFile] = []
    for state, spec in zip(states, specs, strict=True):
        mp = settings.conf.max_parallelism
        df = state.df.withColumn(KEY_GROUP, key_group_column(state.key_columns, mp))
        processor = state.processor if state.compute else None
        writer = KeyGroupWriter(out.state_table, spec, BOOTSTRAP_ID, processor)
        files.extend(write_state(df, writer))
    versions: dict[str, Any] = {}
    for plan in planned:
        spark = plan.state.query.sparkSession
        versions.update(stores.write(spark, plan, out, settings.conf.max_parallelism, BOOTSTRAP_ID))
    barrier = {str(c): p for c, p in enumerate(starts)}
    metadata = {
        "barriered.kind": "savepoint",
        "barriered.mode": "aligned",
        "barriered.barrier": as_json(barrier),
        "barriered.inflight": as_json({}),
        "barriered.inflight_version": None,
        "barriered.bootstrap": True,
    }
    if versions:
        metadata[operators.VERSIONS_KEY] = as_json(versions)
    copies = [(f, np.empty(0, np.int64)) for f in files]
    version = commit_copies(out, BOOTSTRAP_ID, schema, copies, metadata).version
    now = wall_time.now_ms()
    state_bytes = sum(f.size for f in files)
    checkpoints_table.append(
        out,
        {
            "checkpoint_id": BOOTSTRAP_ID,
            "kind": "savepoint",
            "mode": "aligned",
            "mode_reason": "bootstrapped from batch data (barriered.state_processor)",
            "effective_mode": "aligned",
            "status": "completed",
            "savepoint_target": out.root,
            "trigger_timestamp_ms": started,
            "end_timestamp_ms": now,
            "end_to_end_duration_ms": now - started,
            "state_bytes": state_bytes,
            "state_rows": sum(f.rows for f in files),
            "inflight_rows": 0,
            "inflight_bytes": 0,
            "barrier_positions": json.dumps(barrier),
            "state_table_version": version,
            "snapshot_path": out.root,
        },
    )
    saved = Savepoint(out.root, BOOTSTRAP_ID, "bootstrap", len(files), state_bytes, 0)
    write_json(
        out.savepoint_file,
        {
            "checkpoint_id": BOOTSTRAP_ID,
            "kind": "savepoint",
            "mode": "aligned",
            "origin": "bootstrap",
            "operators": [s.operator for s in specs],
            "stores": sorted(versions),
            "created_ms": now,
            "state_files": saved.state_files,
            "state_bytes": saved.state_bytes,
        },
    )
    log.info(
        "bootstrap savepoint written to %s: %d operator(s), %d key group file(s), positions %s",
        out.root,
        len(specs),
        len(files),
        starts,
    )
    return saved


__all__ = ["BOOTSTRAP_ID", "KeyedState", "SparkState", "bootstrap"]
