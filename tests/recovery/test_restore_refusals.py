"""Restores that must be refused: each names what is wrong and changes no file.

One real run makes a snapshot path; each test copies it, damages or mismatches one
thing, tries to restore, and asserts the message and that the snapshot path is exactly
as before (same files, same sizes, same modification times).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

import barriered
from barriered import cli
from barriered.errors import BarrieredError, ConfigError, RestoreError
from barriered.examples import RecordNumbers, RunningTotals
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve
from file_tree import tree
from runs import FILES_SOURCE, MODES, PREFIX, SOURCE, commit_metadata, run, state_at, write_files

pytestmark = pytest.mark.spark


class RunningAverages:
    """Same operator name as RunningTotals' snapshot, another state schema."""

    state_schema = "total double, count long"
    output_schema = "user_id string, total double"

    def process(self, key: Any, rows: Any, state: Any) -> None:
        return None


@pytest.fixture(scope="module")
def snapshot(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A snapshot path with several completed aligned checkpoints."""
    barriered.install(spark)
    tmp = tmp_path_factory.mktemp("refusals")
    conf = {
        **MODES["aligned"],
        "checkpointInterval": "10ms",
        "maxParallelism": "8",
        "bufferPerChannel": "100",
        "retainedCheckpoints": "100",
    }
    run(spark, tmp, conf)
    for key in list(spark.conf.getAll):
        if key.startswith(PREFIX):
            spark.conf.unset(key)
    yield tmp / "snap"


@pytest.fixture()
def copy(snapshot: Path, tmp_path: Path, session: Any) -> Path:
    """A private copy of the snapshot path, with the fixture's configuration."""
    session.conf.set(PREFIX + "unaligned.enabled", "false")
    target = tmp_path / "snap"
    shutil.copytree(snapshot, target)
    return target


def attempt(
    session: Any,
    snap: Path,
    restore_from: str,
    processor: Any = None,
    keys: tuple[str, ...] = ("user_id",),
    source: dict[str, str] | None = None,
) -> str:
    """Try to restore; return the error message (the query must not start)."""
    before = tree(snap)
    with pytest.raises(Exception) as failure:
        events = (
            session.readStream.format("barriered")
            .options(**(source or SOURCE))
            .option("snapshotPath", str(snap))
            .option("restoreFrom", restore_from)
            .load()
        )
        out = barriered.keyed(events, *keys).process(processor or RunningTotals(), "running_totals")
        query = (
            out.writeStream.format("noop")
            .option("checkpointLocation", str(snap.parent / "ck-refused"))
            .start()
        )
        query.awaitTermination(60)
        raise AssertionError("the restore was not refused")
    assert tree(snap) == before, "a refused restore changed the snapshot path"
    return str(failure.value)


def state_file(snap: Path) -> Path:
    """A data file the latest checkpoint reads."""
    point = resolve(SnapshotLayout.at(str(snap)), "latest")
    return snap / "state" / point.state_files()[0].path


def test_a_changed_max_parallelism_is_refused(session: Any, copy: Path) -> None:
    session.conf.set(PREFIX + "maxParallelism", "16")
    message = attempt(session, copy, "latest")
    assert "maxParallelism is fixed for the life of the snapshot path" in message
    assert "maxParallelism=8" in message


def test_a_restart_with_another_max_parallelism_is_refused_writing_nothing(
    session: Any, copy: Path
) -> None:
    """Without restoreFrom too: refused at load(), before keyed() registers the operator
    (its _coordinator/operators file kept maxParallelism=8, as its state)."""
    session.conf.set(PREFIX + "maxParallelism", "16")
    before = tree(copy)
    with pytest.raises(ConfigError) as changed:
        events = (
            session.readStream.format("barriered")
            .options(**SOURCE)
            .option("snapshotPath", str(copy))
            .load()
        )
        barriered.keyed(events, "user_id").process(RunningTotals())
    assert str(changed.value).startswith(
        "maxParallelism is fixed for the life of the snapshot path: the snapshot was taken "
        "with maxParallelism=8, this query has spark.sql.streaming.barriered.maxParallelism=16"
    )
    assert tree(copy) == before
    registered = json.loads((copy / "_coordinator/operators/running_totals.json").read_text())
    assert registered["max_parallelism"] == 8


def test_restore_from_into_a_checkpoint_location_with_offsets_is_refused(
    session: Any, snapshot: Path, copy: Path
) -> None:
    """Spark resumes from its own offsets: restoreFrom would be silently ignored."""
    checkpoint = copy.parent / "ck-resumed"
    shutil.copytree(snapshot.parent / "ck", checkpoint)  # the fixture run's offsets
    before = tree(copy)
    events = (
        session.readStream.format("barriered")
        .options(**SOURCE)
        .option("snapshotPath", str(copy))
        .option("restoreFrom", "latest")
        .load()
    )
    query = (
        barriered.keyed(events, "user_id")
        .process(RunningTotals())
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException) as error:
        query.awaitTermination(60)
    latest = max(commit_metadata(SnapshotLayout.at(str(copy))))
    assert (
        f"RestoreError: option 'restoreFrom'='latest' names checkpoint {latest} of snapshot "
        f"path '{copy}', but the query's checkpointLocation already holds offsets (of a run "
        "that was not restored, delivered up to [640, 160, 160]): Spark resumes a query from "
        "its checkpointLocation and would ignore restoreFrom. Nothing was written. To "
        "restore, start the query with a new, empty checkpointLocation; to resume where the "
        "query stopped, remove restoreFrom"
    ) in str(error.value)
    assert tree(copy) == before


def test_other_key_columns_are_refused(session: Any, copy: Path) -> None:
    message = attempt(session, copy, "latest", keys=("amount",))
    assert "cannot restore operator 'running_totals'" in message
    assert "key columns were ['user_id'], now ['amount']" in message


def test_another_state_schema_is_refused(session: Any, copy: Path) -> None:
    message = attempt(session, copy, "latest", processor=RunningAverages())
    assert "the state schema was 'total long, count long'" in message
    assert "'total double, count long'" in message


def test_a_checkpoint_that_does_not_exist_is_refused(session: Any, copy: Path) -> None:
    message = attempt(session, copy, "999")
    assert "checkpoint 999 does not exist" in message
    assert "completed checkpoints there: [1" in message


def test_an_aborted_checkpoint_is_refused(session: Any, copy: Path) -> None:
    layout = SnapshotLayout.at(str(copy))
    aborted = max(commit_metadata(layout)) + 1
    checkpoints_table.append(
        layout,
        {"checkpoint_id": aborted, "status": "aborted", "failure_reason": "expired"},
    )
    message = attempt(session, copy, str(aborted))
    assert f"checkpoint {aborted} under" in message and "is aborted: expired" in message


@pytest.mark.parametrize("damage", ["missing", "truncated", "garbage"])
def test_missing_or_corrupt_state_files_are_named(session: Any, copy: Path, damage: str) -> None:
    victim = state_file(copy)
    if damage == "missing":
        victim.unlink()
    elif damage == "truncated":
        victim.write_bytes(victim.read_bytes()[:-20])
    else:
        victim.write_bytes(b"x" * victim.stat().st_size)
    message = attempt(session, copy, "latest")
    assert str(victim) in message
    expected = {"missing": "is missing", "truncated": "bytes, the Delta log says",
                "garbage": "is not a readable Parquet file"}[damage]  # fmt: skip
    assert expected in message and "Nothing was changed or deleted" in message


def test_a_snapshot_of_another_query_is_refused(session: Any, copy: Path) -> None:
    message = attempt(session, copy, "latest", source={**SOURCE, "channels": "4"})
    assert "it was taken from 3 channels, this source has 4" in message


def test_an_unknown_restore_path_is_refused(session: Any, copy: Path, tmp_path: Path) -> None:
    message = attempt(session, copy, str(tmp_path / "nowhere"))
    assert "is not 'latest', a checkpoint id, or an existing savepoint" in message


def test_a_savepoint_into_a_used_snapshot_path_is_refused(
    session: Any, copy: Path, tmp_path: Path
) -> None:
    savepoint = tmp_path / "sp"
    assert cli.main(["savepoint", str(copy), "-o", str(savepoint)]) == 0
    message = attempt(session, copy, str(savepoint))
    assert "already holds checkpoints of another run" in message


def test_load_time_refusals_are_the_projects_own_errors(session: Any, copy: Path) -> None:
    """Refused in the driver by ``load()`` itself: the typed error and its message alone,
    not Spark's ``PYTHON_DATA_SOURCE_ERROR`` wrapping a worker traceback."""
    before = tree(copy)

    def load(**options: str) -> Any:
        reader = session.readStream.format("barriered").options(**SOURCE)
        return reader.option("snapshotPath", str(copy)).options(**options).load()

    with pytest.raises(RestoreError) as missing:
        load(restoreFrom="999")
    assert "checkpoint 999 does not exist" in str(missing.value)
    with pytest.raises(ConfigError) as misspelt:
        load(checkpointIntervall="1s")
    assert "(did you mean 'checkpointInterval', or the session key" in str(misspelt.value)
    session.conf.set(PREFIX + "maxParallelism", "16")
    with pytest.raises(BarrieredError) as changed:
        load(restoreFrom="latest")
    assert "maxParallelism is fixed for the life of the snapshot path" in str(changed.value)
    no_input = copy.parent / "no-such-folder"
    files = session.readStream.format("barriered").options(**FILES_SOURCE)
    with pytest.raises(ConfigError) as folder:
        files.option("snapshotPath", str(copy)).option("path", str(no_input)).load()
    assert str(folder.value) == (
        f"upstream option 'path': directory {str(no_input)!r} does not exist; create it"
    )
    for error in (missing.value, misspelt.value, changed.value, folder.value):
        assert "PYTHON_DATA_SOURCE_ERROR" not in str(error) and "Traceback" not in str(error)
    assert tree(copy) == before


def test_cli_savepoint_copies_one_checkpoint(copy: Path, tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(copy))
    committed = commit_metadata(layout)
    first = min(committed)
    target = tmp_path / "sp"
    assert cli.main(["savepoint", str(copy), "-o", str(target), "--checkpoint", str(first)]) == 0
    saved = SnapshotLayout.at(str(target))
    rows = checkpoints_table.read_rows(saved)
    assert [(r["checkpoint_id"], r["status"]) for r in rows] == [(first, "completed")]
    version = int(committed[first]["version"])
    assert state_at(saved, rows[0]["state_table_version"]) == state_at(layout, version)
    # Self-contained: no file of the savepoint lies outside it.
    assert all(not Path(p).is_absolute() for p in tree(target / "state"))
    # Never overwritten.
    assert cli.main(["savepoint", str(copy), "-o", str(target)]) == 1


def test_cli_restore_plan_checks_files_and_shows_the_start(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = SnapshotLayout.at(str(copy))
    latest = max(commit_metadata(layout))
    barrier = json.loads(commit_metadata(layout)[latest]["barriered.barrier"])
    assert cli.main(["restore-plan", str(copy)]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint {latest} of snapshot path" in out and "all readable" in out
    for channel, position in barrier.items():
        assert f"channel {channel}: resumes at {position}\n" in out
    assert "operators: running_totals" in out
    victim = state_file(copy)
    victim.unlink()
    assert cli.main(["restore-plan", str(copy), "--from", str(latest)]) == 1
    assert f"{victim}' is missing" in capsys.readouterr().err


def test_a_missing_key_column_leaves_no_upstream_manifest(session: Any, tmp_path: Path) -> None:
    data, snap = tmp_path / "data", tmp_path / "snap"
    write_files(data, {"a": 6, "b": 6})
    with pytest.raises(ConfigError, match=re.escape("unknown key column(s) ['nope']")):
        events = (
            session.readStream.format("barriered")
            .options(**FILES_SOURCE)
            .option("path", str(data))
            .option("snapshotPath", str(snap))
            .load()
        )
        barriered.keyed(events, "nope")
    assert tree(snap) == {}  # not even _source/files_manifest.jsonl


def test_a_refused_restore_of_the_files_upstream_records_no_new_file(
    session: Any, tmp_path: Path
) -> None:
    """Issue 36, case 5: refused for a checkpointLocation that holds offsets, the restore
    said "Nothing was written" but had recorded the input's new files in the snapshot
    path's manifest (an availableNow run listed the upstream before the check)."""
    data, snap = tmp_path / "data", tmp_path / "snap"
    write_files(data, {"a": 12, "b": 6}, tag="first")
    source = {**FILES_SOURCE, "path": str(data)}
    run(session, tmp_path, MODES["aligned"], source, str(snap), (12, 6))
    write_files(data, {"a": 12, "b": 6}, tag="second")
    before = tree(snap)
    query = (
        barriered.keyed(
            session.readStream.format("barriered")
            .options(**source)
            .option("snapshotPath", str(snap))
            .option("restoreFrom", "latest")
            .load(),
            "user_id",
        )
        .process(RunningTotals())
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))  # the first run's offsets
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException) as error:
        query.awaitTermination(60)
    assert "already holds offsets (of a run that was not restored" in str(error.value)
    assert "Nothing was written" in str(error.value)
    assert tree(snap) == before


def test_a_restore_into_a_query_without_the_checkpoints_keyed_operator_is_refused(
    session: Any, copy: Path
) -> None:
    """Issue 36, case 1: ``restoreFrom=latest`` into a query whose keyed operator was
    replaced by another waited for the old operator's key groups forever (its
    registration stayed on the path) and ended without an error. Refused at the run's
    first progress, before any checkpoint: the state, the history and the registrations
    stay as they were."""
    layout = SnapshotLayout.at(str(copy))
    latest = max(commit_metadata(layout))
    kept = ["state", "_checkpoints", "_coordinator/operators"]
    before = {part: tree(copy / part) for part in kept}
    events = (
        session.readStream.format("barriered")
        .options(**SOURCE)
        .option("snapshotPath", str(copy))
        .option("restoreFrom", "latest")
        .load()
    )
    query = (
        barriered.keyed(events, "user_id")
        .process(RecordNumbers())
        .writeStream.format("noop")
        .option("checkpointLocation", str(copy.parent / "ck-replaced"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException) as error:
        query.awaitTermination(120)
    assert (
        f"RestoreError: restored state without its operator: checkpoint {latest} of "
        f"{str(copy)!r} holds the state of keyed operator(s) ['running_totals'], which the "
        "restored query does not run (it runs ['record_numbers'])"
    ) in str(error.value)
    assert (
        f"barriered savepoint transform {str(copy)!r} -o NEW --operator running_totals "
        "--where false, then restoreFrom NEW"
    ) in str(error.value)
    assert {part: tree(copy / part) for part in kept} == before
