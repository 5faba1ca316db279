"""One writer per snapshot path: epochs, leases, takeover and fencing on real Delta tables.

No Spark: the coordinator is driven with the offsets and acknowledgements the source and
the keyed operator would publish; an owner in another process is a real subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from barriered.barrier import Mode
from barriered.config import BarrieredConf
from barriered.control.offsets import Cut, SourceOffset, StartedCheckpoint
from barriered.control.record import ControlRecord
from barriered.coordinator.driver import QueryCoordinator
from barriered.errors import FencedError, SnapshotPathInUseError, SnapshotStoreError
from barriered.files.fileio import write_json
from barriered.statestore import checkpoints_table, ownership
from barriered.statestore.acks import Ack, read_acks, state_participant, write_ack
from barriered.statestore.delta_tables import commit_files
from barriered.statestore.layout import SnapshotLayout
from snapshots import registration, state_file, state_rows

GROUPS = 2
LEASE_MS = 60_000


def tree(root: str) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time."""
    base = Path(root)
    return {
        str(p.relative_to(base)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


@pytest.fixture()
def layout(tmp_path: Path) -> SnapshotLayout:
    """A snapshot path as the source leaves it at start: configuration and one operator."""
    lay = SnapshotLayout.at(str(tmp_path / "snap"))
    conf = BarrieredConf(
        snapshot_path=lay.root,
        checkpoint_interval_ms=3_600_000,
        max_parallelism=GROUPS,
        lease_timeout_ms=LEASE_MS,
    )
    write_json(lay.config_file, {"conf": conf.to_dict(), "channels": 1})
    write_json(lay.operator_file("op"), registration("op", GROUPS))
    return lay


def publish(layout: SnapshotLayout, checkpoint_id: int, epoch: int, total: int) -> None:
    """What the keyed operator of the run with ``epoch`` writes for a checkpoint."""
    for kg in range(GROUPS):
        f = state_file(layout, state_rows([f"k{kg}"], [total], checkpoint_id, kg), checkpoint_id,
                       replaces=[kg])  # fmt: skip
        write_ack(
            layout,
            Ack(checkpoint_id, state_participant("op", kg), True, (f,), 1, f.size, epoch=epoch),
        )


def cut(qc: QueryCoordinator, checkpoint_id: int, position: int) -> None:
    """The batch in which the source fixed the barriers of ``checkpoint_id`` and cut it."""
    now = int(time.time() * 1000)
    started = StartedCheckpoint(checkpoint_id, "checkpoint", Mode.ALIGNED, (position,), now)
    offset = SourceOffset(
        positions=(position,),
        last_id=checkpoint_id,
        started=(started,),
        cut=Cut(checkpoint_id, "checkpoint", "aligned", (position,), (), None, now),
    )
    qc.on_progress(checkpoint_id, None, offset.to_dict(), None, 0)


def totals(layout: SnapshotLayout, version: int) -> list[str]:
    rows = pa.table(DeltaTable(layout.state_table, version=version).scan().read_all())
    return sorted(f"{r['key_group']}:{r['total']}" for r in rows.to_pylist())


def run_elsewhere(layout: SnapshotLayout, code: str) -> None:
    """Run ``code`` (with ``o`` = ownership and ``L`` = the layout) in another process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    prelude = (
        "from barriered.statestore import ownership as o\n"
        "from barriered.statestore.layout import SnapshotLayout\n"
        f"L = SnapshotLayout.at({layout.root!r})\n"
    )
    subprocess.run([sys.executable, "-c", prelude + code], check=True, env=env, timeout=120)


def test_each_run_takes_the_next_epoch_and_the_newest_owns_the_path(
    layout: SnapshotLayout,
) -> None:
    assert ownership.current_owner(layout) is None
    first = ownership.acquire(layout, LEASE_MS)
    assert first.epoch == 0 and first.took_over is None and first.pid == os.getpid()
    ownership.Lease(layout, 0, ownership.SOURCE, LEASE_MS).release()
    second = ownership.acquire(layout, LEASE_MS)
    assert second.epoch == 1 and second.took_over is None  # the first had released it
    owner = ownership.current_owner(layout)
    assert owner is not None and owner.epoch == 1 and owner.started_ms == second.started_ms
    assert ownership.newer_epoch_exists(layout, 0)
    assert not ownership.newer_epoch_exists(layout, 1)
    ownership.check(layout, 1, "anything")  # the owner may commit
    with pytest.raises(FencedError, match="epoch 0"):
        ownership.check(layout, 0, "committing checkpoint 4")


def test_concurrent_takeovers_get_distinct_epochs(layout: SnapshotLayout) -> None:
    epochs: list[int] = []
    errors: list[BaseException] = []

    def take() -> None:
        try:
            epochs.append(ownership.acquire(layout, LEASE_MS, restore_from="latest").epoch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(epochs) == [0, 1, 2, 3]
    rows = DeltaTable(layout.owners_table).to_pyarrow_table().to_pylist()
    assert sorted(r["epoch"] for r in rows) == [0, 1, 2, 3]
    for version in range(4):  # the epoch in each row is the version that added it
        at = DeltaTable(layout.owners_table, version=version).to_pyarrow_table()
        assert max(at.column("epoch").to_pylist()) == version


def test_a_second_run_is_refused_while_the_owner_lives_and_writes_nothing(
    layout: SnapshotLayout,
) -> None:
    owner = ownership.acquire(layout, LEASE_MS)
    qc = QueryCoordinator(layout, epoch=owner.epoch)
    qc.identify("q-1111", "run-2222")
    before = tree(layout.root)
    with pytest.raises(SnapshotPathInUseError) as refused:
        ownership.acquire(layout, LEASE_MS)
    message = str(refused.value)
    assert f"snapshot path {layout.root!r} is in use by a running query" in message
    assert "query id q-1111, run id run-2222, epoch 0, running since" in message
    assert f"(pid {os.getpid()})" in message
    assert "query.stop()" in message and "restoreFrom" in message
    assert tree(layout.root) == before


def test_a_released_expired_or_dead_owner_frees_the_path(layout: SnapshotLayout) -> None:
    # An owner in another process that ended without releasing: its pid is gone.
    run_elsewhere(layout, "o.acquire(L, 60000)")
    crashed = ownership.current_owner(layout)
    assert crashed is not None and crashed.pid != os.getpid() and crashed.released_ms is None
    started = time.monotonic()
    assert ownership.acquire(layout, LEASE_MS).epoch == 1
    assert time.monotonic() - started < ownership.STOP_GRACE_MS / 1000
    # A live owner whose lease was not renewed for leaseTimeout.
    time.sleep(0.3)
    assert ownership.acquire(layout, 200).epoch == 2
    # A live owner that released the path.
    with pytest.raises(SnapshotPathInUseError):
        ownership.acquire(layout, LEASE_MS)
    ownership.Lease(layout, 2, ownership.SOURCE, LEASE_MS).release()
    assert ownership.acquire(layout, LEASE_MS).epoch == 3


def test_a_lease_renewal_of_a_fenced_run_fails(layout: SnapshotLayout) -> None:
    owner = ownership.acquire(layout, LEASE_MS)
    lease = ownership.Lease(layout, owner.epoch, ownership.SOURCE, LEASE_MS)
    lease.renew()
    assert ownership.acquire(layout, LEASE_MS, restore_from="latest").took_over == 0
    before = tree(layout.root)
    with pytest.raises(FencedError, match=r"renewing the lease of epoch 0 refused.*epoch 1"):
        lease.renew(force=True)
    assert tree(layout.root) == before


def test_a_zombie_coordinator_commits_nothing_after_a_takeover(layout: SnapshotLayout) -> None:
    old = ownership.acquire(layout, LEASE_MS)
    zombie = QueryCoordinator(layout, epoch=old.epoch)
    cut(zombie, 1, 10)
    publish(layout, 1, old.epoch, 5)
    zombie.between_batches(tick=False)
    assert zombie.status(1) == ("completed", None)
    v1 = DeltaTable(layout.state_table).version()

    new = ownership.acquire(layout, LEASE_MS, restore_from="latest")
    assert new.took_over == old.epoch
    restored = QueryCoordinator(layout, next_id=2, epoch=new.epoch)

    # Both runs reach checkpoint 2; the zombie's executors acknowledge it first.
    cut(zombie, 2, 20)
    publish(layout, 2, old.epoch, 666)
    snapshot_tables = {
        name: tree(f"{layout.root}/{name}/_delta_log") for name in ("state", "_checkpoints")
    }
    triggers = tree(f"{layout.root}/_coordinator")
    zombie.between_batches(tick=True)
    status = zombie.status(2)
    assert status is not None and status[0] == "aborted"
    assert "committing checkpoint 2 refused" in (status[1] or "")
    assert zombie.fenced is not None and "this run (epoch 0) is fenced" in zombie.fenced
    for name, before in snapshot_tables.items():
        assert tree(f"{layout.root}/{name}/_delta_log") == before, name
    assert tree(f"{layout.root}/_coordinator") == triggers
    with pytest.raises(FencedError):
        zombie.request_savepoint(str(layout.root) + "-sp")
    assert zombie.tick() == [] and zombie.on_progress(3, None, {}, None, 0) == []

    # The restored run collects only its own acknowledgements and commits exactly.
    assert set(read_acks(layout, 2)) == {"state/op/0", "state/op/1"}
    assert read_acks(layout, 2, new.epoch) == {}
    cut(restored, 2, 20)
    restored.between_batches(tick=False)
    assert restored.status(2) == ("pending", None)  # the zombie's acks do not count
    publish(layout, 2, new.epoch, 6)
    restored.between_batches(tick=False)
    assert restored.status(2) == ("completed", None)
    rows = checkpoints_table.read_rows(layout)
    assert [(r["checkpoint_id"], r["status"]) for r in rows] == [(1, "completed"), (2, "completed")]
    v2 = int(rows[1]["state_table_version"])
    assert totals(layout, v1) == ["0:5", "1:5"]
    assert totals(layout, v2) == ["0:6", "1:6"]
    assert ControlRecord.read(layout).last_completed == 2


def test_acks_of_two_runs_do_not_collide(layout: SnapshotLayout) -> None:
    publish(layout, 7, 0, 1)
    publish(layout, 7, 1, 2)
    names = sorted(p.name for p in Path(layout.acks_dir(7)).iterdir())
    assert names == [
        "state~op~0.e0.json",
        "state~op~0.e1.json",
        "state~op~1.e0.json",
        "state~op~1.e1.json",
    ]
    mine = read_acks(layout, 7, 1)
    assert {a.epoch for a in mine.values()} == {1}
    assert json.loads(Path(layout.ack_file(7, "state/op/0", 0)).read_text())["epoch"] == 0


def test_a_commit_that_slipped_in_before_the_fence_is_never_taken_for_this_runs(
    layout: SnapshotLayout,
) -> None:
    """The one window fencing leaves (a zombie's check passed just before a takeover, its
    commit lands after): the new run's commit of the same id fails loudly instead of
    being skipped as "already committed" with the zombie's state."""
    schema = pa.schema([("key", pa.string())])
    uri = layout.state_table

    def commit(epoch: int) -> int:
        return commit_files(uri, schema, (), 7, [], metadata={"barriered.epoch": epoch}).version

    zombie = commit(0)
    assert commit(0) == zombie  # the same run's retry stays idempotent
    before = DeltaTable(uri).version()
    with pytest.raises(SnapshotStoreError, match=r"committed \(version 0\) by the run of epoch 0"):
        commit(1)
    assert DeltaTable(uri).version() == before  # nothing was committed
