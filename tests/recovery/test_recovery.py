"""Recovery, bytewax style: run, crash at a chosen point, restore, assert the exact state.

Every crash is injected with :mod:`barriered.testing.faults` (no sleeps, no timing
luck): the query dies exactly at the point, leaving the snapshot path as a real crash
would. The restore uses ``restoreFrom`` and a new Spark checkpoint location, runs to the
end of the input, and its final checkpoint must hold exactly the running totals of a
batch computation over all input records: nothing lost, nothing counted twice.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from barriered.control.offsets import SourceOffset
from barriered.session import listener_of
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.testing import faults
from runs import (
    MODES,
    SOURCE,
    commit_metadata,
    start,
    state_at,
    totals_before,
    upstream,
    wait_final_checkpoint,
)

pytestmark = pytest.mark.spark

#: The crash points that exist in each mode (aligned never captures in-flight records,
#: unaligned never aligns).
#: ``make test`` runs one representative crash per point (after the commit: the sink's);
#: ``make test-full`` all of them.
FULL = pytest.mark.full
CRASHES = [
    pytest.param("aligned", faults.ALIGNING, marks=FULL),
    ("aligned", faults.BEFORE_COMMIT),
    pytest.param("aligned", faults.AFTER_COMMIT, marks=FULL),
    ("unaligned", faults.INFLIGHT_CAPTURE),
    pytest.param("unaligned", faults.BEFORE_COMMIT, marks=FULL),
    pytest.param("unaligned", faults.AFTER_COMMIT, marks=FULL),
    ("aligned_with_timeout", faults.ALIGNING),
    pytest.param("aligned_with_timeout", faults.INFLIGHT_CAPTURE, marks=FULL),
    pytest.param("aligned_with_timeout", faults.BEFORE_COMMIT, marks=FULL),
    # make test under 20 min: the default suite's crash after the commit is the Delta
    # sink's (test_sink_recovery)
    pytest.param("aligned_with_timeout", faults.AFTER_COMMIT, marks=FULL),
]


def wait_listener_done(query: Any) -> None:
    """Wait until the coordinator handled the query's termination (nothing more comes)."""
    listener = listener_of(query)
    assert listener is not None, f"no listener saw query {query.id} start"
    assert listener.wait_ended(query.runId, 60), f"the listener never saw {query.id} end"


def crash(
    session: Any, tmp_path: Path, conf: dict[str, str], point: str, source: dict[str, str]
) -> tuple[Any, SnapshotLayout, dict[str, Any]]:
    """Run until the fault at ``point`` fires (from checkpoint 2 on); return what is left."""
    snap = str(tmp_path / "snap")
    faults.inject(snap, point, checkpoint_id=2)
    query = start(session, tmp_path, conf, source, snap, checkpoint="ck-crashed")
    with contextlib.suppress(Exception):  # the crash fails the query (source side: always)
        query.awaitTermination()
    record = faults.wait_fired(snap, point)
    wait_listener_done(query)
    return query, SnapshotLayout.configured(snap), record


def restore(
    session: Any,
    tmp_path: Path,
    conf: dict[str, str],
    source: dict[str, str],
    restore_from: str = "latest",
    snap: str | None = None,
) -> tuple[Any, SnapshotLayout, dict[str, Any]]:
    """Restore into a new checkpoint location, run to the end; return the final row."""
    snap = snap or str(tmp_path / "snap")
    query = start(
        session, tmp_path, conf, {**source, "restoreFrom": restore_from}, snap, "ck-restored"
    )
    query.awaitTermination()
    layout = SnapshotLayout.configured(snap)
    return query, layout, wait_final_checkpoint(layout, tuple(upstream().available()), query)


def first_offset(query: Any) -> SourceOffset:
    progress = min(query.recentProgress, key=lambda p: p.batchId)
    return SourceOffset.from_dict(json.loads(progress.sources[0].endOffset))


def assert_exact(layout: SnapshotLayout, final: dict[str, Any]) -> None:
    everything = dict(enumerate(upstream().available()))
    assert state_at(layout, final["state_table_version"]) == totals_before(everything)


