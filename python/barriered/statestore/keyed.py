"""The keyed operator: a user processor run per slot of key groups, snapshotting at markers.

``barriered.keyed(df, *keys).process(processor)`` groups the stream by the slot of
``_key_group`` (``_key_group div width``, the width chosen at the query's first start,
:func:`barriered.statestore.key_groups.key_groups_per_call`) and runs :class:`KeyedOperator` through
``applyInPandasWithState``. One call sees every row of one slot's key groups in one
micro-batch: the data rows go to the processor in one call
(:mod:`barriered.statestore.vectorized`), then each marker row of the batch makes the
key group it addresses write its snapshot and acknowledge it. Several key groups per
call pay Spark's fixed cost per group and call (a Python call, Arrow and pandas
conversions, a state store get and put) once for all of them.

Live state sits in Spark's state store as ONE value per slot: the slot's state as an
Arrow table (key columns and state fields, typed, and the ``_key_group`` of each key;
serialized as Arrow IPC), the width it was written under (a call of another width
refuses it, :class:`~barriered.errors.KeyedWidthError`) and, per key group, a count of
changes and the change count at each recent snapshot, so that a key group unchanged
since the base checkpoint (the latest completed one) acknowledges without writing a
file. One get and one put per slot and batch; a snapshot writes a key group's rows as
one Parquet file, as before: the snapshot layout is per key group and knows nothing of
slots.

After a restore, a slot that has no live state yet loads its key groups' snapshot
file(s) on its first call (every key group is called at the first cut at the latest:
each gets a marker row), on the executor that owns it now: nothing is read on the
driver.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from barriered import crash_points
from barriered.datasource.columns import BARRIER, BARRIER_META, CHANNEL, KEY_GROUP, SEQ, SLOT
from barriered.datasource.options import RESTORE_FROM
from barriered.errors import KeyedWidthError, KeyGroupError
from barriered.statestore.acks import (
    Ack,
    DataFile,
    state_participant,
    write_acks,
    write_data_file,
)
from barriered.statestore.contract import Contract
from barriered.statestore.evolution import conform
from barriered.statestore.fileio import filesystem
from barriered.statestore.key_groups import key_group_for_key, key_types, slot_key_groups
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_schema import columns_schema
from barriered.statestore.storage import register
from barriered.statestore.vectorized import BatchProcessor, PerKey, key_index, merge

log = logging.getLogger(__name__)

_META = (CHANNEL, SEQ, BARRIER, BARRIER_META, KEY_GROUP, SLOT)

#: The live state of a slot in Spark's state store: the state table (with ``_key_group``),
#: per key group ``[change count, {checkpoint id: change count at its snapshot}]``, and
#: the slot's width (key groups per call) it was written under.
LIVE_STATE_DDL = "blob binary, key_groups string, key_groups_per_call int"


@dataclass(frozen=True)
class OperatorSpec:
    """What identifies a keyed operator on a snapshot path."""

    operator: str
    key_columns: tuple[str, ...]
    key_schema: str  # DDL of the key columns
    state_schema: str
    output_schema: str
    max_parallelism: int
    key_type: str  # Spark JSON of the key columns' StructType
    state_type: str  # Spark JSON of the state's StructType
    input_columns: tuple[str, ...] = ()
    output_columns: tuple[str, ...] = ()  # the columns of output_schema
    #: Key groups per slot (:func:`barriered.statestore.key_groups.key_groups_per_call`).
    key_groups_per_call: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as registered under ``_coordinator/operators``."""
        return {
            "operator": self.operator,
            "key_columns": list(self.key_columns),
            "key_schema": self.key_schema,
            "state_schema": self.state_schema,
            "output_schema": self.output_schema,
            "max_parallelism": self.max_parallelism,
            "key_type": json.loads(self.key_type),
            "state_type": json.loads(self.state_type),
            "key_groups_per_call": self.key_groups_per_call,
        }


@dataclass(frozen=True)
class RestoredFiles:
    """The snapshot files of each key group of one operator at a restored checkpoint."""

    checkpoint_id: int
    by_key_group: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: Values of state fields the snapshot's operator did not have (schema evolution).
    defaults: dict[str, Any] = field(default_factory=dict)

    def load(self, key_group: int, schema: pa.Schema) -> pa.Table:
        """Read one key group's state (empty when it had none), as ``schema``: fields the
        snapshot lacks get their default (or null), fields it has are cast
        (:mod:`barriered.statestore.evolution`)."""
        tables = []
        for path in self.by_key_group.get(key_group, ()):
            fs, local = filesystem(path)
            with fs.open_input_file(local) as f:
                stored = pq.read_table(f)
            tables.append(conform(stored, schema, self.defaults))
        log.info(
            "restore: key group %d loaded from checkpoint %d (%d file(s), %d keys)",
            key_group,
            self.checkpoint_id,
            len(tables),
            sum(t.num_rows for t in tables),
        )
        return pa.concat_tables(tables) if tables else schema.empty_table()


