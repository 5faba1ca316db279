"""The sink's second phase: make the staged output of a completed checkpoint visible.

The coordinator plans checkpoint ``n`` while committing it
(:func:`barriered.sink.commit_plan.plan`: the plan goes into the ``state`` table's
commit metadata, the completion point), and calls :func:`commit` right after that
commit: one Delta commit per sink adding the files of every batch of the plan (mode
append) or merging their rows by the key columns (mode update), with the app
transaction ``(barriered.sink.<sink>, n)``. A crash in between is finished by the next
run (:func:`finish`), from the plan in the state table; the app transaction makes a
repeated commit a no-op. Staged batches nothing will commit (staged
by a crashed run after the cut it was restored from) are deleted by :func:`sweep`.

A run that *continues* an older one (a restart from Spark's own checkpoint location, no
``restoreFrom``) does not re-run the older run's batches below its first one: those
still staged are *carried* into its first checkpoint's plan (:mod:`barriered.sink.commit_plan`);
the older run's batches from the new run's first batch on are run again and so are
dropped (:func:`sweep`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties, Transaction

from barriered import wall_time
from barriered.config.sink_options import UPDATE
from barriered.errors import SinkError
from barriered.files.fileio import filesystem, join, list_names
from barriered.files.storage import delta_options
from barriered.sink import owner, staging
from barriered.sink import schema as output_schema
from barriered.sink.commit_plan import SinkCommit, SinkPlan, plans_from_metadata
from barriered.sink.kafka import publisher
from barriered.sink.kafka.options import KIND as KAFKA
from barriered.sink.options import SinkSettings
from barriered.sink.staging import StagedBatch, forget
from barriered.statestore.delta_tables import commit_files, committed_version, open_table
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

PARTICIPANT_PREFIX = "sink/"
#: Commit metadata of the sink's creation of an empty table (mode update).
CREATED_KEY = "barriered.created"
#: Row number column of mode update's last-row-per-key (not an output column).
ROW = "__barriered_row"


def participant(sink_id: str) -> str:
    """Participant name of a sink: acknowledged once the checkpoint's cut batch is staged."""
    return PARTICIPANT_PREFIX + sink_id


def _already(path: str, app_id: str, checkpoint_id: int, epoch: int) -> int | None:
    """The version of the table that committed ``checkpoint_id`` (None: not committed)."""
    table = open_table(path)
    if table is None:
        return None
    done = table.transaction_version(app_id)
    if done is None or done < checkpoint_id:
        return None
    return committed_version(table, checkpoint_id, epoch)


def _read_staged(path: str, batches: Sequence[StagedBatch]) -> pa.Table:
    """The rows of the staged batches, in batch order (mode update stages whole rows)."""
    fs, root = filesystem(path)
    parts = [pq.read_table(f"{root}/{f.path}", filesystem=fs) for b in batches for f in b.files]
    return pa.concat_tables(parts, promote_options="default")


