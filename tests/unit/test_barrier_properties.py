"""Property tests of the barrier handler over random event interleavings (no Spark).

Every generated sequence ends with end of partition on every channel still open, so all
held data must have been released by the end. Expected results are computed from the
event list itself wherever possible, not from the handler's own rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate, pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from barriered.barrier import (
    Barrier,
    BarrierHandler,
    Cancel,
    Data,
    EndOfPartition,
    Event,
    ManualClock,
    Mode,
    TimeAdvance,
    parse_event,
)
from barriered.datasource.alignment import dispatch
from barriered.testing.conformance import run_scenario
from barriered.testing.recording import RecordingController

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Scenario:
    channels: int
    mode: Mode
    timeout: int | None
    events: list[str]

    @property
    def parsed(self) -> list[Event]:
        return [parse_event(text) for text in self.events]


@st.composite
def scenarios(draw: st.DrawFn, mode: Mode) -> Scenario:
    """Random interleavings; ids are created in increasing order, channels may miss ids."""
    channels = draw(st.integers(1, 8))
    timeout = draw(st.integers(0, 25)) if mode is Mode.ALIGNED_WITH_TIMEOUT else None
    open_channels = list(range(channels))
    newest = 0  # highest id generated so far
    events: list[str] = []
    for _ in range(draw(st.integers(0, 60))):
        kind = draw(st.sampled_from("ddddbbbbxett"))
        if kind == "t":
            events.append(f"t+{draw(st.integers(1, 12))}")
            continue
        if not open_channels:
            break
        channel = draw(st.sampled_from(open_channels))
        if kind == "d":
            events.append(f"d@{channel}")
        elif kind == "e":
            open_channels.remove(channel)
            events.append(f"eop@{channel}")
        else:
            # mostly the newest id, sometimes a new one, sometimes a late old one
            cid = max(1, newest + draw(st.sampled_from([0, 0, 0, 1, 1, 2, -1, -2])))
            newest = max(newest, cid)
            events.append(f"{'b' if kind == 'b' else 'x'}{cid}@{channel}")
    events.extend(f"eop@{channel}" for channel in open_channels)
    return Scenario(channels, mode, timeout, events)


@dataclass
class Run:
    """What the handler did, event by event."""

    calls: list[list[tuple[object, ...]]] = field(default_factory=list)
    blocked: list[frozenset[int]] = field(default_factory=list)
    controller: RecordingController[int] = field(default_factory=RecordingController)
    handler: BarrierHandler[int] | None = None

    @staticmethod
    def processed_in(calls: list[tuple[object, ...]]) -> list[int]:
        """The data indices processed by ``calls``, in order."""
        return [item for name, _, item, *_ in calls if name == "process" and isinstance(item, int)]


def run(sc: Scenario) -> Run:
    """Feed the scenario to a handler, recording the controller calls of each event."""
    result = Run()
    clock = ManualClock()
    handler = BarrierHandler(sc.channels, sc.mode, result.controller, clock, sc.timeout)
    result.handler = handler
    for index, event in enumerate(sc.parsed):
        before = len(result.controller.calls)
        dispatch(handler, clock, event, index)  # the production planner's dispatch
        result.calls.append(result.controller.calls[before:])
        result.blocked.append(handler.blocked_channels())
    return result


def data_channels(sc: Scenario) -> dict[int, int]:
    """Data event index -> channel."""
    return {i: e.channel for i, e in enumerate(sc.parsed) if isinstance(e, Data)}


def processed_at(r: Run) -> dict[int, int]:
    """Data event index -> index of the event during which it was processed."""
    return {item: at for at, calls in enumerate(r.calls) for item in r.processed_in(calls)}


def triggered_at(r: Run) -> dict[int, tuple[int, Mode]]:
    """Checkpoint id -> (index of the triggering event, checkpoint mode)."""
    out: dict[int, tuple[int, Mode]] = {}
    for at, calls in enumerate(r.calls):
        for call in calls:
            if call[0] == "trigger":
                cid, mode = call[1], call[2]
                assert isinstance(cid, int) and isinstance(mode, Mode)
                assert cid not in out, f"checkpoint {cid} triggered twice"
                out[cid] = (at, mode)
    return out


# -- properties ----------------------------------------------------------------------------


def check_every_item_processed_once_in_channel_order(sc: Scenario, r: Run) -> None:
    channels = data_channels(sc)
    processed = r.controller.processed
    items = [item for _, item in processed]
    assert sorted(items) == sorted(channels), "every data item is processed exactly once"
    for channel, item in processed:
        assert channels[item] == channel
    for channel in range(sc.channels):
        order = [item for c, item in processed if c == channel]
        assert order == sorted(order), f"channel {channel} processed out of order"
    handler = r.handler
    assert handler is not None
    assert handler.held_items() == 0
    assert handler.blocked_channels() == frozenset()
    assert handler.open_channels() == frozenset()
    assert handler.current_checkpoint() is None
    assert handler.pending_checkpoints() == ()


def check_triggered_ids_increase(r: Run) -> None:
    ids = [cid for cid, _ in r.controller.triggered]
    assert all(a < b for a, b in pairwise(ids)), ids


def check_blocking(sc: Scenario, r: Run) -> None:
    """Blocked data is held until a trigger, an abort or its channel's eop, then released."""
    if sc.mode in (Mode.UNALIGNED, Mode.AT_LEAST_ONCE):
        assert all(not blocked for blocked in r.blocked)
        return
    events = sc.parsed
    decisive = {
        at for at, calls in enumerate(r.calls) if any(c[0] in ("trigger", "abort") for c in calls)
    }
    for at, event in enumerate(events):
        newly = r.blocked[at] - (r.blocked[at - 1] if at else frozenset())
        if newly:  # only a barrier blocks, and only its own channel
            assert isinstance(event, Barrier)
            assert newly == {event.channel}
        released = (r.blocked[at - 1] if at else frozenset()) - r.blocked[at]
        if released:
            assert at in decisive or (
                isinstance(event, EndOfPartition) and released == {event.channel}
            )
    where = processed_at(r)
    for index, channel in data_channels(sc).items():
        was_blocked = index > 0 and channel in r.blocked[index - 1]
        at = where[index]
        if not was_blocked:
            assert at == index, f"data {index} on unblocked channel {channel} was held"
            continue
        assert at > index, f"data {index} on blocked channel {channel} was processed at once"
        assert all(channel in r.blocked[k] for k in range(index, at))
        assert at in decisive or events[at] == EndOfPartition(channel)
    for cid, (k, mode) in triggered_at(r).items():  # R3: aligning channels stay blocked
        if mode is not Mode.ALIGNED:
            continue
        for channel in range(sc.channels):
            arrivals = [j for j, e in enumerate(events[:k]) if e == Barrier(cid, channel)]
            closed = [j for j, e in enumerate(events) if e == EndOfPartition(channel)]
            until = min([k, *closed])
            if arrivals:
                assert all(channel in r.blocked[t] for t in range(arrivals[0], until))
    for at, calls in enumerate(r.calls):  # R4: released together -> in arrival order
        released_items = [item for item in r.processed_in(calls) if item != at]
        assert released_items == sorted(released_items)


