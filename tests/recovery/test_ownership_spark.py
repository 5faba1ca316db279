"""One writer per snapshot path, with real Spark drivers in separate processes.

Driver A runs a query on a snapshot path. Driver B starts the same query on the same
path and is refused with a message naming A's query, writing nothing. Driver C restores
with ``restoreFrom=latest``: it takes the path over while A still runs, A (now a zombie)
fails with FencedError and commits nothing after the takeover, and every checkpoint of
both runs holds exactly the records before its barrier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from barriered.datasource.upstreams.rate import RateUpstream
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.testing.expected import running_totals
from runs import checkpoint_cut, commit_metadata, state_at

pytestmark = pytest.mark.spark

DRIVER = Path(__file__).with_name("owner_driver.py")


def launch(tmp_path: Path, name: str, seconds: float, options: dict[str, str] | None = None):
    """Start one driver process; its output goes to ``<name>.out``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    out = (tmp_path / f"{name}.out").open("w")
    args = [sys.executable, str(DRIVER), str(tmp_path / "snap"), str(tmp_path / f"ck-{name}")]
    args += [str(seconds), json.dumps(options or {})]
    return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)


def output(tmp_path: Path, name: str) -> str:
    return (tmp_path / f"{name}.out").read_text()


def wait_for(what: str, check: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def stat(path: Path) -> tuple[int, int]:
    return path.stat().st_size, path.stat().st_mtime_ns


def upstream() -> RateUpstream:
    """The driver's upstream, to recount its records (they depend on position only)."""
    return RateUpstream(3, 0, 10**9, 25, {0: 4.0}, state_dir="/nonexistent")


def assert_exact(layout: SnapshotLayout) -> list[dict[str, Any]]:
    """Every completed checkpoint holds exactly the records before its barrier."""
    done = checkpoints_table.completed(layout)
    metadata = commit_metadata(layout)
    for row in done:
        cid = row["checkpoint_id"]
        in_state, _ = checkpoint_cut(row, metadata)
        assert state_at(layout, row["state_table_version"]) == running_totals(
            upstream(), in_state
        ), cid
    return done


@pytest.mark.full  # make test under 20 min: 81 s; tests/unit/test_ownership.py in it
def test_a_second_driver_is_refused_and_a_zombie_commits_nothing(tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    layout = SnapshotLayout.at(str(snap))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        a = launch(tmp_path, "a", 600)
        procs.append(a)
        started = wait_for("driver A", lambda: "STARTED" in output(tmp_path, "a"))
        assert started
        query_id, run_id = output(tmp_path, "a").split("STARTED ", 1)[1].split()[:2]
        wait_for("two checkpoints of A", lambda: len(checkpoints_table.completed(layout)) >= 2)

        # B: the same query on the same path while A runs is refused, writing nothing.
        config, operators = (
            snap / "_coordinator" / "config.json",
            snap / "_coordinator" / "operators",
        )
        before = {p: stat(p) for p in [config, *operators.iterdir()]}
        b = launch(tmp_path, "b", 60)
        procs.append(b)
        assert b.wait(timeout=180) == 3, output(tmp_path, "b")
        message = output(tmp_path, "b")
        assert f"snapshot path {str(snap)!r} is in use by a running query" in message
        assert f"query id {query_id}, run id {run_id}, epoch 0, running since" in message
        assert "restoreFrom" in message and "Nothing was written" in message
        assert {p: stat(p) for p in before} == before
        assert DeltaTable(layout.owners_table).version() == 0
        assert sorted(p.name for p in (snap / "_coordinator" / "leases").iterdir()) == [
            "0-query.json",
            "0-source.json",
        ]
        assert a.poll() is None, "driver A must still run"

        # C: restoreFrom takes the path over; A becomes a zombie and fails.
        c = launch(tmp_path, "c", 20, {"restoreFrom": "latest"})
        procs.append(c)
        assert a.wait(timeout=180) == 3, output(tmp_path, "a")
        assert "FencedError" in output(tmp_path, "a") or "is fenced" in output(tmp_path, "a")
        assert "this run (epoch 0) is fenced and commits nothing" in output(tmp_path, "a")
        assert c.wait(timeout=300) == 0, output(tmp_path, "c")
        assert "STOPPED" in output(tmp_path, "c")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)

    owners = DeltaTable(layout.owners_table)
    assert owners.version() == 1
    takeover_ms = next(h["timestamp"] for h in owners.history() if h["version"] == 1)
    row = next(r for r in owners.to_pyarrow_table().to_pylist() if r["epoch"] == 1)
    assert row["took_over"] == 0 and row["restore_from"] == "latest"
    # Nothing committed by the zombie (epoch 0) after the takeover, in any table.
    for table in ("state", "inflight"):
        if not (snap / table).exists():
            continue
        for h in DeltaTable(str(snap / table)).history():
            if h.get("barriered.epoch") == 0:
                assert h["timestamp"] < takeover_ms, (table, h)
    state_history = DeltaTable(layout.state_table).history()
    epochs = {h.get("barriered.epoch") for h in state_history if "barriered.checkpoint_id" in h}
    assert epochs == {0, 1}, "both runs completed checkpoints"
    # Every checkpoint of both runs is exact, recorded once, and none was fenced.
    rows = checkpoints_table.read_rows(layout)
    assert not [r for r in rows if "Fenced" in (r.get("failure_reason") or "")]
    done = assert_exact(layout)
    ids = [r["checkpoint_id"] for r in done]
    assert len(ids) == len(set(ids))
    by_id = {
        int(h["barriered.checkpoint_id"]): h
        for h in state_history
        if "barriered.checkpoint_id" in h
    }
    assert {by_id[i]["barriered.epoch"] for i in ids} == {0, 1}