def to_blob(table: pa.Table) -> bytes:
    """Serialize a state table (Arrow IPC stream)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def from_blob(blob: bytes) -> pa.Table:
    """Deserialize a state table written by :func:`to_blob`."""
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def _rows_of(table: pa.Table, key_group: int) -> pa.Table:
    """The rows of one key group of a slot's state table."""
    return table.filter(pc.equal(table[KEY_GROUP], pa.scalar(key_group, pa.int32())))


class KeyedOperator:
    """Runs a user processor for one slot of key groups and snapshots them at markers.

    Called by ``applyInPandasWithState`` as ``(key, frames, state)``; the processor is
    either a :class:`~barriered.statestore.vectorized.BatchProcessor` or a per-key one
    (``process(key, rows, state)``). ``storage`` is the storage settings of the snapshot
    path's store (:mod:`barriered.statestore.storage`), handed to the executors' Python
    workers with the operator itself, never in a file.
    """

    def __init__(
        self,
        spec: OperatorSpec,
        processor: Any,
        restored: RestoredFiles | None = None,
        storage: tuple[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.spec = spec
        self.restored = restored
        self.storage = storage
        self.schema = columns_schema(spec.to_dict())
        self.live_schema = self.schema.append(pa.field(KEY_GROUP, pa.int32()))
        self.user_columns = [c for c in spec.input_columns if c not in _META]
        batch = hasattr(processor, "process_batch")
        self.contract = Contract(
            processor=type(processor).__name__,
            operator=spec.operator,
            method="process_batch" if batch else "process",
            keys=spec.key_columns,
            state=self.schema,
            output=spec.output_columns,
        )
        self.processor: BatchProcessor = processor if batch else PerKey(processor, self.contract)

    def __call__(
        self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame], live: Any
    ) -> Iterator[pd.DataFrame]:
        if self.storage is not None:
            register(*self.storage)
        parts = list(frames)
        batch = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        batch.columns = list(self.spec.input_columns)
        width = self.spec.key_groups_per_call
        if live.exists:
            blob, raw, written = live.get
            if written != width:
                raise KeyedWidthError(
                    f"keyed operator {self.spec.operator!r}: slot {key[0]}'s live state in "
                    f"Spark's checkpoint was written with {written} key groups per call, this "
                    f"query runs {width} (the snapshot path's registration of the operator "
                    "does not match this checkpoint location); nothing of the batch was "
                    "written. Restore the latest checkpoint into a new checkpoint location "
                    f'(.option("{RESTORE_FROM.name}", "latest")), where any width works: '
                    "snapshots are per key group"
                )
            table, groups = from_blob(blob), json.loads(raw)
        else:
            blob, groups = None, {}
            table = self._restore(int(key[0]))
        is_marker = batch[BARRIER].notna().to_numpy()
        data = batch[~is_marker] if is_marker.any() else batch
        output = None
        if len(data):
            order = np.lexsort((data[SEQ].to_numpy(), data[CHANNEL].to_numpy()))
            if (order != np.arange(len(order))).any():
                data = data.take(order)
            rows = data[self.user_columns].reset_index(drop=True)
            changed: set[int] = set()
            locate = self._locator(rows, data[KEY_GROUP].to_numpy(), changed)
            output, new = merge(table, rows, self.processor, self.contract, locate)
            if changed:
                table, blob = new, None
                for g in changed:
                    groups.setdefault(str(g), [0, {}])[0] += 1
        markers = batch[is_marker].sort_values(BARRIER) if is_marker.any() else batch[:0]
        acks: dict[tuple[str, int], list[Ack]] = {}  # by snapshot path and checkpoint
        for checkpoint_id, meta_json, group in zip(
            markers[BARRIER], markers[BARRIER_META], markers[KEY_GROUP], strict=True
        ):
            mod_count, snapshots = groups.setdefault(str(int(group)), [0, {}])
            rows_of_group = _rows_of(table, int(group)).drop_columns([KEY_GROUP])
            meta = json.loads(meta_json)
            ack = self._snapshot(
                int(group), int(checkpoint_id), meta, rows_of_group, mod_count, snapshots
            )
            acks.setdefault((meta["path"], int(checkpoint_id)), []).append(ack)
        for (path, _), written in acks.items():
            write_acks(SnapshotLayout.at(path), written)
        live.update((to_blob(table) if blob is None else blob, json.dumps(groups), width))
        if output is not None and len(output):
            yield output

    def _restore(self, slot_id: int) -> pa.Table:
        """The state of a slot without live state: its key groups' snapshot files after
        a restore, else empty; with each key's ``_key_group``."""
        tables = [self.live_schema.empty_table()]
        if self.restored is not None:
            width = self.spec.key_groups_per_call
            for group in slot_key_groups(slot_id, width, self.spec.max_parallelism):
                loaded = self.restored.load(group, self.schema)
                ids = pa.array(np.full(loaded.num_rows, group, np.int32))
                tables.append(loaded.append_column(self.live_schema.field(KEY_GROUP), ids))
        return pa.concat_tables(tables).combine_chunks()

    def _locator(
        self, rows: pd.DataFrame, row_groups: np.ndarray, changed: set[int]
    ) -> Callable[[pa.Table, pa.Table], pa.Table]:
        """How the processor's new state gets each key's ``_key_group``: from the rows
        (computed by Spark), else from the key's previous state, else (a key the
        processor added that neither holds) computed here as Spark computes it. The key
        groups whose rows in the new state differ from those it replaces (the rest of
        the state is carried over as it is) are added to ``changed``."""
        keys = list(self.spec.key_columns)

        def locate(new: pa.Table, old: pa.Table) -> pa.Table:
            known = pd.concat(
                [
                    rows[keys].assign(**{KEY_GROUP: row_groups}),
                    old.select([*keys, KEY_GROUP]).to_pandas(),
                ],
                ignore_index=True,
            )
            index = key_index(known, keys)
            first = ~index.duplicated()
            found = index[first].get_indexer(key_index(new.select(keys).to_pandas(), keys))
            groups = known[KEY_GROUP].to_numpy()[first][found].astype(np.int32)
            for i in np.flatnonzero(found < 0):
                groups[i] = self._key_group_of(new.slice(int(i), 1).select(keys))
            new = new.append_column(self.live_schema.field(KEY_GROUP), pa.array(groups))
            for group in np.unique(np.concatenate([groups, old[KEY_GROUP].to_numpy()])):
                if not _rows_of(new, int(group)).equals(_rows_of(old, int(group))):
                    changed.add(int(group))
            return new

        return locate

    def _key_group_of(self, key: pa.Table) -> int:
        """The key group of a key the processor added outside its rows."""
        values = [key[c][0].as_py() for c in key.column_names]
        try:
            return key_group_for_key(
                values, [t for _, t in key_types(self.spec.key_schema)], self.spec.max_parallelism
            )
        except KeyGroupError as exc:
            raise self.contract.error(
                f"added the state of key {values}, which is not in its rows and whose key "
                f"group cannot be computed ({exc})"
            ) from None

    def _snapshot(
        self,
        key_group: int,
        checkpoint_id: int,
        meta: dict[str, Any],
        table: pa.Table,
        mod_count: int,
        snapshots: dict[str, int],
    ) -> Ack:
        """Write the snapshot of one key group (nothing when unchanged since the base
        checkpoint's) and return its acknowledgement, for the caller to publish."""
        layout = SnapshotLayout.at(meta["path"])
        base = meta.get("base")
        participant = state_participant(self.spec.operator, key_group)
        epoch = meta.get("epoch")
        if base is not None and snapshots.get(str(base)) == mod_count:
            ack = Ack(checkpoint_id, participant, changed=False, epoch=epoch)
        else:
            files: tuple[DataFile, ...] = ()
            if table.num_rows:
                ids = pa.array([checkpoint_id] * table.num_rows, pa.int64())
                files = (
                    write_data_file(
                        layout.state_table,
                        {"operator": self.spec.operator, "key_group": str(key_group)},
                        f"ckpt-{checkpoint_id}",
                        table.append_column("checkpoint_id", ids),
                        distinct=self.spec.key_columns,
                    ),
                )
                detail = {"participant": participant, "files": [f.path for f in files]}
                crash_points.hit(layout, crash_points.STATE_SNAPSHOT, checkpoint_id, detail=detail)
            ack = Ack(
                checkpoint_id,
                participant,
                changed=True,
                files=files,
                rows=table.num_rows,
                bytes=sum(f.size for f in files),
                epoch=epoch,
            )
        snapshots[str(checkpoint_id)] = mod_count
        for old in [k for k in snapshots if base is not None and int(k) < int(base)]:
            del snapshots[old]
        log.debug(
            "checkpoint %d: key group %d of %s acknowledged (changed=%s, rows=%d)",
            checkpoint_id,
            key_group,
            self.spec.operator,
            ack.changed,
            ack.rows,
        )
        return ack
