"""A path that does not exist, an empty folder or a plain Delta table given where a
snapshot path or savepoint is expected: every command says what the path is (not an
option it does not have, nor advice to start over), and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from barriered import cli
from barriered.errors import RestoreError
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve
from file_tree import tree

NOT_A_SNAPSHOT_PATH = (
    "is not a snapshot path: it has no _checkpoints table and no _coordinator/config.json "
    "(give the folder set as snapshotPath)"
)


@pytest.fixture()
def paths(tmp_path: Path) -> dict[str, Path]:
    """A missing path, an empty folder and a plain Delta table."""
    (tmp_path / "empty").mkdir()
    write_deltalake(str(tmp_path / "delta"), pa.table({"a": [1, 2], "b": ["x", "y"]}))
    return {
        "missing": tmp_path / "missing",
        "empty": tmp_path / "empty",
        "delta": tmp_path / "delta",
    }


@pytest.mark.parametrize("command", ["savepoint", "restore-plan", "checkpoints"])
def test_commands_name_a_path_that_is_not_a_snapshot_path(
    command: str, paths: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree(tmp_path)
    for kind, path in paths.items():
        argv = [command, str(path)]
        if command == "savepoint":
            argv += ["-o", str(tmp_path / "out")]
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        what = "does not exist" if kind == "missing" else NOT_A_SNAPSHOT_PATH
        assert err == f"barriered: error: '{path}' {what}\n"
    assert tree(tmp_path) == before


def test_restore_from_a_plain_delta_table_says_it_is_not_a_savepoint(
    paths: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree(tmp_path)
    target = SnapshotLayout.at(str(tmp_path / "snap"))
    for kind in ("delta", "empty"):
        with pytest.raises(RestoreError) as error:
            resolve(target, str(paths[kind]))
        assert str(error.value) == (
            f"option 'restoreFrom': '{paths[kind]}' is not a savepoint or snapshot path: it "
            "has no _checkpoints table and no _coordinator/config.json (a plain Delta table "
            "or another folder). Give a savepoint folder (barriered.savepoint, barriered "
            "savepoint) or the snapshotPath of a query"
        )
    # restore-plan of a savepoint into a new path: the --from folder is named.
    assert cli.main(["restore-plan", str(tmp_path / "new"), "--from", str(paths["delta"])]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"barriered: error: restore-plan --from '{paths['delta']}': '{paths['delta']}' is not "
        "a savepoint or snapshot path"
    )
    assert tree(tmp_path) == before


def test_savepoint_of_a_snapshot_path_without_a_completed_checkpoint_gives_no_restore_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = tmp_path / "snap"
    (snap / "_coordinator").mkdir(parents=True)
    (snap / "_coordinator" / "config.json").write_text('{"conf": {}, "channels": 1}')
    before = tree(tmp_path)
    assert cli.main(["savepoint", str(snap), "-o", str(tmp_path / "sp")]) == 1
    assert capsys.readouterr().err == (
        f"barriered: error: no completed checkpoint under '{snap}'. Nothing was "
        "written; a checkpoint must complete first (barriered checkpoints PATH lists them)\n"
    )
    assert tree(tmp_path) == before
