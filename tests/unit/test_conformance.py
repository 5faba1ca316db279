"""The published barrier-handler conformance scenarios (shared/conformance)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from barriered.testing.conformance import run_scenario

SCENARIO_FILE = (
    Path(__file__).resolve().parents[3] / "shared" / "conformance" / "barrier_scenarios.json"
)
SCENARIOS: list[dict[str, Any]] = json.loads(SCENARIO_FILE.read_text())


def test_scenario_file_is_complete() -> None:
    assert len(SCENARIOS) == 28
    assert len({sc["name"] for sc in SCENARIOS}) == len(SCENARIOS)


@pytest.mark.parametrize("sc", SCENARIOS, ids=lambda s: s["name"])
def test_conformance(sc: dict[str, Any]) -> None:
    given = {k: v for k, v in copy.deepcopy(sc).items() if k != "expect"}
    assert json.loads(json.dumps(run_scenario(given))) == sc["expect"]


@pytest.mark.parametrize("sc", SCENARIOS[:4], ids=lambda s: s["name"])
def test_run_scenario_is_deterministic_and_leaves_input_alone(sc: dict[str, Any]) -> None:
    given = {k: v for k, v in copy.deepcopy(sc).items() if k != "expect"}
    before = copy.deepcopy(given)
    assert run_scenario(given) == run_scenario(given)
    assert given == before


def test_the_scenarios_run_on_the_planners_controller_and_no_test_double_ships() -> None:
    """run_scenario drives the handler with the planner's production controller, and no
    module of the package outside barriered.testing imports a test double."""
    import ast
    import inspect

    import barriered
    from barriered.testing import conformance

    source = inspect.getsource(conformance)
    assert "BatchController()" in source and "RecordingController" not in source
    package = Path(barriered.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        if path.parent.name == "testing":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "barriered.testing.recording"
            ):
                offenders.append(str(path))
            if isinstance(node, ast.ClassDef) and node.name.startswith("Recording"):
                offenders.append(str(path))
    assert offenders == []