def marker_id(event: Event) -> int | None:
    return event.checkpoint_id if isinstance(event, (Barrier, Cancel)) else None


def check_triggers(sc: Scenario, r: Run) -> None:
    """Safety and liveness of triggers, from the event list alone.

    Safety: an aligned or at-least-once trigger of n happens only once every channel
    has delivered bn or closed; with a timeout, n switches at the first event where the
    clock reached first barrier + T and is aligned only if it completed before that.
    Liveness: if n completes with no marker of a newer id and no cancel of n before, it
    triggers exactly then (aligned, at least once), at its first barrier (unaligned), or
    with a timeout at whichever of completion and switch comes first (completion wins a tie).
    """
    events = sc.parsed
    triggers = triggered_at(r)
    clock = list(accumulate(e.ms if isinstance(e, TimeAdvance) else 0 for e in events))
    ids = sorted({cid for e in events if (cid := marker_id(e)) is not None})
    for cid in ids:
        done: set[int] = set()
        complete_at = first_at = None
        for at, event in enumerate(events):
            if isinstance(event, Barrier) and event.checkpoint_id == cid:
                done.add(event.channel)
                first_at = at if first_at is None else first_at
            elif isinstance(event, EndOfPartition):
                done.add(event.channel)
            if first_at is not None and len(done) == sc.channels:
                complete_at = at
                break
        if cid in triggers and triggers[cid][1] is not Mode.UNALIGNED:
            assert complete_at is not None and triggers[cid][0] >= complete_at
        if cid in triggers and sc.mode is Mode.ALIGNED_WITH_TIMEOUT:
            assert sc.timeout is not None and first_at is not None
            at, mode = triggers[cid]
            elapsed = clock[at] - clock[first_at]
            if mode is Mode.ALIGNED:  # completed before any timeout check fired
                assert at == first_at or clock[at - 1] - clock[first_at] < sc.timeout
            else:  # switched at the first event where the timeout was reached
                assert elapsed >= sc.timeout
                assert at == first_at or clock[at - 1] - clock[first_at] < sc.timeout
        if first_at is None:
            assert cid not in triggers
            continue
        end = first_at if sc.mode is Mode.UNALIGNED else complete_at
        if end is None:
            continue
        undisturbed = all(
            (mid := marker_id(e)) is None or mid < cid or (mid == cid and isinstance(e, Barrier))
            for e in events[: end + 1]
        )
        if not undisturbed:
            continue
        assert cid in triggers, f"checkpoint {cid} should have triggered by event {end}"
        expected = (end, Mode.AT_LEAST_ONCE)
        if sc.mode is Mode.ALIGNED:
            expected = (end, Mode.ALIGNED)
        elif sc.mode is Mode.UNALIGNED:
            expected = (end, Mode.UNALIGNED)
        elif sc.mode is Mode.ALIGNED_WITH_TIMEOUT:
            assert sc.timeout is not None
            expected = (end, Mode.ALIGNED)
            for at in range(first_at, end):  # completion at `end` wins over the switch
                if clock[at] - clock[first_at] >= sc.timeout:
                    expected = (at, Mode.UNALIGNED)
                    break
        assert triggers[cid] == expected


