"""Who owns a snapshot path: one live run at a time, fenced by epochs.

Every run of a query takes an *epoch* from the snapshot path when its source starts: one
commit to the small Delta table ``_owners`` at exactly the next version (no commit
retries), so two runs can never hold the same epoch; delta-rs commits a log entry only if
it is absent, which holds on object stores as well. The epoch is that version (the first
run creates the table with its row: epoch 0).

The newest epoch owns the path. A run is *alive* while its lease holds: the source renews
it while planning batches and the coordinator after each progress event (files
``_coordinator/leases/<epoch>-source.json`` and ``<epoch>-query.json``, one writer each).
A lease ends when the run releases it (its source stopped), when it was not renewed for
``leaseTimeout``, or at once when the owner ran on this host and its process is gone.

* A new run on a path whose owner is alive is refused (:class:`SnapshotPathInUseError`),
  before anything is written.
* ``restoreFrom`` takes the path over even from a live owner. The older run is then a
  *zombie*: before every commit (in-flight, state, ``_checkpoints``, the trigger log,
  retention) its coordinator checks that no newer epoch exists and refuses with
  :class:`FencedError`; its source fails the query with the same error at its next lease
  renewal. Acknowledgements carry the epoch, so runs never collect each other's.

The check is one existence test of the next ``_owners`` log entry. What remains is the
window between that test and the commit it guards (milliseconds, inside one process):
the state commit is re-checked right after it, and a zombie that slipped through fails
loudly naming the checkpoint (see statestore/README.md, "One writer per snapshot path").
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError
from deltalake.transaction import CommitProperties

from barriered import wall_time
from barriered.errors import FencedError, SnapshotPathInUseError, SnapshotStoreError
from barriered.files.fileio import exists, join, read_json, write_json
from barriered.local.processes import running
from barriered.statestore.delta_tables import open_table
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

OWNERS_SCHEMA = pa.schema(
    [
        ("epoch", pa.int64()),
        ("host", pa.string()),
        ("pid", pa.int64()),
        ("started_ms", pa.int64()),
        ("restore_from", pa.string()),
        ("took_over", pa.int64()),
    ]
)
SOURCE = "source"
QUERY = "query"
#: How long a new run waits for an owner on this host whose process is stopping.
STOP_GRACE_MS = 3000
_ATTEMPTS = 5


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Owner:
    """One run that took a snapshot path, with what its leases say."""

    epoch: int
    host: str
    pid: int
    started_ms: int
    restore_from: str | None = None
    took_over: int | None = None
    renewed_ms: int = 0
    released_ms: int | None = None
    query_id: str | None = None
    run_id: str | None = None

    def alive(self, now_ms: int, lease_timeout_ms: int) -> bool:
        """Whether this run still owns the path: not released, its lease renewed within
        ``lease_timeout_ms``, and (on this host) its process running."""
        if self.released_ms is not None:
            return False
        if now_ms - max(self.renewed_ms, self.started_ms) > lease_timeout_ms:
            return False
        return self.host != socket.gethostname() or running(self.pid)

    def describe(self, now_ms: int) -> str:
        """The run for a message: query and run id, since when, where, lease age."""
        if self.query_id is not None:
            query = f"query id {self.query_id}, run id {self.run_id}"
        else:
            query = "query id not known yet (no micro-batch finished)"
        renewed = (now_ms - max(self.renewed_ms, self.started_ms)) / 1000
        return (
            f"{query}, epoch {self.epoch}, running since {_when(self.started_ms)} on host "
            f"{self.host} (pid {self.pid}), lease renewed {renewed:.1f} s ago"
        )


def _leases(layout: SnapshotLayout, owner: Owner) -> Owner:
    source = read_json(layout.lease_file(owner.epoch, SOURCE), default=None) or {}
    query = read_json(layout.lease_file(owner.epoch, QUERY), default=None) or {}
    return Owner(
        epoch=owner.epoch,
        host=owner.host,
        pid=owner.pid,
        started_ms=owner.started_ms,
        restore_from=owner.restore_from,
        took_over=owner.took_over,
        renewed_ms=max(int(source.get("renewed_ms", 0)), int(query.get("renewed_ms", 0))),
        released_ms=source.get("released_ms"),
        query_id=query.get("query_id"),
        run_id=query.get("run_id"),
    )


def _owner_of(layout: SnapshotLayout, table: DeltaTable) -> Owner | None:
    epoch = table.version()
    rows = [r for r in table.to_pyarrow_table().to_pylist() if r["epoch"] == epoch]
    if not rows:
        raise SnapshotStoreError(
            f"{layout.owners_table!r} version {epoch} holds no owner row; the table was "
            "changed by something else than spark-barriered. Restore it from a backup"
        )
    row = rows[0]
    return _leases(
        layout,
        Owner(
            epoch=epoch,
            host=str(row["host"]),
            pid=int(row["pid"]),
            started_ms=int(row["started_ms"]),
            restore_from=row["restore_from"],
            took_over=row["took_over"],
        ),
    )


def current_owner(layout: SnapshotLayout) -> Owner | None:
    """The run with the newest epoch on the path (alive or not), or None if none took it."""
    table = open_table(layout.owners_table, storage_options=layout.storage_options)
    return None if table is None else _owner_of(layout, table)


def owner_of(layout: SnapshotLayout, epoch: int) -> Owner | None:
    """The run that took the path at ``epoch`` (None: no such epoch)."""
    table = open_table(layout.owners_table, version=epoch, storage_options=layout.storage_options)
    return None if table is None else _owner_of(layout, table)


def _refusal(layout: SnapshotLayout, owner: Owner, now_ms: int, timeout_ms: int) -> str:
    return (
        f"snapshot path {layout.root!r} is in use by a running query ({owner.describe(now_ms)}); "
        "one query at a time may write a snapshot path. Stop that query (query.stop()), or "
        f"wait until its lease expires (leaseTimeout={timeout_ms} ms without renewal), or "
        "start this one with option restoreFrom ('latest' or a checkpoint id) to take the "
        "path over: the running query is then fenced and fails without committing anything. "
        "Nothing was written"
    )


def acquire(
    layout: SnapshotLayout, lease_timeout_ms: int, restore_from: str | None = None
) -> Owner:
    """Take the next epoch of the snapshot path for a new run (of this process).

    Parameters
    ----------
    layout : SnapshotLayout
        The snapshot path.
    lease_timeout_ms : int
        ``leaseTimeout``: an owner whose lease is older is not alive.
    restore_from : str, optional
        The run restores (``restoreFrom``): it takes the path over even from a live owner.

    Returns
    -------
    Owner
        This run, with its epoch.

    Raises
    ------
    SnapshotPathInUseError
        When another run owns the path and is alive (and this run does not restore);
        nothing was written.
    """
    for _ in range(_ATTEMPTS):
        table = open_table(layout.owners_table, storage_options=layout.storage_options)
        current = None if table is None else _owner_of(layout, table)
        now = wall_time.now_ms()
        if current is not None and restore_from is None and current.alive(now, lease_timeout_ms):
            current = _wait_for_local_stop(layout, current, lease_timeout_ms)
            if current.alive(wall_time.now_ms(), lease_timeout_ms):
                raise SnapshotPathInUseError(
                    _refusal(layout, current, wall_time.now_ms(), lease_timeout_ms)
                )
        epoch = 0 if table is None else table.version() + 1
        me = Owner(
            epoch=epoch,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_ms=now,
            restore_from=restore_from,
            took_over=None
            if current is None or not current.alive(now, lease_timeout_ms)
            else current.epoch,
            renewed_ms=now,
        )
        row = {f: getattr(me, f) for f in OWNERS_SCHEMA.names}
        try:
            # Exactly at version ``epoch``: no retries, and the first run creates the
            # table (mode "error"), so concurrent first runs cannot both create it.
            write_deltalake(
                layout.owners_table if table is None else table,
                pa.Table.from_pylist([row], schema=OWNERS_SCHEMA),
                mode="error" if table is None else "append",
                storage_options=dict(layout.storage_options),
                commit_properties=CommitProperties(
                    custom_metadata={"barriered.epoch": str(epoch)}, max_commit_retries=0
                ),
            )
        except DeltaError as exc:
            log.info(
                "epoch %d of %s was taken concurrently (%s); looking again", epoch, layout.root, exc
            )
            continue
        write_json(layout.lease_file(epoch, SOURCE), {"renewed_ms": now})
        if me.took_over is not None:
            log.warning(
                "snapshot path %s taken over by epoch %d (restoreFrom=%s); the run of epoch "
                "%d is fenced and commits nothing more",
                layout.root,
                epoch,
                restore_from,
                me.took_over,
            )
        else:
            log.info("snapshot path %s owned by epoch %d", layout.root, epoch)
        return me
    raise SnapshotStoreError(
        f"could not take an epoch of snapshot path {layout.root!r} in {_ATTEMPTS} attempts: "
        "other runs keep starting on it. Start one query per snapshot path"
    )


def _wait_for_local_stop(layout: SnapshotLayout, owner: Owner, timeout_ms: int) -> Owner:
    """A live owner on this host may be a run that is stopping (its source process ends
    just after ``query.stop()`` returns): give it a moment."""
    deadline = wall_time.now_ms() + STOP_GRACE_MS
    local = owner.host == socket.gethostname() and owner.pid != os.getpid()
    while local and wall_time.now_ms() < deadline:
        time.sleep(0.1)
        owner = _leases(layout, owner)
        if not owner.alive(wall_time.now_ms(), timeout_ms):
            break
    return owner


def newer_epoch_exists(layout: SnapshotLayout, epoch: int) -> bool:
    """Whether a run took the path after the run of ``epoch`` (one existence test)."""
    return exists(join(layout.owners_table, "_delta_log", f"{epoch + 1:020d}.json"))


def check(layout: SnapshotLayout, epoch: int, what: str) -> None:
    """Refuse ``what`` when the run of ``epoch`` no longer owns the path.

    Raises
    ------
    FencedError
        Naming the run that took the path over and what was refused.
    """
    if not newer_epoch_exists(layout, epoch):
        return
    owner = current_owner(layout)
    newer = (
        "a newer run" if owner is None else f"a newer run ({owner.describe(wall_time.now_ms())})"
    )
    raise FencedError(
        f"{what} refused: snapshot path {layout.root!r} was taken over by {newer}; this run "
        f"(epoch {epoch}) is fenced and commits nothing. Stop this query; the newer run "
        "owns the path"
    )


class Lease:
    """The lease of one run, renewed by one party (``source`` or ``query``).

    Renewals are throttled to a quarter of the lease timeout (at most every 5 s); each
    renewal first checks that the run still owns the path.
    """

    def __init__(
        self, layout: SnapshotLayout, epoch: int, party: str, lease_timeout_ms: int
    ) -> None:
        self.layout = layout
        self.epoch = epoch
        self.party = party
        self.interval_ms = min(lease_timeout_ms // 4, 5000)
        self.identity: dict[str, str] = {}
        self._renewed_ms = 0

    def renew(self, force: bool = False) -> None:
        """Renew the lease (when due, or now with ``force``).

        Raises
        ------
        FencedError
            When a newer run took the path over.
        """
        now = wall_time.now_ms()
        if not force and now - self._renewed_ms < self.interval_ms:
            return
        check(self.layout, self.epoch, f"renewing the lease of epoch {self.epoch}")
        write_json(
            self.layout.lease_file(self.epoch, self.party), {**self.identity, "renewed_ms": now}
        )
        self._renewed_ms = now

    def release(self) -> None:
        """End the lease: the path is free for the next run at once."""
        now = wall_time.now_ms()
        write_json(
            self.layout.lease_file(self.epoch, self.party),
            {**self.identity, "renewed_ms": now, "released_ms": now},
        )
        log.info("snapshot path %s released by epoch %d", self.layout.root, self.epoch)
