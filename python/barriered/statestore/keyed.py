"""The keyed operator: a user processor run per Spark partition, snapshotting at markers.

``barriered.keyed(df, *keys).process(processor)`` groups the stream so that each Spark
partition holds exactly one group, its contiguous range of key groups
(:func:`~barriered.statestore.key_groups.group_values`), and runs
:class:`KeyedOperator` through ``applyInPandasWithState``: one Python call per
partition and micro-batch sees every row of its key groups. The data rows go to the
processor in one call (:mod:`barriered.statestore.vectorized`) with the state of the
keys they hold, read from the partition's live state
(:mod:`barriered.statestore.live_state`): the changes since the last state file, in
Spark's state store, over the files of the ``state`` table, read through the machine's
cache. A batch costs what it touches, not the state.

The marker rows of a cut make the partition write what changed since the last cut as
one file of the ``state`` table (nothing when nothing changed) and acknowledge every
key group it owns in one file (:func:`~barriered.statestore.acks.write_acks`); the
coordinator commits the files of every partition in the checkpoint's one commit.

After a restore, a partition's first call reads the restored checkpoint's files of its
key groups as they are (nothing is read on the driver, nothing is loaded up front); its
first cut writes its whole state unless the restore claimed the files
(:func:`~barriered.statestore.live_manifest.new_manifest`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from barriered import crash_points
from barriered.config.source_options import RESTORE_FROM
from barriered.control.columns import BARRIER, BARRIER_META, CHANNEL, KEY_GROUP, SEQ, SLOT
from barriered.errors import KeyedStateError, KeyGroupError
from barriered.files.fileio import join
from barriered.files.storage import register
from barriered.statestore.acks import Ack, DataFile, state_participant, write_acks
from barriered.statestore.contract import Contract
from barriered.statestore.dv_files import VECTORS_READ
from barriered.statestore.key_groups import group_values, key_group_for_key, key_types
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.live_manifest import RestoredFile, new_manifest
from barriered.statestore.live_state import Flushed, Found, LiveConfig, LiveState
from barriered.statestore.state_cache import Unit, build_unit, cache
from barriered.statestore.state_schema import columns_schema
from barriered.statestore.vectorized import BatchProcessor, PerKey

log = logging.getLogger(__name__)

_META = (CHANNEL, SEQ, BARRIER, BARRIER_META, KEY_GROUP, SLOT)

#: The live state of a partition in Spark's state store: its buffered changes (Arrow
#: IPC) and its manifest (JSON, :class:`~barriered.statestore.live_manifest.Manifest`).
LIVE_STATE_DDL = "changes binary, manifest string"


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
    #: The shuffle partitions its live state is split into (one group per partition).
    partitions: int = 1

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
            "partitions": self.partitions,
        }


@dataclass(frozen=True)
class Restored:
    """The restored checkpoint's files of one operator (any partitioning)."""

    checkpoint_id: int
    files: tuple[RestoredFile, ...] = ()
    #: Whether the files are this snapshot path's table files as they are (a restore of
    #: the latest checkpoint into its own path); else the first cut writes the whole state.
    claimed: bool = False
    #: Values of state fields the snapshot's operator did not have (schema evolution).
    defaults: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LiveSettings:
    """The ``keyed.*`` settings the executors' calls need."""

    write_buffer: int
    max_runs: int
    cache_size: int
    cache_dir: str | None = None
    #: How errors name the cache's bound (the session key of ``cache_size``).
    cache_size_setting: str = "the local cache's size"


def bound_processor(spec: OperatorSpec, processor: Any) -> tuple[BatchProcessor, Contract]:
    """``processor`` as a :class:`~barriered.statestore.vectorized.BatchProcessor` (a
    per-key one wrapped) and the contract its results are checked against."""
    batch = hasattr(processor, "process_batch")
    contract = Contract(
        processor=type(processor).__name__,
        operator=spec.operator,
        method="process_batch" if batch else "process",
        keys=spec.key_columns,
        state=columns_schema(spec.to_dict()),
        output=spec.output_columns,
    )
    return (processor if batch else PerKey(processor, contract)), contract


