"""The barrier handler's conformance scenarios (``docs/barrier-handler.md``).

``barrier_scenarios.json`` (next to this file) holds the project's own scenarios, written
from the rules R1-R10 with their expected results. Where a checkout sits beside the
published scenario set (``../shared/conformance``), those run as well, as an additional
check: the suite never needs anything outside the repository.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from barriered.barrier import AbortReason, Mode, format_event
from barriered.control.offsets import AbortedCheckpoint, SourceOffset
from barriered.control.triggers import TriggerRequest
from barriered.datasource.planner import PlanInput, Planner
from barriered.testing.conformance import run_scenario

SCENARIO_FILE = Path(__file__).resolve().with_name("barrier_scenarios.json")
SCENARIOS: list[dict[str, Any]] = json.loads(SCENARIO_FILE.read_text())
#: The published set, when the checkout has it beside the repository (optional).
PUBLISHED_FILE = (
    Path(__file__).resolve().parents[3] / "shared" / "conformance" / "barrier_scenarios.json"
)
PUBLISHED: list[dict[str, Any]] = (
    json.loads(PUBLISHED_FILE.read_text()) if PUBLISHED_FILE.is_file() else []
)
MODES = ("aligned", "unaligned", "aligned_with_timeout", "at_least_once")


def test_scenario_file_covers_every_mode_and_rule() -> None:
    assert len({sc["name"] for sc in SCENARIOS}) == len(SCENARIOS) >= 30
    assert {sc["mode"] for sc in SCENARIOS} == set(MODES)
    cited = " ".join(sc["description"] for sc in SCENARIOS)
    assert all(f"R{n}" in cited for n in range(1, 11))
    # subsumption and stale markers pass several ids through one handler
    assert any(r == "subsumed" for sc in SCENARIOS for _, r in sc["expect"]["aborted"])


@pytest.mark.parametrize(
    "sc",
    [
        *(pytest.param(sc, id=sc["name"]) for sc in SCENARIOS),
        *(pytest.param(sc, id=f"published-{sc['name']}") for sc in PUBLISHED),
    ],
)
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
    """run_scenario drives the planner's own Alignment (its handler and production
    controller), and no module of the package outside barriered.testing imports a test
    double."""
    import ast
    import inspect

    import barriered
    from barriered.testing import conformance

    source = inspect.getsource(conformance)
    assert "Alignment(" in source and "RecordingController" not in source
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


def test_the_source_planner_passes_two_checkpoints_through_its_one_handler() -> None:
    """Production: checkpoint 2 is requested while 1 aligns; the planner's one barrier
    handler subsumes 1 (R2) and takes 2. The events the planner fed it, written in the
    scenario notation, give the same decisions through run_scenario."""
    planner = Planner()
    offset = SourceOffset(positions=(0, 0))
    requested = {1: TriggerRequest(1), 2: TriggerRequest(2)}  # by the batch they appear in
    events: list[str] = []
    handlers: set[int] = set()
    for k in range(7):
        inp = PlanInput(
            available=(100, 50),
            admission=(5, None),
            target=None,
            requests=tuple(r for b, r in requested.items() if b <= k),
            cancelled=frozenset(),
            last_completed=None,
            now_ms=1000 * k,
            buffer_per_channel=20,
            aligned_timeout_ms=0,
        )
        end = planner.plan(offset, inp)
        assert planner.alignment is not None
        handlers.add(id(planner.alignment))
        events += [format_event(event) for event, _ in planner.alignment.trace]
        if k == 2:
            assert end.aborted == (AbortedCheckpoint(1, AbortReason.SUBSUMED),)
            assert end.active is not None and end.active.arrived == (1,)
        if k == 5:
            assert end.cut is not None and (end.cut.checkpoint_id, end.cut.mode) == (
                2,
                Mode.ALIGNED,
            )
        offset = end
    assert len(handlers) == 1
    result = run_scenario({"channels": 2, "mode": "aligned", "events": events})
    assert result["triggered"] == [[2, "aligned"]]
    assert result["aborted"] == [[1, "subsumed"]]
    assert events.index("b2@1") < events.index("b2@0")
    assert "b1@0" not in events  # withdrawn: 1's barrier never reaches the handler there
