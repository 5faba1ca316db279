"""A checkpoint's key groups written again for another ``maxParallelism``.

A key's key group is ``pmod(hash(key), maxParallelism)``, so a new number of key
groups moves every key; the keys are in the state, so each key's new group is computed
from it:

* ``barriered.keyed`` state (the ``state`` table): from a key group ``g`` of ``M`` to
  ``N`` groups where ``N`` divides ``M``, the new group is ``g mod N`` (``pmod(h, M) mod N
  == pmod(h, N)``); otherwise Spark's ``hash`` of the key columns is computed in Python
  (:func:`barriered.statestore.key_groups.spark_hash`, the same numbers the JVM computes;
  a key type it cannot hash is refused before anything is written, :func:`check_keys`).
  An operator's live rows (its files at the checkpoint's version, their deletion
  vectors applied) are sorted by their new key group and written as new files of
  consecutive key groups, at most :data:`FILE_ROWS` rows each, which a restore reads
  like a bootstrap's.
* The JVM provider's stores (``operators/<op>-<store>``): every row keeps its raw
  ``hash``, so its new key group is ``pmod(hash, N)``; each store partition's rows are
  written again, one file per ``(key_group, store_partition)`` as the provider writes
  them, with the columns and types of the original files.

The origin is only read. :class:`Regroup` is what :func:`barriered.statestore.savepoints.
export` calls to write a savepoint with the new key groups (``barriered savepoint
rescale``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from barriered import wall_time
from barriered.errors import KeyGroupError, RescaleError
from barriered.files.fileio import filesystem, join, make_parent, read_json
from barriered.statestore import operators
from barriered.statestore.acks import DataFile, write_data_file
from barriered.statestore.delta_tables import as_json, commit_files, current_files, open_table
from barriered.statestore.key_groups import key_types, spark_hash
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import RestorePoint, TableFile
from barriered.statestore.state_files import CHECKPOINT_ID, KEY_GROUP
from barriered.statestore.state_schema import file_schema

log = logging.getLogger(__name__)

#: The most rows of one rewritten ``state`` file (a file ends at a key group boundary,
#: so one key group with more rows makes a larger file).
FILE_ROWS = 1_000_000


def divides(new: int, old: int) -> bool:
    """Whether a key's new group follows from its old one alone (``new`` divides ``old``)."""
    return old % new == 0


def check_keys(registrations: Mapping[str, Mapping[str, Any]], new: int) -> None:
    """Refuse, before anything is written, a keyed operator whose keys must be hashed
    again (``new`` does not divide its ``maxParallelism``) but have a column of a type
    whose Spark hash is not computed here.

    Raises
    ------
    RescaleError
        Naming the operator, the column and its type.
    """
    for name, reg in sorted(registrations.items()):
        old = int(reg["max_parallelism"])
        if divides(new, old):
            continue
        try:
            key_types(str(reg["key_schema"]))
        except KeyGroupError as exc:
            raise RescaleError(
                f"keyed operator {name!r}: {exc}. maxParallelism {new} does not divide "
                f"{old}, so every key's group must be hashed again; nothing was written. "
                f"Choose a divisor of {old} (its key groups merge without hashing)"
            ) from None


def new_key_groups(rows: pa.Table, registration: Mapping[str, Any], new: int) -> np.ndarray:
    """The key group among ``new`` groups of every row of a keyed operator's ``rows``
    (its ``key_group`` of the operator's ``max_parallelism`` groups and its key
    columns)."""
    groups: np.ndarray = rows[KEY_GROUP].to_numpy().astype(np.int64)
    if divides(new, int(registration["max_parallelism"])):
        regrouped: np.ndarray = np.mod(groups, new)
        return regrouped
    type_names = [t for _, t in key_types(str(registration["key_schema"]))]
    columns = [rows[str(c)].to_pylist() for c in registration["key_columns"]]
    try:
        hashes = [spark_hash(values, type_names) for values in zip(*columns, strict=True)]
    except KeyGroupError as exc:
        raise RescaleError(f"a key's group cannot be computed ({exc}); nothing was kept") from None
    return np.mod(np.asarray(hashes, np.int64), new)


