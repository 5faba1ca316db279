"""Bring a sink's output table back to what a restored checkpoint covers.

A restore from checkpoint ``n`` (``restoreFrom``) runs the records after ``n`` again, so
the output later checkpoints committed to the sink's table must go first, or it would
be there twice. The table is *rewound*: the version holding exactly the output of the
checkpoints up to ``n`` is the newest one this sink committed for a checkpoint ``<= n``
(or the sink's empty creation); a Delta ``RESTORE`` to it is committed (or, when the
table held nothing before, a ``DELETE`` of every row). Only when every version after it
was written by this sink on this snapshot path (commit metadata ``barriered.snapshot_path``):
otherwise :class:`~barriered.errors.SinkRewindError`, checked before the restored run
takes the snapshot path (:func:`check`), and nothing is written.

The rewind commit carries ``barriered.rewind_to`` and the run's epoch; a later restore
walks past it like past any commit after its checkpoint. The restore is recorded in
``_sink/restores.json`` (:func:`superseded`): a later run must never finish the sink
commit of a checkpoint after the restored one that the crashed run left unfinished. App
transactions are not rewound: the restored run numbers its checkpoints after every id
the path used.

A ``barriered-kafka`` sink cannot be rewound (published records stay in the topic): a
restore from ``n`` is refused (:func:`check`, nothing written) when its sink already
published a checkpoint after ``n`` (:func:`barriered.sink.kafka.publisher.check_restore`);
a completed checkpoint after ``n`` that was not published yet is never published (as
above), so the restored run publishes the output after ``n`` once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deltalake.transaction import CommitProperties

from barriered.config.sink_options import PATH
from barriered.errors import SinkRewindError
from barriered.files.fileio import join, read_json, write_json
from barriered.files.storage import register
from barriered.sink.commit_plan import SinkPlan, plans_from_metadata
from barriered.sink.committer import CREATED_KEY
from barriered.sink.kafka import publisher
from barriered.sink.owner import RECORDED_KEY, SINK_ID_KEY, SNAPSHOT_PATH_KEY
from barriered.sink.staging import DELTA
from barriered.statestore.delta_tables import open_table
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

#: Commit metadata of a rewind commit: the version whose output it restores (-1: empty).
REWIND_KEY = "barriered.rewind_to"
#: Commit metadata of a rewind commit: the checkpoint the run was restored from.
RESTORED_KEY = "barriered.restored_checkpoint_id"
EMPTY = -1


@dataclass(frozen=True)
class Rewind:
    """What a restore from ``checkpoint_id`` does to one sink's table.

    ``target`` is the version holding the output up to the checkpoint (``EMPTY``: none),
    ``latest`` the table's current version; nothing to do when they are equal.
    """

    sink_id: str
    path: str
    checkpoint_id: int
    target: int
    latest: int

    @property
    def needed(self) -> bool:
        """Whether the table holds output of checkpoints after ``checkpoint_id``."""
        return self.target != self.latest


def sink_tables(committed: Mapping[int, tuple[int, Mapping[str, Any]]]) -> dict[str, str]:
    """Sink id -> output table of every sink a retained checkpoint committed to."""
    return {
        p.sink_id: p.path
        for _, meta in committed.values()
        for p in plans_from_metadata(meta)
        if p.kind == DELTA
    }


def _target(sink_id: str, path: str, root: str, checkpoint_id: int) -> Rewind | None:
    table = open_table(path)
    if table is None:
        return None
    latest = table.version()
    target, foreign, ours_after = EMPTY, [], False
    for entry in table.history():  # newest first
        version = int(entry["version"])
        if entry.get(SNAPSHOT_PATH_KEY) != root:
            foreign.append(version)
            continue
        if entry.get(RECORDED_KEY):  # this sink's owner recorded: no output changed
            continue
        cid = entry.get("barriered.checkpoint_id")
        if entry.get(CREATED_KEY) or (
            cid is not None and entry.get(REWIND_KEY) is None and int(cid) <= checkpoint_id
        ):
            target = version
            break
        ours_after = True
    if ours_after and foreign:
        raise SinkRewindError(
            f"restore from checkpoint {checkpoint_id} of {root!r}: sink {sink_id!r} must "
            f"take its table {path!r} back to the output of checkpoint {checkpoint_id} "
            f"(version {'none' if target == EMPTY else target}, the table is at {latest}), "
            f"but version(s) {sorted(foreign)} after it were not written by this sink; "
            "undoing the later checkpoints' output would undo those writes too. Nothing "
            f"was written. Point the sink at a new table (option {PATH.name!r}), or restore the "
            "latest checkpoint"
        )
    return Rewind(sink_id, path, checkpoint_id, target if ours_after else latest, latest)


def restores_file(layout: SnapshotLayout) -> str:
    """``_sink/restores.json``: run epoch -> the checkpoint it was restored from."""
    return join(layout.sink_dir(), "restores.json")


def record_restore(layout: SnapshotLayout, epoch: int, checkpoint_id: int) -> None:
    """Record that the run of ``epoch`` was restored from ``checkpoint_id`` (atomically)."""
    known = read_json(restores_file(layout), default={}) or {}
    write_json(restores_file(layout), {**known, str(epoch): checkpoint_id})


def superseded(layout: SnapshotLayout, checkpoint_id: int, p: SinkPlan) -> bool:
    """Whether a run newer than the one that planned checkpoint ``checkpoint_id`` was
    restored from an older checkpoint: then the restored run produces that checkpoint's
    output again, and its plan ``p`` must never be committed."""
    known = read_json(restores_file(layout), default={}) or {}
    return any(int(e) > p.epoch and int(n) < checkpoint_id for e, n in known.items())


def plan(
    layout: SnapshotLayout,
    checkpoint_id: int,
    committed: Mapping[int, tuple[int, Mapping[str, Any]]],
) -> list[Rewind]:
    """What a restore from ``checkpoint_id`` of ``layout`` does to each sink's table.

    Raises
    ------
    SinkRewindError
        When a table was written by someone else after the checkpoint's output.
    """
    found = (
        _target(sid, path, layout.root, checkpoint_id)
        for sid, path in sorted(sink_tables(committed).items())
    )
    return [r for r in found if r is not None]


def check(
    layout: SnapshotLayout,
    checkpoint_id: int,
    committed: Mapping[int, tuple[int, Mapping[str, Any]]],
    storage_options: Mapping[str, str],
) -> None:
    """Refuse a restore whose sinks' tables cannot be rewound (nothing is written).

    ``storage_options`` are the session's ``snapshotStorageOptions``: the query's sinks
    open their tables with exactly these (:meth:`SinkOptions.register_storage
    <barriered.sink.options.SinkOptions.register_storage>`), and so does this check, never
    with those another query registered in this process for the same bucket.

    Raises
    ------
    SinkRewindError
        See :func:`plan`; or a Kafka sink already published a later checkpoint.
    """
    for path in sink_tables(committed).values():
        register(path, storage_options)
    plan(layout, checkpoint_id, committed)
    publisher.check_restore(layout, checkpoint_id)


def rewind(
    layout: SnapshotLayout,
    checkpoint_id: int,
    committed: Mapping[int, tuple[int, Mapping[str, Any]]],
    epoch: int | None,
) -> list[Rewind]:
    """Take every sink's table back to the output of ``checkpoint_id``; return what was done.

    Raises
    ------
    SinkRewindError
        See :func:`plan` (then nothing was written).
    """
    done = [r for r in plan(layout, checkpoint_id, committed) if r.needed]
    publisher.check_restore(layout, checkpoint_id)
    if epoch is not None and any(plans_from_metadata(m) for _, m in committed.values()):
        record_restore(layout, epoch, checkpoint_id)
    for r in done:
        table = open_table(r.path)
        assert table is not None
        props = CommitProperties(
            custom_metadata={
                SNAPSHOT_PATH_KEY: layout.root,
                SINK_ID_KEY: r.sink_id,
                "barriered.epoch": epoch,
                REWIND_KEY: r.target,
                RESTORED_KEY: checkpoint_id,
            }
        )
        if r.target == EMPTY:
            table.delete(commit_properties=props)
        else:
            table.restore(r.target, commit_properties=props)
        log.warning(
            "restore from checkpoint %d: sink %s table %s taken back from version %d to "
            "the output of version %s (later checkpoints' output removed)",
            checkpoint_id,
            r.sink_id,
            r.path,
            r.latest,
            "none" if r.target == EMPTY else r.target,
        )
    return done
