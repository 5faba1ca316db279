"""The "block" action of fault injection: record where, wait there, go on when released."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from barriered import crash_points
from barriered.errors import InjectedFault
from barriered.statestore.layout import SnapshotLayout
from barriered.testing import faults


def test_a_blocking_fault_waits_until_released_then_goes_on(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    faults.inject(layout.root, faults.STATE_SNAPSHOT, checkpoint_id=2, action=faults.BLOCK)
    faults.fire(layout, faults.STATE_SNAPSHOT, 1)  # below the armed id: nothing happens
    assert faults.fired(layout.root, faults.STATE_SNAPSHOT) is None
    errors: list[BaseException] = []

    def task() -> None:
        try:
            faults.fire(layout, faults.STATE_SNAPSHOT, 3, detail={"files": ["a.parquet"]})
        except BaseException as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    worker = threading.Thread(target=task)
    worker.start()
    record = faults.wait_fired(layout.root, faults.STATE_SNAPSHOT, timeout_s=10)
    assert record["checkpoint_id"] == 3 and record["action"] == faults.BLOCK
    assert record["pid"] == os.getpid() and record["detail"] == {"files": ["a.parquet"]}
    time.sleep(0.3)
    assert worker.is_alive(), "the party waits at the point until released"
    faults.release(layout.root, faults.STATE_SNAPSHOT)
    worker.join(timeout=10)
    assert not worker.is_alive() and not errors  # it went on, nothing raised
    faults.fire(layout, faults.STATE_SNAPSHOT, 4)  # fired already: never again, no wait


def test_a_blocking_fault_goes_on_after_block_s(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    faults.inject(layout.root, faults.INFLIGHT_CAPTURE, action=faults.BLOCK, block_s=0.2)
    begin = time.monotonic()
    faults.fire(layout, faults.INFLIGHT_CAPTURE, 1)
    assert 0.2 <= time.monotonic() - begin < 5


def test_an_unknown_action_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown fault action 'hang'"):
        faults.inject(str(tmp_path / "snap"), faults.STATE_SNAPSHOT, action="hang")
    assert not (tmp_path / "snap").exists()


def test_production_code_reaches_faults_only_through_the_hook_when_enabled(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    faults.inject(layout.root, faults.BEFORE_COMMIT)
    armed = sorted(p.name for p in (tmp_path / "snap").rglob("*.json"))
    # A process started without BARRIERED_FAULTS (any user's): the armed fault never
    # fires there, nothing is claimed, and arming one is refused.
    env = {k: v for k, v in os.environ.items() if k != crash_points.ENV}
    script = (
        "from barriered import crash_points\n"
        "from barriered.statestore.layout import SnapshotLayout\n"
        "from barriered.testing import faults\n"
        f"crash_points.hit(SnapshotLayout.at({layout.root!r}), crash_points.BEFORE_COMMIT, 1)\n"
        "try:\n"
        f"    faults.inject({layout.root!r}, crash_points.BEFORE_COMMIT)\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "fault injection is off in this process: start it" in run.stdout
    assert "BARRIERED_FAULTS=barriered.testing.faults" in run.stdout
    assert sorted(p.name for p in (tmp_path / "snap").rglob("*.json")) == armed
    # This process has it on (tests/conftest.py): the same call fires.
    with pytest.raises(InjectedFault, match="injected fault at before_commit"):
        crash_points.hit(layout, crash_points.BEFORE_COMMIT, 1)


def test_the_wheel_ships_no_test_seam() -> None:
    """The wheel's packages (pyproject's find rule) leave barriered.testing out, and no
    module it ships imports from there."""
    import ast

    import setuptools

    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[2]
    find = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    rule = find["packages"]["find"]
    shipped = setuptools.find_packages(str(root / rule["where"][0]), exclude=rule["exclude"])
    assert "barriered" in shipped and "barriered.coordinator" in shipped
    assert [p for p in shipped if p.startswith("barriered.testing")] == []
    offenders = []
    for package in shipped:
        for path in (root / "python" / package.replace(".", "/")).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                if any(n.startswith("barriered.testing") for n in names):
                    offenders.append(str(path))
    assert offenders == []