class KeyedOperator:
    """Runs a user processor for one partition's key groups and snapshots at markers.

    Called by ``applyInPandasWithState`` as ``(key, frames, state)``; the processor is
    either a :class:`~barriered.statestore.vectorized.BatchProcessor` or a per-key one
    (``process(key, rows, state)``). ``storage`` is the storage settings of the snapshot
    path's store (:mod:`barriered.files.storage`), handed to the executors' Python
    workers with the operator itself, never in a file.
    """

    def __init__(
        self,
        spec: OperatorSpec,
        processor: Any,
        root: str,
        settings: LiveSettings,
        restored: Restored | None = None,
        storage: tuple[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.spec = spec
        self.root = root
        self.settings = settings
        self.restored = restored
        self.storage = storage
        self.schema = columns_schema(spec.to_dict())
        self.user_columns = [c for c in spec.input_columns if c not in _META]
        self.partition_of_group = {v: p for p, v in enumerate(group_values(spec.partitions))}
        self.processor, self.contract = bound_processor(spec, processor)
        layout = SnapshotLayout.at(root)
        self.config = LiveConfig(
            operator=spec.operator,
            key_columns=spec.key_columns,
            schema=self.schema,
            max_parallelism=spec.max_parallelism,
            table_uri=layout.state_table,
            private_uri=join(layout.live_dir, spec.operator),
            write_buffer=settings.write_buffer,
            max_runs=settings.max_runs,
            defaults=dict(restored.defaults) if restored else {},
        )

    def __call__(
        self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame], live: Any
    ) -> Iterator[pd.DataFrame]:
        if self.storage is not None:
            register(*self.storage)
        data_parts, marker_parts = [], []
        for part in frames:
            part.columns = list(self.spec.input_columns)
            is_marker = part[BARRIER].notna().to_numpy()
            if (~is_marker).any():
                data_parts.append(part[~is_marker] if is_marker.any() else part)
            if is_marker.any():  # only the marker columns: the rest is null
                marker_parts.append(part.loc[is_marker, [BARRIER, BARRIER_META, KEY_GROUP]])
        state = self._live_state(int(key[0]), live)
        output = None
        if data_parts:
            data = data_parts[0] if len(data_parts) == 1 else pd.concat(data_parts)
            output = self._process(state, data.reset_index(drop=True))
        state.spill_if_full()
        if marker_parts:
            self._snapshot(state, pd.concat(marker_parts, ignore_index=True))
        live.update(state.value())
        if output is not None and len(output):
            yield output

    def _live_state(self, group: int, live: Any) -> LiveState:
        """The partition's live state: from Spark's state store, or new (restored)."""
        partition = self.partition_of_group.get(group)
        if partition is None:
            raise KeyedStateError(
                f"keyed operator {self.spec.operator!r}: a call for group {group}, which is "
                f"none of the {self.spec.partitions} partitions' (the snapshot path's "
                "registration of the operator does not match this checkpoint location); "
                "nothing was written. Restore the latest checkpoint into a new checkpoint "
                f'location (.option("{RESTORE_FROM.name}", "latest"))'
            )
        settings = self.settings
        store = cache(settings.cache_dir, settings.cache_size, settings.cache_size_setting)
        if not live.exists:
            restored = self.restored.files if self.restored else ()
            claimed = self.restored is None or self.restored.claimed
            manifest = new_manifest(
                partition, self.spec.partitions, self.spec.max_parallelism, restored, claimed
            )
            empty = self.config.buffer_schema.empty_table()
            return LiveState(self.config, store, empty, manifest)
        blob, manifest_json = live.get
        state = LiveState.from_value(self.config, store, blob, manifest_json)
        if (state.manifest.partition, state.manifest.partitions) != (
            partition,
            self.spec.partitions,
        ):
            raise KeyedStateError(
                f"keyed operator {self.spec.operator!r}: the live state in Spark's "
                f"checkpoint of the call for partition {partition} of "
                f"{self.spec.partitions} was written for partition "
                f"{state.manifest.partition} of {state.manifest.partitions}; nothing was "
                "written. Restore the latest checkpoint into a new checkpoint location "
                f'(.option("{RESTORE_FROM.name}", "latest"))'
            )
        return state

    def _process(self, state: LiveState, data: pd.DataFrame) -> pd.DataFrame | None:
        """Run the processor on the data rows and buffer the state it returns."""
        order = np.lexsort((data[SEQ].to_numpy(), data[CHANNEL].to_numpy()))
        if (order != np.arange(len(order))).any():
            data = data.take(order)
        rows = data[self.user_columns].reset_index(drop=True)
        cols = list(self.spec.key_columns)
        first = ~rows.duplicated(cols).to_numpy()
        key_schema = pa.schema([self.schema.field(c) for c in cols])
        keys = pa.Table.from_pandas(rows.loc[first, cols], schema=key_schema, preserve_index=False)
        groups = data[KEY_GROUP].to_numpy()[first].astype(np.int32)
        found = state.lookup(keys, groups)
        output, new_frame = self.contract.result(
            self.processor.process_batch(rows, found.state.to_pandas())
        )
        output = self.contract.check_output(output)
        new = self.contract.new_state(new_frame)
        keys, groups, found, new, keep = self._decided(state, keys, groups, found, new)
        state.apply(keys, groups, found, new, keep)
        return output

    def _decided(
        self, state: LiveState, keys: pa.Table, groups: np.ndarray, found: Found, new: pa.Table
    ) -> tuple[pa.Table, np.ndarray, Found, pa.Table, np.ndarray]:
        """The keys the call decided on, row for row with their new state and whether
        they keep one: the keys of the rows (without a row in ``new``: deleted), then
        the keys ``new`` adds outside the rows (looked up first)."""
        cols = self.spec.key_columns
        unit = Unit(build_unit(new, cols))
        asked, here = unit.find(found.hashes, keys, cols)
        keep = np.zeros(keys.num_rows, bool)
        keep[asked] = True
        picked = np.full(keys.num_rows, -1, np.int64)
        picked[asked] = here  # -1: no new state (a null row; the key is deleted)
        aligned = unit.table.select(self.schema.names).take(pa.array(picked, mask=picked < 0))
        outside = np.ones(new.num_rows, bool)
        outside[here] = False
        if not outside.any():
            return keys, groups, found, aligned, keep
        extra = unit.table.filter(pa.array(outside)).select(self.schema.names)
        extra_groups = np.array(
            [self._key_group_of(extra.slice(i, 1).select(cols)) for i in range(extra.num_rows)],
            np.int32,
        )
        more = state.lookup(extra.select(list(cols)), extra_groups)
        n = keys.num_rows
        combined = Found(
            np.concatenate([found.hashes, more.hashes]),
            np.concatenate([found.index, more.index + n]),
            pa.concat_tables([found.state, more.state]),
            np.concatenate([found.origin_run, more.origin_run]),
            np.concatenate([found.origin_row, more.origin_row]),
            np.concatenate([found.in_buffer, more.in_buffer]),
        )
        return (
            pa.concat_tables([keys, extra.select(list(cols))]),
            np.concatenate([groups, extra_groups]),
            combined,
            pa.concat_tables([aligned, extra]),
            np.concatenate([keep, np.ones(extra.num_rows, bool)]),
        )

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

    def _snapshot(self, state: LiveState, markers: pd.DataFrame) -> None:
        """Write what changed since the last cut and acknowledge every key group of the
        markers (one file of acknowledgements per snapshot path and checkpoint)."""
        metas = [json.loads(m) for m in markers[BARRIER_META]]
        ids = [int(c) for c in markers[BARRIER]]
        bases = [m.get("base") for m in metas if m.get("base") is not None]
        began = time.perf_counter()
        flushed = state.flush(min(ids), max(bases) if bases else None)
        write_ms = round((time.perf_counter() - began) * 1000)
        if flushed.written is not None:
            layout = SnapshotLayout.at(metas[0]["path"])
            partition = state.manifest.partition
            detail = {"participant": f"p{partition}", "files": [flushed.written.rel]}
            point = (
                crash_points.STATE_COMPACTION if flushed.compacted else crash_points.STATE_SNAPSHOT
            )
            crash_points.hit(layout, point, min(ids), detail=detail)
        vectors = state.manifest.vector_files()  # kept by retention while the partition reads them
        acks: dict[tuple[str, int], list[Ack]] = {}
        for checkpoint_id, meta, group in zip(ids, metas, markers[KEY_GROUP], strict=True):
            ack = self._ack(int(group), checkpoint_id, meta.get("epoch"), flushed)
            extra: dict[str, Any] = {}
            if flushed.written is not None:
                extra["write_ms"] = write_ms
            if vectors and (meta["path"], checkpoint_id) not in acks:  # once per call
                extra[VECTORS_READ] = vectors
            if extra:
                ack = replace(ack, extra=extra)
            acks.setdefault((meta["path"], checkpoint_id), []).append(ack)
        for (path, _), written in acks.items():
            write_acks(SnapshotLayout.at(path), written)

    def _ack(self, key_group: int, checkpoint_id: int, epoch: int | None, flushed: Flushed) -> Ack:
        """One key group's acknowledgement: the pending files holding its rows (files of
        earlier cuts no completed checkpoint holds yet are reported again); its rows and
        a share of the bytes of the file this cut wrote (what this checkpoint wrote)."""
        participant = state_participant(self.spec.operator, key_group)
        if key_group not in flushed.changed:
            return Ack(checkpoint_id, participant, changed=False, epoch=epoch)
        mine = [p for p in flushed.files if key_group in p.groups]
        new = flushed.written
        rows = new.rows_by_group.get(str(key_group), 0) if new is not None else 0
        size = new.size * rows // max(new.rows, 1) if new is not None else 0
        log.debug(
            "checkpoint %d: key group %d of %s acknowledged (%d pending file(s), rows=%d)",
            checkpoint_id,
            key_group,
            self.spec.operator,
            len(mine),
            rows,
        )
        return Ack(
            checkpoint_id,
            participant,
            changed=True,
            files=tuple(
                DataFile(
                    p.rel,
                    p.size,
                    p.rows,
                    {"operator": self.spec.operator},
                    p.modification_time,
                    p.stats,
                    p.first_cut,
                )
                for p in mine
            ),
            rows=rows,
            bytes=size,
            epoch=epoch,
        )


__all__ = [
    "LIVE_STATE_DDL",
    "KeyedOperator",
    "LiveSettings",
    "OperatorSpec",
    "Restored",
    "bound_processor",
]
