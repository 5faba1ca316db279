"""Round trips of the source offset (Spark's offset log) and of a trigger request."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from barriered.barrier import AbortReason, Mode
from barriered.control.offsets import (
    FORMAT_VERSION,
    AbortedCheckpoint,
    ActiveCheckpoint,
    Cut,
    SourceOffset,
    StartedCheckpoint,
)
from barriered.control.triggers import TriggerRequest


def through_json(d: dict[str, object]) -> dict[str, object]:
    return json.loads(json.dumps(d))


ACTIVE = ActiveCheckpoint(
    checkpoint_id=4,
    kind="savepoint",
    mode=Mode.ALIGNED,
    barrier=(100, 70, 0),
    arrived=(2, 1),
    started_ms=1_700_000_000_123,
    reason="operator asked",
    first_barrier_ms=1_700_000_000_500,
)
CUT = Cut(
    checkpoint_id=3,
    kind="checkpoint",
    mode=Mode.UNALIGNED,
    barrier=(90, 60, 0),
    inflight=((0, 20, 90), (1, 55, 60)),
    base=2,
    at_ms=1_700_000_000_000,
)
FULL = SourceOffset(
    positions=(40, 70, 0),
    last_id=4,
    last_cut=(90, 60, 0),
    active=ACTIVE,
    cut=CUT,
    started=(
        StartedCheckpoint(
            checkpoint_id=4,
            kind="savepoint",
            mode=Mode.ALIGNED,
            barrier=(100, 70, 0),
            at_ms=1_700_000_000_123,
            requested_ms=1_700_000_000_100,
            reason="operator asked",
        ),
    ),
    aborted=(AbortedCheckpoint(3, AbortReason.SUBSUMED),),
    restore={"checkpoint": 2, "path": "/tmp/snap"},
)


# -- ActiveCheckpoint ------------------------------------------------------------------------


def test_active_checkpoint_round_trip() -> None:
    d = ACTIVE.to_dict()
    assert d == {
        "id": 4,
        "kind": "savepoint",
        "mode": "aligned",
        "barrier": [100, 70, 0],
        "arrived": [2, 1],
        "started_ms": 1_700_000_000_123,
        "reason": "operator asked",
        "first_barrier_ms": 1_700_000_000_500,
        "older": [],
    }
    assert ActiveCheckpoint.from_dict(through_json(d)) == ACTIVE


def test_older_pending_at_least_once_checkpoints_round_trip_and_old_offsets_have_none() -> None:
    """The at-least-once checkpoints still pending in the source's handler behind the
    active one (R10) are part of the handler's state; offsets written before they were
    read as none."""
    active = replace(ACTIVE, mode=Mode.AT_LEAST_ONCE, older=(2, 3))
    d = active.to_dict()
    assert d["older"] == [2, 3]
    assert ActiveCheckpoint.from_dict(through_json(d)) == active
    del d["older"]
    assert ActiveCheckpoint.from_dict(d).older == ()


def test_active_checkpoint_of_an_older_offset_times_out_from_its_start() -> None:
    """Offsets written before first_barrier_ms: with barriers in, the alignment timeout
    counts from started_ms, as it did then; without, from the first barrier to come."""
    d = ACTIVE.to_dict()
    del d["first_barrier_ms"]
    assert ActiveCheckpoint.from_dict(d).first_barrier_ms == 1_700_000_000_123
    d["arrived"] = []
    assert ActiveCheckpoint.from_dict(d).first_barrier_ms is None


def test_active_checkpoint_reason_is_optional() -> None:
    d = ACTIVE.to_dict()
    del d["reason"]
    assert ActiveCheckpoint.from_dict(d).reason == ""
    assert ActiveCheckpoint(1, "checkpoint", Mode.ALIGNED, (1,), (), 0).reason == ""


def test_active_checkpoint_parsing_normalises_types() -> None:
    d = {
        "id": "4",
        "kind": "checkpoint",
        "mode": "unaligned",
        "barrier": ["1", 2.0],
        "arrived": ["1"],
        "started_ms": "7",
    }
    parsed = ActiveCheckpoint.from_dict(d)
    assert parsed == ActiveCheckpoint(4, "checkpoint", Mode.UNALIGNED, (1, 2), (1,), 7, "", 7)
    assert isinstance(parsed.barrier, tuple) and isinstance(parsed.arrived, tuple)


# -- Cut -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cut",
    [
        CUT,
        Cut(1, "checkpoint", Mode("aligned"), (5,), (), None, 0),
        Cut(9, "savepoint", Mode("aligned"), (), (), 0, 12),
        Cut(2, "checkpoint", Mode("at_least_once"), (3, 4), (), 1, 5),
    ],
)
def test_cut_round_trip(cut: Cut) -> None:
    d = cut.to_dict()
    assert d["inflight"] == [list(x) for x in cut.inflight]
    back = Cut.from_dict(through_json(d))
    assert back == cut
    assert all(isinstance(x, tuple) for x in back.inflight)


def test_cut_base_absent_or_null_is_none() -> None:
    d = CUT.to_dict()
    d["base"] = None
    assert Cut.from_dict(d).base is None
    del d["base"]
    assert Cut.from_dict(d).base is None
    d["base"] = 0  # a real id 0 stays 0 (not falsy-dropped)
    assert Cut.from_dict(d).base == 0


def test_cut_rejects_malformed_in_flight_ranges() -> None:
    d = CUT.to_dict()
    d["inflight"] = [[0, 1]]
    with pytest.raises(ValueError):
        Cut.from_dict(d)


# -- SourceOffset ----------------------------------------------------------------------------


def test_initial_offset_round_trip() -> None:
    initial = SourceOffset(positions=(0, 0, 0))
    d = initial.to_dict()
    assert d == {
        "v": FORMAT_VERSION,
        "positions": [0, 0, 0],
        "last_id": 0,
        "last_cut": None,
        "active": None,
        "cut": None,
        "started": [],
        "aborted": [],
        "restore": None,
        "replay": None,
    }
    assert SourceOffset.from_dict(through_json(d)) == initial


def test_full_offset_round_trip() -> None:
    d = FULL.to_dict()
    assert d["v"] == FORMAT_VERSION
    assert d["active"] == ACTIVE.to_dict()
    assert d["cut"] == CUT.to_dict()
    text = json.dumps(d)  # what Spark writes to its offset log
    back = SourceOffset.from_dict(json.loads(text))
    assert back == FULL
    assert back.to_dict() == d
    assert json.dumps(back.to_dict()) == text


def test_offset_round_trip_is_stable_over_many_restarts() -> None:
    offset = FULL
    for _ in range(5):
        offset = SourceOffset.from_dict(json.loads(json.dumps(offset.to_dict())))
    assert offset == FULL


def test_minimal_offset_dict_takes_the_defaults() -> None:
    parsed = SourceOffset.from_dict({"positions": [3, "4"]})
    assert parsed == SourceOffset(positions=(3, 4))
    assert parsed.last_id == 0
    assert parsed.last_cut is None and parsed.active is None and parsed.cut is None
    assert parsed.started == () and parsed.aborted == () and parsed.restore is None


def test_from_dict_ignores_unknown_keys() -> None:
    d = FULL.to_dict()
    d["future_field"] = {"x": 1}
    assert SourceOffset.from_dict(d) == FULL


def test_offsets_are_immutable_values_compared_by_content() -> None:
    a = SourceOffset(positions=(1, 2), last_id=1)
    assert a == SourceOffset(positions=(1, 2), last_id=1)
    assert a != SourceOffset(positions=(1, 2), last_id=2)
    assert a != SourceOffset(positions=(1, 3), last_id=1)
    with pytest.raises(AttributeError):
        a.positions = (0, 0)  # type: ignore[misc]


def test_carried_drops_only_the_per_batch_events() -> None:
    carried = FULL.carried()
    assert carried == SourceOffset(
        positions=FULL.positions,
        last_id=FULL.last_id,
        last_cut=FULL.last_cut,
        active=FULL.active,
        restore=FULL.restore,
    )
    assert carried.cut is None and carried.restore == FULL.restore
    assert carried.started == () and carried.aborted == ()
    assert carried.carried() == carried
    assert FULL.cut is CUT  # the original is unchanged
    assert SourceOffset.from_dict(through_json(carried.to_dict())) == carried


# -- TriggerRequest --------------------------------------------------------------------------


def test_trigger_request_defaults_and_json_form() -> None:
    r = TriggerRequest(5)
    assert r.to_dict() == {
        "id": 5,
        "kind": "checkpoint",
        "mode": "aligned",
        "reason": "",
        "requested_ms": 0,
    }
    assert TriggerRequest.from_dict(through_json(r.to_dict())) == r
