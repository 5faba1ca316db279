"""Snapshot paths of the earlier state layout (one file per key group, the key group a
partition column, no deletion vectors): a restore reads them into a new snapshot path at
any partitions, a keyed operator never writes into one (refused, nothing written), and a
savepoint of one has this version's layout (the one-command migration). A path of the
version before the control record (a trigger log and a schedule file) restores in place
and goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from barriered import cli
from barriered.control.record import ControlRecord
from barriered.errors import KeyedStateError
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from file_tree import tree
from runs import FILES_SOURCE, MODES, run, start, state_at, write_files
from snapshots import to_earlier_control, to_earlier_layout

pytestmark = pytest.mark.spark

SIZES = {"a": 30, "b": 12}


def _first_run(session: Any, tmp_path: Path) -> tuple[Path, dict[str, str], Any, SnapshotLayout]:
    """An aligned run over one file per channel into ``snap``: the input folder, the
    source options, the records per user and the snapshot path."""
    data = tmp_path / "data"
    source = {**FILES_SOURCE, "path": str(data)}
    first = write_files(data, SIZES, tag="first")
    _, layout = run(session, tmp_path, MODES["aligned"], source, str(tmp_path / "snap"), (30, 12))
    return data, source, first, layout


def test_a_path_of_the_earlier_layout_restores_elsewhere_and_converts(
    session: Any, tmp_path: Path
) -> None:
    data, source, first, layout = _first_run(session, tmp_path)
    earlier = to_earlier_layout(layout, tmp_path / "earlier")
    assert DeltaTable(earlier.state_table).metadata().partition_columns == [
        "operator",
        "key_group",
    ]
    assert state_at(earlier, DeltaTable(earlier.state_table).version()) == dict(first)

    # A keyed operator does not write into it: refused before anything is written.
    second = write_files(data, SIZES, tag="second")
    before = tree(earlier.root)
    latest = {**source, "restoreFrom": "latest"}
    with pytest.raises(KeyedStateError, match="the layout of an earlier version") as err:
        start(session, tmp_path, MODES["aligned"], latest, earlier.root, "ck-refused")
    assert f'.option("restoreFrom", "{earlier.root}")' in str(err.value)
    assert tree(earlier.root) == before

    # Restored into a new snapshot path, on 3 shuffle partitions: exact.
    session.conf.set("spark.sql.shuffle.partitions", "3")
    restored_source = {**source, "restoreFrom": earlier.root}
    snap = str(tmp_path / "new")
    _, new = run(session, tmp_path, MODES["aligned"], restored_source, snap, (60, 24), "ck-new")
    assert state_at(new, DeltaTable(new.state_table).version()) == dict(first + second)
    assert DeltaTable(new.state_table).metadata().partition_columns == ["operator"]

    # The migration: a savepoint of the earlier path has this version's layout.
    assert cli.main(["savepoint", earlier.root, "-o", str(tmp_path / "sp")]) == 0
    savepoint = SnapshotLayout.existing(str(tmp_path / "sp"))
    assert DeltaTable(savepoint.state_table).metadata().partition_columns == ["operator"]
    assert state_at(savepoint, DeltaTable(savepoint.state_table).version()) == dict(first)
    assert tree(earlier.root) == before  # a savepoint reads its origin only


def test_a_path_of_the_version_before_the_control_record_restores_in_place_and_goes_on(
    session: Any, tmp_path: Path
) -> None:
    data, source, first, layout = _first_run(session, tmp_path)
    last = int(checkpoints_table.completed(layout)[-1]["checkpoint_id"])
    to_earlier_control(layout)
    assert ControlRecord.read(layout).last_completed == last  # from triggers.json

    second = write_files(data, SIZES, tag="second")
    latest = {**source, "restoreFrom": "latest"}
    _, again = run(session, tmp_path, MODES["aligned"], latest, layout.root, (60, 24), "ck-2", last)
    assert state_at(again, DeltaTable(again.state_table).version()) == dict(first + second)
    control = ControlRecord.read(again)  # the new run wrote its own record
    assert Path(again.control_file).exists() and (control.last_completed or 0) > last
