"""The live keyed state of one partition: changes in Spark's state store over immutable files.

A partition's keyed state (the key groups it owns) is a log-structured merge of

* **the buffered changes**: the keys changed since the last file was written (their new
  state, or a deletion), kept as one Arrow value in Spark's state store
  (``applyInPandasWithState``), so a retried micro-batch starts from its own version;
  spilled to a private file (``_live/``) beyond ``keyed.writeBufferSize``;
* **runs**: immutable Parquet files, newest first: the ``state`` table files this
  partition wrote at cuts, the spilled files since the last cut, and after a restore the
  restored checkpoint's files (the table's files *are* the state). Each is read through
  the machine's :mod:`~barriered.statestore.state_cache`, so a batch reads the keys it
  touches, not the state.

A key's state is its newest entry: the buffered changes first, then each run in order; a
deleted key's marker row (hidden from every table version) ends the search. A restored
run carries the restored version's deletion vector: rows in it are not the state.

At a cut (:meth:`LiveState.flush`) the buffered changes and the spilled files become one
new file of the ``state`` table holding the changed keys only. Its footer names what the
coordinator turns into deletion vectors in the checkpoint's single commit
(:mod:`barriered.statestore.state_log`): the rows of older table files it replaces
(``barriered.deletes``, from each changed key's previous entry) and its own marker rows
(``barriered.hidden``). Past ``keyed.maxRuns`` table files the cut merges the newest of
them into its file (:func:`~barriered.statestore.merge_plan.to_absorb`;
``barriered.absorbs``); when that is all of them, and at the first cut after a restore
that did not claim its files (:func:`~barriered.statestore.live_manifest.new_manifest`),
the file is the partition's whole state and replaces every older row of its key groups
(``barriered.replaces``). A file stays *pending*, reported again at every cut, until a
checkpoint at or after the cut that wrote it has completed (the ``base`` of a marker):
an aborted checkpoint loses nothing.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from barriered import wall_time
from barriered.config.source_options import RESTORE_FROM
from barriered.errors import KeyedStateError
from barriered.files.fileio import join
from barriered.statestore.deletion_vectors import DeletionVector, contains, distinct, union
from barriered.statestore.dv_files import vector_rows
from barriered.statestore.entries import in_groups, newest_first, unchanged, with_columns
from barriered.statestore.evolution import conform
from barriered.statestore.key_groups import partition_key_groups
from barriered.statestore.live_manifest import FORMAT, Manifest, Pending, Run
from barriered.statestore.merge_plan import file_rows, merge_ranges, to_absorb
from barriered.statestore.state_cache import (
    GONE,
    HASH,
    POS,
    StateCache,
    Unit,
    key_hashes,
)
from barriered.statestore.state_files import (
    CHECKPOINT_ID,
    KEY_GROUP,
    FileWriter,
    chunk_units,
    file_info,
    lookup_unit,
    overlapping,
    read_notes,
)

log = logging.getLogger(__name__)

#: Columns of the buffered changes beyond the state's: the run and row the key's
#: previous entry is in (-1: none).
ORIGIN_RUN, ORIGIN_ROW = "__origin_run", "__origin_row"


@dataclass(frozen=True)
class LiveConfig:
    """What a partition's live state needs to know of its operator."""

    operator: str
    key_columns: tuple[str, ...]
    schema: pa.Schema  # key columns, then state fields
    max_parallelism: int
    table_uri: str  # this snapshot path's state table
    private_uri: str  # where spilled changes go
    write_buffer: int  # bytes of buffered changes before they are spilled
    max_runs: int  # table files of the partition before a cut compacts them
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def buffer_schema(self) -> pa.Schema:
        """The schema of the buffered changes."""
        origin = [pa.field(ORIGIN_RUN, pa.int32()), pa.field(ORIGIN_ROW, pa.int64())]
        return pa.schema([*self.merge_schema, *origin])

    @property
    def merge_schema(self) -> pa.Schema:
        """Entries as merged at a cut: the state, the key group, the hash, deleted."""
        extra = [
            pa.field(KEY_GROUP, pa.int32()),
            pa.field(HASH, pa.uint64()),
            pa.field(GONE, pa.bool_()),
        ]
        return pa.schema([*self.schema, *extra])

    @property
    def file_schema(self) -> pa.Schema:
        """The columns of a file written here (the ``state`` table's but ``operator``)."""
        extra = [pa.field(KEY_GROUP, pa.int32()), pa.field(CHECKPOINT_ID, pa.int64())]
        return pa.schema([*self.schema, *extra])