def _read(uri: str) -> pa.Table:
    fs, path = filesystem(uri)
    with fs.open_input_file(path) as handle:
        return pq.read_table(handle)


def _live_rows(table_uri: str, f: TableFile, schema: pa.Schema) -> pa.Table:
    """The rows of ``f`` the checkpoint holds, with the operator's file columns (a column
    the file lacks, from before a state field was added, is null; an earlier layout's
    key group comes from the path)."""
    rows = _read(join(table_uri, f.path))
    if f.dv is not None:
        keep = np.ones(rows.num_rows, bool)
        keep[f.dv.rows()] = False
        rows = rows.filter(pa.array(keep))
    group = f.partition_values.get(KEY_GROUP)
    columns = []
    for field in schema:
        if field.name in rows.column_names:
            columns.append(rows[field.name].cast(field.type))
        elif field.name == KEY_GROUP and group is not None:
            columns.append(pa.array(np.full(rows.num_rows, int(group), np.int32)))
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


@dataclass(frozen=True)
class Regroup:
    """The key groups of a checkpoint, written again for ``max_parallelism`` groups.

    Attributes
    ----------
    max_parallelism : int
        The new number of key groups.
    old : int
        The checkpoint's (its configuration's ``maxParallelism``).
    """

    max_parallelism: int
    old: int

    def config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The savepoint's ``_coordinator/config.json``: the origin's, with the new
        ``maxParallelism``."""
        conf = {**dict(config.get("conf") or {}), "max_parallelism": self.max_parallelism}
        return {**config, "conf": conf}

    def registration(self, registration: Mapping[str, Any]) -> dict[str, Any]:
        """A keyed operator's registration with the new ``maxParallelism`` (its recorded
        live partitions at most that many)."""
        out = {**registration, "max_parallelism": self.max_parallelism}
        if "partitions" in out:
            out["partitions"] = min(int(out["partitions"]), self.max_parallelism)
        return out

    def marker(self, origin: SnapshotLayout) -> dict[str, Any]:
        """What ``_savepoint.json`` adds: the key groups before and after, and the
        snapshot path the state came from (a copy of a savepoint keeps its lineage, which
        decides who owns a sink's table)."""
        copied = read_json(origin.savepoint_file, default=None) or {}
        return {
            "origin": str(copied.get("origin") or origin.root),
            "copied_from": origin.root,
            "max_parallelism": self.max_parallelism,
            "rescaled_from": self.old,
        }

    def state(self, point: RestorePoint, out: SnapshotLayout) -> list[tuple[DataFile, np.ndarray]]:
        """Write every keyed operator's state at ``point`` (registered on its origin, with
        the key groups of its old ``maxParallelism``) into ``out``'s ``state`` table with
        the new key groups; return the files (none of their rows deleted)."""
        written: list[tuple[DataFile, np.ndarray]] = []
        for name, reg in sorted(point.operators().items()):
            files = [f for f in point.state_files(name) if f.live_rows > 0]
            if not files:
                continue
            schema = file_schema(reg)
            rows = pa.concat_tables(
                [_live_rows(point.origin.state_table, f, schema) for f in files]
            )
            keys = [str(c) for c in reg["key_columns"]]
            groups = new_key_groups(rows, reg, self.max_parallelism)
            rows = rows.set_column(
                rows.schema.get_field_index(KEY_GROUP), KEY_GROUP, pa.array(groups, pa.int32())
            )
            rows = rows.take(pa.array(np.argsort(groups, kind="stable")))
            new = [
                (f, np.empty(0, np.int64))
                for f in _state_files(out.state_table, name, rows, keys, point.checkpoint_id)
            ]
            log.info(
                "operator %s: %d keys from %d to %d key groups in %d file(s)",
                name,
                rows.num_rows,
                int(reg["max_parallelism"]),
                self.max_parallelism,
                len(new),
            )
            written.extend(new)
        return written

    def stores(
        self, origin: SnapshotLayout, metadata: Mapping[str, Any], out: SnapshotLayout, cid: int
    ) -> str | None:
        """Write the provider's stores of checkpoint ``cid`` (its ``state`` commit
        ``metadata``) into ``out`` with the new key groups; return the new
        :data:`~barriered.statestore.operators.VERSIONS_KEY` value (None: no stores)."""
        stores = operators.stores_of(metadata)
        if not stores:
            return None
        for name, store in stores.items():
            if store.get("version") is None:
                continue  # empty at the checkpoint: a restore starts it empty
            table = open_table(
                origin.operator_table(name), store["version"], origin.storage_options
            )
            assert table is not None  # the checkpoint's files were checked
            by_partition: dict[str, list[pa.Table]] = {}
            for f in current_files(table):
                part = str(f["partition_values"]["store_partition"])
                by_partition.setdefault(part, []).append(
                    _read(join(origin.operator_table(name), f["path"]))
                )
            files = [
                written
                for part, tables in sorted(by_partition.items())
                for written in self._store_files(
                    out.operator_table(name), part, pa.concat_tables(tables), cid
                )
            ]
            store["version"] = commit_files(
                out.operator_table(name),
                pa.schema(table.schema().to_arrow()),
                operators.PARTITIONS,
                cid,
                files,
                storage_options=out.storage_options,
            ).version
            log.info(
                "store %s: %d rows from %d to %d key groups in %d file(s)",
                name,
                sum(f.rows for f in files),
                self.old,
                self.max_parallelism,
                len(files),
            )
        return as_json(stores)

    def _store_files(
        self, table_uri: str, partition: str, rows: pa.Table, cid: int
    ) -> list[DataFile]:
        """One store partition's rows, one file per new key group (the provider's layout:
        ``key_group=G/store_partition=P/``, its files' columns and types)."""
        groups = np.mod(rows["hash"].to_numpy().astype(np.int64), self.max_parallelism)
        out = []
        fs, root = filesystem(table_uri)
        for group in np.unique(groups):
            part = rows.filter(pa.array(groups == group))
            rel = (
                f"key_group={int(group)}/store_partition={partition}/"
                f"c{cid}-rescaled-{uuid.uuid4().hex}.parquet"
            )
            buffer = pa.BufferOutputStream()
            pq.write_table(part, buffer, compression="zstd")
            data = buffer.getvalue()
            make_parent(fs, f"{root}/{rel}")
            with fs.open_output_stream(f"{root}/{rel}") as handle:
                handle.write(data)
            values: dict[str, str | None] = {
                "key_group": str(int(group)),
                "store_partition": partition,
            }
            out.append(DataFile(rel, data.size, part.num_rows, values, wall_time.now_ms()))
        return out


def _state_files(
    table_uri: str, operator: str, rows: pa.Table, keys: list[str], cid: int
) -> list[DataFile]:
    """``rows`` (sorted by key group) as files of consecutive key groups, each ending at
    a key group boundary once it holds :data:`FILE_ROWS` rows."""
    groups = rows[KEY_GROUP].to_numpy()
    bounds = np.flatnonzero(np.diff(groups)) + 1  # where a key group starts
    cuts, start = [], 0
    for at in [*bounds.tolist(), rows.num_rows]:
        if at - start >= FILE_ROWS or at == rows.num_rows:
            cuts.append((start, at))
            start = at
    files = []
    for a, b in cuts:
        part = rows.slice(a, b - a)
        low, high = int(groups[a]), int(groups[b - 1])
        written = write_data_file(
            table_uri, {"operator": operator}, f"rescaled-{low}-{high}-ckpt-{cid}", part, keys
        )
        ids = pc.min_max(part[CHECKPOINT_ID])
        stats = {
            "numRecords": part.num_rows,
            "minValues": {KEY_GROUP: low, CHECKPOINT_ID: ids["min"].as_py()},
            "maxValues": {KEY_GROUP: high, CHECKPOINT_ID: ids["max"].as_py()},
        }
        files.append(
            DataFile(
                written.path,
                written.size,
                written.rows,
                written.partition_values,
                written.modification_time,
                json.dumps(stats),
            )
        )
    return files
