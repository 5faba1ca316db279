"""A restore only reads what it restores from.

A savepoint is a self-contained copy and a snapshot path restored into another belongs
to its own query: every file of either keeps its bytes (sha256 of each file, before and
after) whatever the run restored from it reads and writes, with every upstream: the
``files`` upstream used to record the restored run's new files in the savepoint's own
manifest (issue 36, case 3: 15 -> 30 lines). A query restored into a new snapshot path
with nothing new to read still ends with a final checkpoint of its own there (case 2: a
bootstrapped savepoint's restored run ended with an empty snapshot path).

The default suite runs the ``files`` upstream (a savepoint, another snapshot path, a
bootstrapped savepoint); the ``delta``, ``rate`` and ``kafka`` upstreams run under
``full``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

import barriered
from barriered import state_processor
from barriered.examples import RunningTotals
from barriered.state_processor import KeyedState
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.savepoints import export
from file_tree import digests
from runs import FILES_SOURCE, MODES, SOURCE, run, state_at, totals_before, upstream, write_files

pytestmark = pytest.mark.spark

SIZES = {"a": 30, "b": 15, "c": 15}


@dataclass
class Input:
    """An upstream the test appends to: its source options, its records' totals so far
    and each channel's end position."""

    source: dict[str, str]
    append: Callable[[], None]
    totals: Callable[[], dict[str, int]]
    ends: Callable[[], tuple[int, ...]]


def files_input(tmp_path: Path) -> Input:
    data = tmp_path / "events"
    expected = write_files(data, SIZES, tag="first")
    rounds = [1]

    def append() -> None:
        rounds[0] += 1
        expected.update(write_files(data, SIZES, tag=f"round-{rounds[0]}"))

    return Input(
        {**FILES_SOURCE, "path": str(data)},
        append,
        lambda: dict(expected),
        lambda: tuple(n * rounds[0] for n in SIZES.values()),
    )


def delta_input(tmp_path: Path) -> Input:
    table = str(tmp_path / "events-table")
    expected: Counter[str] = Counter()
    rows = {"east": 0, "west": 0}

    def append() -> None:
        batch = []
        for region, n in (("east", 24), ("west", 8)):
            for i in range(n):
                user, amount = f"user-{(i + rows[region]) % 9}", i % 4 + 1
                expected[user] += amount
                batch.append({"region": region, "user_id": user, "amount": amount})
            rows[region] += n
        write_deltalake(table, pa.Table.from_pylist(batch), mode="append", partition_by=["region"])

    append()
    source = {"upstream": "delta", "path": table, "channelBy": "region", "maxRowsPerChannel": "10"}
    return Input(source, append, lambda: dict(expected), lambda: (rows["east"], rows["west"]))


def rate_input(tmp_path: Path) -> Input:
    """The rate upstream is fixed by its options: nothing is appended."""
    ends = tuple(upstream().available())
    return Input(
        dict(SOURCE),
        lambda: None,
        lambda: totals_before(dict(enumerate(ends))),
        lambda: ends,
    )


INPUTS = {"files": files_input, "delta": delta_input, "rate": rate_input}


def restore_from(
    session: Any, tmp_path: Path, data: Input, origin: str, snap: str, checkpoint: str
) -> None:
    """Restore ``origin`` into ``snap`` after new input arrived; the origin's files keep
    their bytes and the restored run ends at the exact totals of all the input."""
    data.append()
    before = digests(origin)
    source = {**data.source, "restoreFrom": origin}
    _, layout = run(session, tmp_path, {}, source, snap, data.ends(), checkpoint)
    assert digests(origin) == before, f"restoring from {origin} changed it"
    last = checkpoints_table.completed(layout)[-1]
    assert state_at(layout, last["state_table_version"]) == data.totals()


@pytest.mark.parametrize(
    "kind",
    ["files", *(pytest.param(k, marks=pytest.mark.full) for k in ("delta", "rate"))],
)
def test_a_restore_never_writes_the_savepoint_or_snapshot_path_it_restores(
    session: Any, tmp_path: Path, kind: str
) -> None:
    data = INPUTS[kind](tmp_path)
    conf = {**MODES["aligned"], "checkpointInterval": "10ms"}
    _, first = run(session, tmp_path, conf, data.source, str(tmp_path / "snap-a"), data.ends())
    saved = export(first, None, str(tmp_path / "sp"))
    restore_from(session, tmp_path, data, saved.path, str(tmp_path / "snap-b"), "ck-b")
    restore_from(session, tmp_path, data, first.root, str(tmp_path / "snap-c"), "ck-c")


def test_a_bootstrapped_savepoint_restored_with_nothing_new_ends_with_a_checkpoint(
    session: Any, tmp_path: Path
) -> None:
    """Issue 36, case 2: the restored availableNow run reads nothing, and its snapshot
    path gets the final checkpoint the documentation promises (``restoreFrom=latest`` and
    ``read_state`` find it); the savepoint's bytes do not change."""
    data = tmp_path / "events"
    expected = write_files(data, SIZES)
    source = {**FILES_SOURCE, "path": str(data)}
    history = session.read.schema("user_id string, amount long").json(str(data / "*"))
    sp = str(tmp_path / "sp")
    state_processor.bootstrap(
        session, sp, source, [KeyedState(history, ["user_id"], RunningTotals(), compute=True)]
    )
    before = digests(sp)
    snap = str(tmp_path / "snap")
    _, layout = run(session, tmp_path, {}, {**source, "restoreFrom": sp}, snap, (30, 15, 15))
    assert digests(sp) == before
    (row,) = checkpoints_table.completed(layout)
    assert row["checkpoint_id"] == 2 and row["inflight_rows"] == 0
    assert state_at(layout, row["state_table_version"]) == dict(expected)
    point = state_processor.read_state(session, snap, "running_totals")
    assert {r["user_id"]: r["total"] for r in point.collect()} == dict(expected)


@pytest.mark.full
@pytest.mark.kafka
def test_a_restore_never_writes_the_kafka_savepoint_it_restores(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    from kafka_queries import kafka_totals, records, recount, state_totals

    topic = f"t-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 2)
    for p in (0, 1):
        kafka_broker.produce(topic, records(25, 100 * p), partition=p)

    def run_kafka(snap: Path, ck: str, **options: str) -> None:
        session.conf.set("spark.sql.streaming.barriered.snapshotPath", str(snap))
        query = (
            kafka_totals(session, kafka_broker.bootstrap, topic, **options)
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / ck))
            .trigger(availableNow=True)
        )
        barriered.await_termination(query.start(), timeout=300)

    run_kafka(tmp_path / "snap-a", "ck-a")
    saved = export(SnapshotLayout.at(str(tmp_path / "snap-a")), None, str(tmp_path / "sp"))
    for p in (0, 1):
        kafka_broker.produce(topic, records(10, 500 + 100 * p), partition=p)
    before = digests(saved.path), digests(tmp_path / "snap-a")
    run_kafka(tmp_path / "snap-b", "ck-b", restoreFrom=saved.path)
    run_kafka(tmp_path / "snap-c", "ck-c", restoreFrom=str(tmp_path / "snap-a"))
    assert (digests(saved.path), digests(tmp_path / "snap-a")) == before
    for snap in ("snap-b", "snap-c"):
        assert state_totals(session, str(tmp_path / snap)) == recount(kafka_broker, topic)
