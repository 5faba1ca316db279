"""The ``_rescales`` table of a snapshot path and the commands that show it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from barriered import cli
from barriered.statestore import rescales_table
from snapshots import snapshot_path


def _row(from_partitions: int, to_partitions: int, savepoint: int) -> dict[str, Any]:
    return {
        "status": "completed",
        "started_ms": 1_700_000_000_000,
        "ended_ms": 1_700_000_004_000,
        "from_partitions": from_partitions,
        "to_partitions": to_partitions,
        "max_parallelism": 8,
        "savepoint_id": savepoint,
        "restored_checkpoint_id": savepoint,
        "from_checkpoint_location": "/ck/run-0",
        "to_checkpoint_location": "/ck/run-1",
        "pause_ms": 2_350,
    }


def test_rescales_are_numbered_and_shown(tmp_path: Path, capsys: Any) -> None:
    layout = snapshot_path(tmp_path / "snap", [[10, 5]])
    assert cli.main(["rescales", layout.root]) == 0
    assert "no rescale recorded" in capsys.readouterr().err
    first = rescales_table.append(layout, _row(2, 4, 1))
    second = rescales_table.append(layout, _row(4, 3, 1))
    assert (first["rescale_id"], second["rescale_id"]) == (1, 2)
    assert rescales_table.read_rows(layout) == [first, second]
    assert cli.main(["rescales", layout.root]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["id", "status", "started", "partitions"]
    assert "2 -> 4" in lines[1] and "4 -> 3" in lines[2] and "2.35 s" in lines[2]
    assert cli.main(["rescales", layout.root, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["from_partitions"], r["to_partitions"]) for r in rows] == [(2, 4), (4, 3)]
    assert cli.main(["checkpoints", layout.root]) == 0
    shown = capsys.readouterr().out
    assert "2 rescale(s), the last 4 -> 3 partitions at savepoint 1" in shown