def check_channel_state(sc: Scenario, r: Run) -> None:
    """State of n: data on a channel after n triggered and before that channel's bn."""
    aborted = {cid for cid, _ in r.controller.aborted}
    state = {cid: items for cid, items in r.controller.channel_state.items() if items}
    if sc.mode in (Mode.ALIGNED, Mode.AT_LEAST_ONCE):
        assert state == {}
        return
    events = sc.parsed
    expected: dict[int, list[int]] = {}
    for cid, (trigger_index, mode) in triggered_at(r).items():
        if mode is not Mode.UNALIGNED or cid in aborted:
            continue
        items = [
            i
            for i, e in enumerate(events)
            if isinstance(e, Data)
            and i > trigger_index
            and not any(
                isinstance(b, Barrier) and b.checkpoint_id == cid and b.channel == e.channel
                for b in events[:i]
            )
        ]
        if items:
            expected[cid] = items
    assert state == expected


def check_modes(sc: Scenario, r: Run) -> None:
    modes = {mode for _, mode in r.controller.triggered}
    allowed = {
        Mode.ALIGNED: {Mode.ALIGNED},
        Mode.UNALIGNED: {Mode.UNALIGNED},
        Mode.ALIGNED_WITH_TIMEOUT: {Mode.ALIGNED, Mode.UNALIGNED},
        Mode.AT_LEAST_ONCE: {Mode.AT_LEAST_ONCE},
    }[sc.mode]
    assert modes <= allowed


def check_matches_conformance_adapter(sc: Scenario, r: Run) -> None:
    result = run_scenario(
        {
            "channels": sc.channels,
            "mode": sc.mode.value,
            "alignment_timeout_ms": sc.timeout,
            "events": sc.events,
        }
    )
    assert result["blocked"] == [sorted(b) for b in r.blocked]
    assert result["processed"] == [item for _, item in r.controller.processed]
    assert result["triggered"] == [[cid, m.value] for cid, m in r.controller.triggered]


@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.value)
@SETTINGS
@given(data=st.data())
def test_handler_invariants(mode: Mode, data: st.DataObject) -> None:
    sc = data.draw(scenarios(mode))
    r = run(sc)
    check_every_item_processed_once_in_channel_order(sc, r)
    check_triggered_ids_increase(r)
    check_blocking(sc, r)
    check_triggers(sc, r)
    check_channel_state(sc, r)
    check_modes(sc, r)
    check_matches_conformance_adapter(sc, r)


@SETTINGS
@given(data=st.data())
def test_exactly_once_never_triggers_and_aborts_alike(data: st.DataObject) -> None:
    """Aligned checkpoints are never aborted; an aborted id is never triggered later."""
    mode = data.draw(st.sampled_from([Mode.ALIGNED, Mode.UNALIGNED, Mode.ALIGNED_WITH_TIMEOUT]))
    sc = data.draw(scenarios(mode))
    r = run(sc)
    order = [
        (call[0], call[1]) for calls in r.calls for call in calls if call[0] in ("trigger", "abort")
    ]
    for position, (kind, cid) in enumerate(order):
        if kind == "abort":
            assert ("trigger", cid) not in order[position:]
            assert order.count(("abort", cid)) == 1
    for cid, mode_ in r.controller.triggered:
        if mode_ is Mode.ALIGNED:
            assert ("abort", cid) not in order