def _merge(
    settings: SinkSettings,
    schema: pa.Schema,
    rows: pa.Table,
    props: CommitProperties,
    metadata: Mapping[str, Any],
) -> tuple[int, int]:
    """Merge ``rows`` (the last row of a key wins) into the table by the key columns;
    return the new version and how many rows were merged."""
    keys = list(settings.key_columns)
    numbered = rows.append_column(ROW, pa.array(range(rows.num_rows), pa.int64()))
    last = numbered.group_by(keys, use_threads=False).aggregate([(ROW, "max")])[ROW + "_max"]
    source = rows.take(sorted(last.to_pylist())).cast(schema)
    table = open_table(settings.path)
    if table is None:
        write_deltalake(
            settings.path,
            schema.empty_table(),
            partition_by=list(settings.partition_by) or None,
            commit_properties=CommitProperties(custom_metadata={**metadata, CREATED_KEY: True}),
            storage_options=delta_options(settings.path),
        )
        table = open_table(settings.path)
        assert table is not None
    predicate = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
    (
        table.merge(source, predicate, source_alias="s", target_alias="t", commit_properties=props)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    table.update_incremental()
    return table.version(), source.num_rows


def guard(
    root: str, settings: SinkSettings, schema: pa.Schema, lineage: owner.Lineage | None = None
) -> tuple[DeltaTable | None, bool]:
    """The output table (None: not created yet) if the sink of snapshot path ``root`` may
    write it, and whether the sink must record itself as its owner first.

    Raises
    ------
    SinkError
        When another query's sink owns the table, no sink wrote it (without
        ``adoptTable``), or its columns or partitioning are not the output's
        (:mod:`barriered.sink.owner`, :mod:`barriered.sink.schema`).
    """
    table = open_table(settings.path)
    claim = owner.check(table, settings, root, lineage)
    if table is not None:
        output_schema.check_table(settings.path, table, schema, settings.partition_by)
    return table, claim


def _commit_one(
    layout: SnapshotLayout, checkpoint_id: int, p: SinkPlan, lineage: owner.Lineage | None
) -> SinkCommit:
    staged = [staging.read(layout, p.sink_id, e, b) for e, b in p.batches]
    batches = [b for b in staged if b is not None]
    if not batches:
        table = open_table(p.path)
        return SinkCommit(p.sink_id, None if table is None else table.version())
    settings, schema = batches[-1].settings, batches[-1].schema
    assert isinstance(settings, SinkSettings)
    table, claim = guard(layout.root, settings, schema, lineage)
    if claim:
        assert table is not None
        owner.record(table, settings, layout.root)
    if len(batches) < len(staged):
        missing = [b for b, s in zip(p.batches, staged, strict=True) if s is None]
        raise SinkError(
            f"sink {p.sink_id!r}: checkpoint {checkpoint_id} commits the staged (epoch, "
            f"batch) {missing}, but their records under "
            f"{layout.sink_dir(p.sink_id)!r} are gone; their output cannot be committed"
        )
    files = [f for b in batches for f in b.files]
    rows, size = sum(b.rows for b in batches), sum(b.bytes for b in batches)
    metadata = {
        "barriered.epoch": p.epoch,
        owner.SNAPSHOT_PATH_KEY: layout.root,
        owner.SINK_ID_KEY: settings.sink_id,
    }
    version = _already(p.path, settings.app_id, checkpoint_id, p.epoch)
    if version is not None:
        log.info("sink %s: checkpoint %d already committed", p.sink_id, checkpoint_id)
    elif not files:
        table = open_table(p.path)
        version = None if table is None else table.version()
    elif settings.mode == UPDATE:
        props = CommitProperties(
            custom_metadata={**metadata, "barriered.checkpoint_id": checkpoint_id},
            app_transactions=[Transaction(settings.app_id, checkpoint_id, wall_time.now_ms())],
        )
        version, rows = _merge(settings, schema, _read_staged(p.path, batches), props, metadata)
    else:
        version = commit_files(
            p.path,
            schema,
            settings.partition_by,
            checkpoint_id,
            files,
            metadata=metadata,
            app_id=settings.app_id,
        ).version
    if table is None and version is not None:  # this commit created the table
        created = open_table(settings.path)
        assert created is not None
        owner.record(created, settings, layout.root)
    forget(layout, batches, delete_data=settings.mode == UPDATE)
    log.info(
        "sink %s: checkpoint %d committed %d batch(es), %d rows, table version %s",
        p.sink_id,
        checkpoint_id,
        len(batches),
        rows,
        version,
    )
    return SinkCommit(p.sink_id, version, rows, size)


def commit(
    layout: SnapshotLayout,
    checkpoint_id: int,
    plans: Sequence[SinkPlan],
    lineage: owner.Lineage | None = None,
    epoch: int | None = None,
) -> list[SinkCommit]:
    """Make the output of completed checkpoint ``checkpoint_id`` visible, per sink.

    Idempotent: a sink whose table already holds the checkpoint's app transaction is
    not committed again (its staged records are only cleaned up); a Kafka sink whose
    group already records the checkpoint publishes nothing. ``lineage``: the run was
    restored from another snapshot path (it may take that path's tables over);
    ``epoch``: the run committing (a Kafka sink refuses to publish once it is fenced).

    Raises
    ------
    SinkError
        When a staged batch of the plan is no longer recorded, or the table is not the
        sink's to write (:func:`guard`), or a Kafka transaction failed.
    """
    return [
        publisher.publish(layout, checkpoint_id, p, epoch)
        if p.kind == KAFKA
        else _commit_one(layout, checkpoint_id, p, lineage)
        for p in plans
    ]


def finish(
    layout: SnapshotLayout,
    committed: Mapping[int, tuple[int, Mapping[str, Any]]],
    superseded: Callable[[int, SinkPlan], bool] | None = None,
    lineage: owner.Lineage | None = None,
    epoch: int | None = None,
) -> None:
    """Finish the sink commits of completed checkpoints a crash interrupted.

    ``committed`` maps each checkpoint id to its state table version and commit metadata
    (:func:`barriered.statestore.integrity.committed_checkpoints`); a plan for which
    ``superseded(checkpoint_id, plan)`` holds (a later run was restored from an older
    checkpoint) is not committed.
    """
    for checkpoint_id in sorted(committed):
        plans = [
            p
            for p in plans_from_metadata(committed[checkpoint_id][1])
            if superseded is None or not superseded(checkpoint_id, p)
        ]
        if plans:
            commit(layout, checkpoint_id, plans, lineage, epoch)


def sweep(
    layout: SnapshotLayout, epoch: int, min_age_ms: int, carry: Mapping[str, int] | None = None
) -> int:
    """Delete what older runs staged and no checkpoint will commit; return how many batches.

    Runs after :func:`finish`: every batch an older run staged that is still recorded
    came after the cut this run restored from, or (``carry``: this run continues the
    older one from its first batch, per sink) is run again by this run; the batches
    below that first one are kept (carried). A batch's record and files go once the
    record is ``min_age_ms`` old.
    """
    fs, _ = filesystem(layout.root)
    young = time.time() - min_age_ms / 1000
    dropped = 0
    for sink_id in staging.sink_ids(layout):
        for old in (e for e in staging.epochs(layout, sink_id) if e < epoch):
            keep_below = (carry or {}).get(sink_id, -1)
            for batch_id in staging.staged_ids(layout, sink_id, old):
                if batch_id < keep_below:
                    continue
                record = layout.staged_file(sink_id, old, batch_id)
                info = fs.get_file_info(filesystem(record)[1])
                if info.mtime is not None and info.mtime.timestamp() > young:
                    continue
                batch = staging.read(layout, sink_id, old, batch_id)
                if batch is not None:
                    forget(layout, [batch], delete_data=True)
                    dropped += 1
            folder = join(layout.sink_dir(sink_id), f"e{old}")
            if not list_names(folder):
                filesystem(folder)[0].delete_dir(filesystem(folder)[1])
    if dropped:
        log.info("sink retention: %d batch(es) staged after a restored cut deleted", dropped)
    return dropped
