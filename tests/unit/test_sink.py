"""The barriered-delta sink without Spark: options, staging, the checkpoint's commit,
its idempotency after a crash, the finish by the next run and retention of orphans."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from test_cli_tools import row

from barriered.errors import ConfigError, SinkError
from barriered.sink import commit_plan, committer, options, staging
from barriered.sink.options import SinkSettings
from barriered.sink.participant import SinkParticipants
from barriered.sink.staging import StagedBatch
from barriered.sink.writer import write_files
from barriered.statestore.layout import SnapshotLayout
from barriered.tools.history import format_history

SCHEMA = pa.schema([("user_id", pa.string()), ("region", pa.string()), ("n", pa.int64())])


def settings(tmp_path: Path, **kw: str) -> SinkSettings:
    return options.parse(
        {"path": str(tmp_path / "out"), "snapshotPath": str(tmp_path / "snap"), **kw}
    )


def stage_batch(
    layout: SnapshotLayout,
    s: SinkSettings,
    epoch: int,
    batch_id: int,
    rows: list[tuple[str, str, int]],
) -> StagedBatch:
    table = pa.table(
        {
            "user_id": [r[0] for r in rows],
            "region": [r[1] for r in rows],
            "n": [r[2] for r in rows],
        },
        schema=SCHEMA,
    )
    batch = StagedBatch(s, epoch, batch_id, SCHEMA, tuple(write_files(s, table)))
    staging.stage(layout, batch)
    return batch


def rows_of(path: Path, version: int | None = None) -> list[tuple[str, str, int]]:
    t = DeltaTable(str(path), version=version).to_pyarrow_table()
    return sorted(
        zip(t["user_id"].to_pylist(), t["region"].to_pylist(), t["n"].to_pylist(), strict=True)
    )


# -- options ---------------------------------------------------------------------------


def test_options_defaults_and_session_snapshot_path(tmp_path: Path) -> None:
    s = options.parse(
        {
            "PATH": str(tmp_path / "out"),
            "barriered.sessionconf": json.dumps(
                {"spark.sql.streaming.barriered.snapshotPath": str(tmp_path / "snap")}
            ),
            "checkpointLocation": "/ck",
        }
    )
    assert (s.mode, s.sink_id, s.snapshot_path) == ("append", "out", str(tmp_path / "snap"))
    assert s.app_id == "barriered.sink.out"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"mode": "update"}, "set the option keyColumns"),
        ({"keyColumns": "user_id"}, "only for mode 'update'"),
        ({"mode": "upsert"}, "'mode': invalid value 'upsert'"),
        ({"keyColumn": "user_id"}, "unknown barriered-delta sink option 'keyColumn'"),
        ({"sinkId": "a/b"}, "may hold only letters"),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings(tmp_path, **given)


def test_a_sink_without_snapshot_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="snapshotPath"):
        options.parse({"path": str(tmp_path / "out")})


def test_columns_the_output_lacks_are_refused(tmp_path: Path) -> None:
    s = settings(tmp_path, mode="update", keyColumns="user", partitionBy="region")
    with pytest.raises(ConfigError, match=r"'keyColumns' names \['user'\]"):
        s.check_columns(SCHEMA.names)


# -- commit ----------------------------------------------------------------------------


def test_staged_output_is_invisible_until_its_checkpoint_commits(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    stage_batch(layout, s, 0, 0, [("a", "eu", 1), ("b", "us", 1)])
    stage_batch(layout, s, 0, 1, [("a", "eu", 2)])
    stage_batch(layout, s, 0, 2, [("c", "eu", 1)])  # after the cut
    assert not (tmp_path / "out" / "_delta_log").exists()
    plans = commit_plan.plan(layout, 0, cut_batch=1)
    assert [(p.sink_id, p.batches) for p in plans] == [("out", ((0, 0), (0, 1)))]
    (done,) = committer.commit(layout, 7, plans)
    assert (done.version, done.rows) == (0, 3)
    assert rows_of(tmp_path / "out") == [("a", "eu", 1), ("a", "eu", 2), ("b", "us", 1)]
    assert DeltaTable(str(tmp_path / "out")).transaction_version("barriered.sink.out") == 7
    assert staging.staged_ids(layout, "out", 0) == [2]  # committed records are forgotten
    # version 1 records the sink's owner (barriered.sink.owner.out: the snapshot path)
    owner = DeltaTable(str(tmp_path / "out")).metadata().configuration
    assert owner == {"barriered.sink.owner.out": layout.root}
    (later,) = committer.commit(layout, 8, commit_plan.plan(layout, 0, cut_batch=2))
    assert later.version == 2 and rows_of(tmp_path / "out", 2)[-1] == ("c", "eu", 1)


def test_a_commit_repeated_after_a_crash_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    stage_batch(layout, s, 0, 0, [("a", "eu", 1)])
    plans = commit_plan.plan(layout, 0, cut_batch=0)

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("crash after the Delta commit")

    with monkeypatch.context() as m:
        m.setattr(committer, "forget", crash)
        with pytest.raises(OSError):
            committer.commit(layout, 3, plans)
    assert staging.staged_ids(layout, "out", 0) == [0]  # still staged: a crash left it
    (again,) = committer.commit(layout, 3, plans)
    assert again.version == 0
    assert DeltaTable(str(tmp_path / "out")).version() == 1  # 1: the owner recorded
    assert rows_of(tmp_path / "out") == [("a", "eu", 1)]
    assert staging.staged_ids(layout, "out", 0) == []


def test_update_merges_by_key_last_row_wins(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path, mode="update", keyColumns="user_id", partitionBy="region")
    stage_batch(layout, s, 0, 0, [("a", "eu", 1), ("b", "us", 5)])
    stage_batch(layout, s, 0, 1, [("a", "eu", 3)])
    (first,) = committer.commit(layout, 1, commit_plan.plan(layout, 0, 1))
    assert rows_of(tmp_path / "out") == [("a", "eu", 3), ("b", "us", 5)]
    stage_batch(layout, s, 0, 2, [("b", "us", 9), ("c", "eu", 1)])
    committer.commit(layout, 2, commit_plan.plan(layout, 0, 2))
    assert rows_of(tmp_path / "out") == [("a", "eu", 3), ("b", "us", 9), ("c", "eu", 1)]
    assert DeltaTable(str(tmp_path / "out")).metadata().partition_columns == ["region"]
    # the staged rows are read back and merged: their files go with their records
    assert not list((tmp_path / "out").glob("barriered-sink-*.parquet"))
    assert first.rows == 2


def test_append_writes_partition_folders(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path, partitionBy="region")
    stage_batch(layout, s, 0, 0, [("a", "eu", 1), ("b", "us", 1), ("c", "eu", 1)])
    committer.commit(layout, 1, commit_plan.plan(layout, 0, 0))
    assert sorted(p.name for p in (tmp_path / "out").glob("region=*")) == ["region=eu", "region=us"]
    assert rows_of(tmp_path / "out") == [("a", "eu", 1), ("b", "us", 1), ("c", "eu", 1)]


def test_the_next_run_finishes_a_completed_checkpoints_commit(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    stage_batch(layout, s, 0, 0, [("a", "eu", 1)])
    stage_batch(layout, s, 0, 1, [("b", "eu", 1)])
    stage_batch(layout, s, 0, 2, [("orphan", "eu", 1)])  # staged after the cut of 4
    # checkpoint 4 completed (its plan is in the state commit) and the run died
    metadata = {commit_plan.PLAN_KEY: commit_plan.plans_json(commit_plan.plan(layout, 0, 1))}
    committer.finish(layout, {4: (9, metadata)})
    assert rows_of(tmp_path / "out") == [("a", "eu", 1), ("b", "eu", 1)]
    committer.finish(layout, {4: (9, metadata)})  # once more: nothing changes
    assert DeltaTable(str(tmp_path / "out")).version() == 1  # 1: the owner recorded
    orphan = staging.read(layout, "out", 0, 2)
    assert orphan is not None
    assert committer.sweep(layout, epoch=1, min_age_ms=3_600_000) == 0  # too young
    assert committer.sweep(layout, epoch=1, min_age_ms=0) == 1
    assert not (tmp_path / "out" / orphan.files[0].path).exists()
    assert staging.epochs(layout, "out") == []
    assert rows_of(tmp_path / "out") == [("a", "eu", 1), ("b", "eu", 1)]


def test_a_plan_whose_staged_batch_is_gone_is_refused(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    stage_batch(layout, s, 0, 0, [("a", "eu", 1)])
    stage_batch(layout, s, 0, 1, [("b", "eu", 1)])
    plans = commit_plan.plan(layout, 0, 1)
    Path(layout.staged_file("out", 0, 0)).unlink()
    with pytest.raises(SinkError, match=r"commits the staged \(epoch, batch\) \[\(0, 0\)\]"):
        committer.commit(layout, 2, plans)
    assert not (tmp_path / "out" / "_delta_log").exists()


def test_the_sink_is_a_participant_until_the_cut_batch_is_staged(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    stage_batch(layout, s, 3, 0, [("a", "eu", 1)])
    stage_batch(layout, s, 2, 5, [("old", "eu", 1)])  # another run's sink
    sinks = SinkParticipants(layout, 3)
    assert sinks.on_cut(1, batch_id=1) == ["sink/out"]
    assert sinks.staged(1) == []
    stage_batch(layout, s, 3, 1, [("b", "eu", 1)])
    assert sinks.staged(1) == ["sink/out"]
    sinks.ran(0)
    sinks.ran(1)
    plans = sinks.plans(1, 1)
    assert [(p.epoch, p.batches) for p in plans] == [(3, ((3, 0), (3, 1)))]
    sinks.commit(1, plans)
    assert sinks.row(1) == {
        "sink_table_version": 0,
        "sink_rows": 2,
        "sink_bytes": plans_bytes(layout),
    }


def plans_bytes(layout: SnapshotLayout) -> int:
    table = DeltaTable(str(Path(layout.root).parent / "out"))
    return sum(pa.table(table.get_add_actions(flatten=True))["size_bytes"].to_pylist())


def test_the_history_shows_what_the_sink_committed_per_checkpoint() -> None:
    lines = format_history([row(1, sink_rows=120, sink_bytes=4_500), row(2)]).splitlines()
    assert "output" in lines[0].split()
    assert "120 rows 4.50 KB" in lines[1]
    assert "rows" not in lines[2]


def test_a_restarted_run_carries_what_the_older_run_staged_before_its_first_batch(
    tmp_path: Path,
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    stage_batch(layout, s, 0, 4, [("a", "eu", 1)])  # done by run 0, after its last checkpoint
    stage_batch(layout, s, 0, 5, [("b", "eu", 1)])  # run 0 died in it: run 1 runs it again
    stage_batch(layout, s, 1, 5, [("b", "eu", 1)])
    restarted = SinkParticipants(layout, 1, continues=True)
    assert restarted.carry == {"out": 5}
    restarted.sweep(min_age_ms=0)  # the re-run batch goes, the carried one stays
    assert staging.staged_ids(layout, "out", 0) == [4]
    restarted.on_cut(1, 5)
    restarted.ran(5)
    plans = restarted.plans(1, 5)
    assert [p.batches for p in plans] == [((0, 4), (1, 5))]
    restarted.commit(1, plans)
    assert rows_of(tmp_path / "out") == [("a", "eu", 1), ("b", "eu", 1)]
    restarted.sweep(min_age_ms=0)
    assert staging.epochs(layout, "out") == [1]


def test_a_restored_run_drops_what_older_runs_staged_after_its_cut(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    stage_batch(layout, s, 0, 4, [("a", "eu", 1)])
    stage_batch(layout, s, 1, 0, [("a", "eu", 1)])
    restored = SinkParticipants(layout, 1, continues=False)
    restored.on_cut(1, 0)
    restored.ran(0)
    assert [p.batches for p in restored.plans(1, 0)] == [((1, 0),)]
    restored.sweep(min_age_ms=0)
    assert staging.epochs(layout, "out") == [1]


def test_a_batch_another_run_staged_under_this_runs_epoch_is_refused(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    s = settings(tmp_path)
    own = stage_batch(layout, s, 3, 0, [("a", "eu", 1)])
    sinks = SinkParticipants(layout, 3)
    sinks.ran(0, at_ms=own.staged_ms + 5)  # the progress of batch 0 comes after its staging
    sinks.on_cut(1, 0)
    assert [p.batches for p in sinks.plans(1, 0)] == [((3, 0),)]
    # a fenced older run, still writing, stages batch 0 again and batch 1 under epoch 3
    zombie = replace(own, staged_ms=own.staged_ms + 10)
    staging.stage(layout, zombie)
    with pytest.raises(SinkError, match=r"batch 0 staged under epoch 3 at .* progress at"):
        sinks.plans(2, 0)
    staging.stage(layout, own)
    stage_batch(layout, s, 3, 1, [("z", "eu", 1)])
    with pytest.raises(SinkError, match=r"batch 1 staged under epoch 3 .*this run never ran"):
        sinks.plans(3, 1)
    assert not (tmp_path / "out" / "_delta_log").exists()  # nothing was committed