@dataclass(frozen=True)
class Found:
    """What :meth:`LiveState.lookup` found for a set of distinct keys.

    ``origin_run`` and ``origin_row`` name, per key, the table file (run id) and row
    that a change of the key replaces: :data:`NO_FILE` when no file holds it,
    :data:`SPILLED` when a spilled file does (whose notes name the table row).
    """

    hashes: np.ndarray  # per key asked for
    index: np.ndarray  # the keys that have a state (positions, ascending)
    state: pa.Table  # their state (key columns and fields), in that order
    origin_run: np.ndarray
    origin_row: np.ndarray
    in_buffer: np.ndarray  # per key: whether its newest entry is a buffered change


@dataclass(frozen=True)
class Flushed:
    """What a cut leaves for the checkpoint: every pending file, the key groups they
    hold, the file this cut wrote (None: nothing changed) and whether older table files
    were merged into it (a compaction)."""

    files: list[Pending]
    changed: set[int]
    written: Pending | None
    compacted: bool = False


#: Origins of a buffered change (``__origin_run``): no file holds the key; a spilled file
#: holds it.
NO_FILE, SPILLED = -1, -2
EMPTY = np.empty(0, np.int64)


class LiveState:
    """One partition's live keyed state during one call (see the module docstring).

    Parameters
    ----------
    config : LiveConfig
    cache : StateCache
        The machine's cache of state files.
    buffer : pyarrow.Table
        The buffered changes (:attr:`LiveConfig.buffer_schema`), sorted by :data:`HASH`.
    manifest : Manifest
    """

    def __init__(
        self, config: LiveConfig, cache: StateCache, buffer: pa.Table, manifest: Manifest
    ) -> None:
        self.config = config
        self.cache = cache
        self.buffer = buffer
        self.manifest = manifest

    @property
    def key_groups(self) -> range:
        """The key groups of this partition."""
        m = self.manifest
        return partition_key_groups(m.partition, m.partitions, self.config.max_parallelism)

    # -- the value in Spark's state store ----------------------------------------------------

    @classmethod
    def from_value(
        cls, config: LiveConfig, cache: StateCache, blob: bytes, manifest_json: str
    ) -> LiveState:
        """The live state stored by :meth:`value`.

        Raises
        ------
        KeyedStateError
            When the value was written in another format.
        """
        manifest = Manifest.from_json(manifest_json)
        if manifest.format != FORMAT:
            raise KeyedStateError(
                f"keyed operator {config.operator!r}: partition {manifest.partition}'s live "
                f"state in Spark's checkpoint has format {manifest.format}, this version "
                f"reads {FORMAT}. Restore the latest checkpoint into a new checkpoint "
                f'location (.option("{RESTORE_FROM.name}", "latest")); nothing was written'
            )
        buffer = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
        if buffer.schema != config.buffer_schema:  # the state fields evolved on resume
            state = conform(buffer, config.schema, config.defaults)
            rest = {n: buffer[n] for n in config.buffer_schema.names if n not in state.column_names}
            buffer = with_columns(state, rest).cast(config.buffer_schema)
        return cls(config, cache, buffer.combine_chunks(), manifest)

    def value(self) -> tuple[bytes, str]:
        """The buffered changes (Arrow IPC) and the manifest (JSON), for Spark's store."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.buffer.schema) as writer:
            writer.write_table(self.buffer)
        return bytes(sink.getvalue().to_pybytes()), self.manifest.to_json()

    # -- reads ---------------------------------------------------------------------------

    def _not_state(self, run: Run) -> np.ndarray | None:
        """A restored run's deleted rows (the restored version's deletion vector: inline,
        or in a file named by its absolute path; cached per process)."""
        if run.dv is None:
            return None
        where = f"restored file {run.uri!r} of keyed operator {self.config.operator!r}"
        return vector_rows(DeletionVector.from_json(run.dv), "", where)

    def lookup(self, keys: pa.Table, key_groups: np.ndarray) -> Found:
        """The state of ``keys`` (distinct; the key columns) of ``key_groups``: the
        newest entry of each (buffered changes, then the runs in order)."""
        n = keys.num_rows
        cols = self.config.key_columns
        hashes = key_hashes(keys, cols)
        known = np.zeros(n, bool)
        in_buffer = np.zeros(n, bool)
        origin_run = np.full(n, NO_FILE, np.int32)
        origin_row = np.full(n, -1, np.int64)
        pieces: list[tuple[np.ndarray, pa.Table]] = []

        def take(asked: np.ndarray, rows: pa.Table) -> None:
            alive = ~rows[GONE].to_numpy(zero_copy_only=False)
            if alive.any():
                pieces.append((asked[alive], rows.filter(pa.array(alive))))

        if self.buffer.num_rows:
            query, here = Unit(self.buffer).find(hashes, keys, cols)
            hit = self.buffer.take(pa.array(here))
            known[query] = in_buffer[query] = True
            origin_run[query] = hit[ORIGIN_RUN].to_numpy()
            origin_row[query] = hit[ORIGIN_ROW].to_numpy()
            take(query, hit)
        for run in self.manifest.runs:
            todo = np.flatnonzero(~known)
            if not len(todo):
                break
            groups = key_groups[todo]
            not_state = self._not_state(run)
            info = file_info(run.uri, run.key_group)
            for chunk in overlapping(info, int(groups.min()), int(groups.max())):
                ask = todo[(groups >= chunk.low) & (groups <= chunk.high)]
                if not len(ask):
                    continue
                asked_keys = keys.take(pa.array(ask))
                unit = lookup_unit(self.cache, run.uri, info, chunk, cols, hashes[ask], asked_keys)
                query, here = unit.find(hashes[ask], asked_keys, cols)
                rows = unit.table.take(pa.array(here))
                positions = rows[POS].to_numpy()
                if not_state is not None and len(positions):
                    current = ~contains(not_state, positions)
                    query, positions = query[current], positions[current]
                    rows = rows.filter(pa.array(current))
                asked = ask[query]
                known[asked] = True
                origin_run[asked] = SPILLED if run.private else run.id
                origin_row[asked] = positions
                take(asked, rows)
        index = np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, np.int64)
        state = (
            pa.concat_tables([self._conformed(t) for _, t in pieces])
            if pieces
            else self.config.schema.empty_table()
        )
        order = np.argsort(index)
        return Found(
            hashes,
            index[order].astype(np.int64),
            state.take(pa.array(order)),
            origin_run,
            origin_row,
            in_buffer,
        )

    def _conformed(self, table: pa.Table) -> pa.Table:
        columns = [c for c in table.column_names if c in self.config.schema.names]
        return conform(table.select(columns), self.config.schema, self.config.defaults)

    # -- writes --------------------------------------------------------------------------

    def apply(
        self, keys: pa.Table, key_groups: np.ndarray, found: Found, new: pa.Table, keep: np.ndarray
    ) -> set[int]:
        """Buffer the changes of one call; return the key groups that changed.

        Parameters
        ----------
        keys : pyarrow.Table
            The keys the call decided on (distinct; the key columns), as given to
            :meth:`lookup`, which returned ``found``.
        key_groups : numpy.ndarray
            Their key groups.
        found : Found
        new : pyarrow.Table
            Their new state (key columns and fields), row for row with ``keys``.
        keep : numpy.ndarray
            Per key, True: ``new`` is its state; False: it has none any more.
        """
        had = np.zeros(keys.num_rows, bool)
        had[found.index] = True
        rewritten = np.zeros(keys.num_rows, bool)
        both = np.flatnonzero(keep[found.index])
        if len(both):  # a state rewritten as it was is no change
            at = found.index[both]
            same = unchanged(
                new.take(pa.array(at)), found.state.take(pa.array(both)), new.column_names
            )
            rewritten[at[same]] = True
        upsert = keep & ~rewritten
        only_buffered = found.in_buffer & (found.origin_run == NO_FILE)
        marker = ~keep & had & ~only_buffered  # a file holds it: mark it deleted
        touched = np.flatnonzero(upsert | (~keep & had))
        if not len(touched):
            return set()
        kept = self.buffer
        if kept.num_rows:  # the keys' earlier buffered entries go
            _, here = Unit(kept).find(
                found.hashes[touched], keys.take(pa.array(touched)), self.config.key_columns
            )
            mask = np.ones(kept.num_rows, bool)
            mask[here] = False
            kept = kept.filter(pa.array(mask))
        entries = np.flatnonzero(upsert | marker)
        gone = marker[entries]
        rows = new.take(pa.array(entries))
        if gone.any():  # a marker holds the key and no state
            rows = pa.Table.from_arrays(
                [
                    rows[c]
                    if c in self.config.key_columns
                    else pc.if_else(pa.array(gone), pa.nulls(len(entries), rows[c].type), rows[c])
                    for c in rows.column_names
                ],
                schema=rows.schema,
            )
        added = with_columns(
            rows,
            {
                KEY_GROUP: pa.array(key_groups[entries], pa.int32()),
                HASH: pa.array(found.hashes[entries], pa.uint64()),
                GONE: pa.array(gone, pa.bool_()),
                ORIGIN_RUN: pa.array(found.origin_run[entries], pa.int32()),
                ORIGIN_ROW: pa.array(found.origin_row[entries], pa.int64()),
            },
        )
        merged = pa.concat_tables([kept, added.cast(self.config.buffer_schema)])
        order = np.argsort(merged[HASH].to_numpy())
        self.buffer = merged.take(pa.array(order)).combine_chunks()
        return {int(g) for g in distinct(key_groups[touched])}

    def spill_if_full(self) -> bool:
        """Write the buffered changes to a private file when they pass
        ``keyed.writeBufferSize``; True when it did."""
        if self.buffer.nbytes <= self.config.write_buffer:
            return False
        entries, deletes = self._changes()
        name = f"p{self.manifest.partition}-{uuid.uuid4().hex}.parquet"
        uri = join(self.config.private_uri, name)
        writer = FileWriter(uri, self.config.file_schema, self.config.key_columns, 0, self.cache)
        for low, high in merge_ranges(self.key_groups, entries[KEY_GROUP].to_numpy(), []):
            writer.add(in_groups(entries, low, high))
        writer.close(deletes, ())
        self.manifest.runs.insert(0, self.manifest.add_run(uri=uri, rel=None, private=True))
        log.info(
            "keyed operator %s: partition %d spilled %d buffered change(s) (%d bytes, "
            "keyed.writeBufferSize %d) to %s",
            self.config.operator,
            self.manifest.partition,
            entries.num_rows,
            self.buffer.nbytes,
            self.config.write_buffer,
            uri,
        )
        self.buffer = self.config.buffer_schema.empty_table()
        return True

    def _changes(self) -> tuple[pa.Table, dict[str, np.ndarray]]:
        """The buffered changes as entries (:attr:`LiveConfig.merge_schema`, by hash)
        and the rows of table files they replace, by path."""
        by_id = {r.id: r for r in self.manifest.runs}
        runs = self.buffer[ORIGIN_RUN].to_numpy()
        rows = self.buffer[ORIGIN_ROW].to_numpy()
        deletes = {}
        for run_id in distinct(runs[runs >= 0]):
            run = by_id.get(int(run_id))
            if run is not None and run.rel is not None:
                deletes[run.rel] = distinct(rows[runs == run_id])
        return self.buffer.drop_columns([ORIGIN_RUN, ORIGIN_ROW]), deletes

    def _entries(self, run: Run, low: int, high: int) -> pa.Table:
        """The entries of ``run`` in key groups ``low..high`` (merge schema, by hash)."""
        not_state = self._not_state(run)
        parts = []
        info = file_info(run.uri, run.key_group)
        for unit in chunk_units(self.cache, run.uri, info, low, high, self.config.key_columns):
            rows = unit.table
            groups = rows[KEY_GROUP].to_numpy()
            keep = (groups >= low) & (groups <= high)
            if not_state is not None:
                keep &= ~contains(not_state, rows[POS].to_numpy())
            rows = rows.filter(pa.array(keep))
            extra = {KEY_GROUP: rows[KEY_GROUP].cast(pa.int32()), HASH: rows[HASH]}
            parts.append(with_columns(self._conformed(rows), {**extra, GONE: rows[GONE]}))
        if not parts:
            return self.config.merge_schema.empty_table()
        return parts[0] if len(parts) == 1 else newest_first(parts, self.config.key_columns)

    def _merged(self, buffered: pa.Table, runs: Sequence[Run], low: int, high: int) -> pa.Table:
        """One entry per key of key groups ``low..high``: the buffered one, else the one
        of the newest of ``runs`` holding it (by hash)."""
        mine = in_groups(buffered, low, high)
        older = [self._entries(run, low, high) for run in runs]
        older = [t for t in older if t.num_rows]
        return newest_first([mine, *older], self.config.key_columns) if older else mine

    def flush(self, checkpoint_id: int, base: int | None) -> Flushed:
        """Write what changed since the last cut as one file of the ``state`` table
        (merged with the newest table files past ``keyed.maxRuns`` of them, the whole
        state after a restore of files this table does not hold) and return what the
        checkpoint must hold.

        Parameters
        ----------
        checkpoint_id : int
            The checkpoint cut in this batch.
        base : int or None
            The latest completed checkpoint when the cut was planned: the files of cuts
            up to it are committed.
        """
        manifest = self.manifest
        manifest.pending = [p for p in manifest.pending if base is None or p.first_cut > base]
        private = [r for r in manifest.runs if r.private]
        table_runs = [r for r in manifest.runs if not r.private]
        changed_rows = self.buffer.num_rows + sum(file_rows(r) for r in private)
        absorbed = (
            list(table_runs)
            if manifest.full_next
            else to_absorb(table_runs, changed_rows, self.config.max_runs)
        )
        full = manifest.full_next or (bool(absorbed) and len(absorbed) == len(table_runs))
        written = None
        if full or absorbed or self.buffer.num_rows or private:
            buffered, deletes = self._changes()
            replaces: tuple[int, ...] = ()
            absorbs = tuple(r.rel for r in absorbed if r.rel is not None)
            if full:  # the whole state: it replaces every older row of its key groups
                deletes, replaces, absorbs = {}, tuple(self.key_groups), ()
            else:  # the changes: they replace the rows the spilled ones replaced too
                for spilled in private:
                    for path, rows in read_notes(spilled.uri).deletes.items():
                        deletes[path] = union(deletes.get(path, rows[:0]), rows)
                for run in absorbed:  # and every row of its key groups in the files merged
                    mine = self._my_rows(run)
                    deletes[str(run.rel)] = union(deletes.get(str(run.rel), EMPTY), mine)
            written, run = self._table_file(buffered, [*private, *absorbed], full, deletes,
                                            replaces, absorbs, checkpoint_id)  # fmt: skip
            manifest.runs = [run, *table_runs[len(absorbed) :]]
            manifest.pending.append(written)
        manifest.full_next = False
        self.buffer = self.config.buffer_schema.empty_table()
        changed = {g for p in manifest.pending for g in p.groups}
        return Flushed(list(manifest.pending), changed, written, bool(absorbed))

    def _my_rows(self, run: Run) -> np.ndarray:
        """The rows of ``run`` in this partition's key groups (every row of a file it
        wrote; of a restored one, those its chunks say)."""
        mine = self.key_groups
        info = file_info(run.uri, run.key_group)
        if all(mine.start <= c.low and c.high <= mine[-1] for c in info.chunks):
            return np.arange(int(info.starts[-1]), dtype=np.int64)
        parts = []
        cols = self.config.key_columns
        for unit in chunk_units(self.cache, run.uri, info, mine.start, mine[-1], cols):
            groups = unit.table[KEY_GROUP].to_numpy()
            inside = (groups >= mine.start) & (groups <= mine[-1])
            parts.append(unit.table[POS].to_numpy()[inside])
        return np.sort(np.concatenate(parts)) if parts else EMPTY

    def _table_file(
        self,
        buffered: pa.Table,
        sources: Sequence[Run],
        drop_deleted: bool,
        deletes: Mapping[str, np.ndarray],
        replaces: Sequence[int],
        absorbs: Sequence[str],
        checkpoint_id: int,
    ) -> tuple[Pending, Run]:
        """Write the buffered changes over ``sources`` (without deleted keys' markers
        when ``drop_deleted``) as a new file of the ``state`` table, written at the cut
        of ``checkpoint_id``, one key-group range at a time."""
        name = f"p{self.manifest.partition}-c{checkpoint_id}-{uuid.uuid4().hex}.parquet"
        rel = f"operator={self.config.operator}/{name}"
        uri = join(self.config.table_uri, rel)
        writer = FileWriter(uri, self.config.file_schema, self.config.key_columns,
                            checkpoint_id, self.cache)  # fmt: skip
        for low, high in merge_ranges(self.key_groups, buffered[KEY_GROUP].to_numpy(), sources):
            entries = self._merged(buffered, sources, low, high)
            if drop_deleted:
                entries = entries.filter(pc.invert(entries[GONE]))
            writer.add(entries)
        size, notes = writer.close(deletes, replaces, absorbs)
        groups = list(notes.groups)
        stats = {
            "numRecords": writer.rows,
            "minValues": {KEY_GROUP: min(groups, default=0), CHECKPOINT_ID: checkpoint_id},
            "maxValues": {KEY_GROUP: max(groups, default=0), CHECKPOINT_ID: checkpoint_id},
            "nullCount": {KEY_GROUP: 0, CHECKPOINT_ID: 0},
        }
        pending = Pending(
            rel=rel,
            size=size,
            rows=writer.rows,
            modification_time=wall_time.now_ms(),
            stats=json.dumps(stats, separators=(",", ":")),
            rows_by_group={str(g): n for g, n in writer.rows_by_group.items()},
            first_cut=checkpoint_id,
        )
        return pending, self.manifest.add_run(uri=uri, rel=rel)