@pytest.mark.parametrize(("mode", "point"), CRASHES)
def test_crash_and_restore_gives_the_exact_state(
    session: Any, tmp_path: Path, mode: str, point: str
) -> None:
    query, layout, fired = crash(session, tmp_path, MODES[mode], point, SOURCE)
    crashed_at = fired["checkpoint_id"]
    committed = commit_metadata(layout)
    completed_rows = {r["checkpoint_id"] for r in checkpoints_table.completed(layout)}
    if point in (faults.ALIGNING, faults.INFLIGHT_CAPTURE):
        assert f"injected fault at {point}" in str(query.exception())
    if point in (faults.ALIGNING, faults.INFLIGHT_CAPTURE, faults.BEFORE_COMMIT):
        assert crashed_at not in committed  # the crash stopped it before its commit
    if point == faults.BEFORE_COMMIT:
        acks = Path(layout.acks_dir(crashed_at))
        assert any(acks.iterdir()), "executors acknowledged before the coordinator crashed"
    if point == faults.AFTER_COMMIT:
        # Committed (the completion point) but never recorded: restore must still use it.
        assert crashed_at in committed and crashed_at not in completed_rows
    assert committed, "a checkpoint completed before the crash"
    restore_point = max(committed)

    restored, layout, final = restore(session, tmp_path, MODES[mode], SOURCE)
    first = first_offset(restored)
    assert first.last_id >= crashed_at  # new ids never reuse what the crashed run left
    assert final["checkpoint_id"] > crashed_at
    # no id vanishes from the history: the crashed checkpoint shows as aborted, its reason
    rows = {r["checkpoint_id"]: r for r in checkpoints_table.read_rows(layout)}
    assert set(range(1, final["checkpoint_id"] + 1)) <= rows.keys() | committed.keys()
    if crashed_at not in committed:
        assert rows[crashed_at]["status"] == "aborted"
        assert rows[crashed_at]["failure_reason"].startswith("interrupted: the "), rows
    # The restored run started at the restored checkpoint's positions (in-flight first).
    barrier = json.loads(committed[restore_point]["barriered.barrier"])
    inflight = json.loads(committed[restore_point]["barriered.inflight"])
    starts = [inflight.get(str(c), [b])[0] for c, b in enumerate(barrier.values())]
    batch0 = min(restored.recentProgress, key=lambda p: p.batchId)
    markers = 8 if first.cut is not None else 0  # maxParallelism marker rows
    assert batch0.numInputRows == sum(first.positions) - sum(starts) + markers
    assert_exact(layout, final)


def state_store_partitions(checkpoint: Path) -> int:
    """How many Spark partitions the keyed operator's state store has in a checkpoint."""
    (operator,) = [p for p in (checkpoint / "state").iterdir() if p.name.isdigit()]
    return len([p for p in operator.iterdir() if p.name.isdigit()])


@pytest.mark.parametrize(
    ("session", "before", "after"),
    [
        ("classic", 4, 2),
        pytest.param("classic", 2, 8, marks=FULL),
        pytest.param("connect", 2, 8, marks=(pytest.mark.connect, FULL)),
    ],
    indirect=["session"],
)
def test_restore_into_another_number_of_partitions(
    session: Any, tmp_path: Path, before: int, after: int
) -> None:
    session.conf.set("spark.sql.shuffle.partitions", str(before))
    _, _, fired = crash(session, tmp_path, MODES["unaligned"], faults.AFTER_COMMIT, SOURCE)
    session.conf.set("spark.sql.shuffle.partitions", str(after))
    _, layout, final = restore(session, tmp_path, MODES["unaligned"], SOURCE)
    # Spark's offset log of the restored run says what it was restored from, every batch.
    # (the crash came right after checkpoint fired["checkpoint_id"] committed: the latest)
    restored_from = {"from": layout.root, "checkpoint_id": fired["checkpoint_id"]}
    logged = list((tmp_path / "ck-restored" / "offsets").glob("[0-9]*"))
    assert logged
    for entry in logged:
        assert json.loads(entry.read_text().splitlines()[-1])["restore"] == restored_from
    assert state_store_partitions(tmp_path / "ck-crashed") == before
    assert state_store_partitions(tmp_path / "ck-restored") == after
    assert_exact(layout, final)
