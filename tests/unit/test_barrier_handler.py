"""Focused unit tests of the barrier handler, rule by rule (R1-R10 of the conformance spec)."""

from __future__ import annotations

import logging

import pytest

from barriered.barrier import (
    AbortReason,
    Barrier,
    BarrierHandler,
    Cancel,
    Data,
    EndOfPartition,
    ManualClock,
    Mode,
    Phase,
    TimeAdvance,
    format_event,
    parse_event,
)
from barriered.errors import BarrierProtocolError, ConfigError
from barriered.testing.recording import RecordingController

ALIGNED = Mode.ALIGNED
UNALIGNED = Mode.UNALIGNED
AT_LEAST_ONCE = Mode.AT_LEAST_ONCE
SUBSUMED = AbortReason.SUBSUMED
CANCELLED = AbortReason.CANCELLED


class Rig:
    """A handler wired to a recording controller and a manual clock."""

    def __init__(self, channels: int, mode: Mode, timeout: int | None = None) -> None:
        self.clock = ManualClock()
        self.ctl: RecordingController[str] = RecordingController()
        self.h = BarrierHandler(channels, mode, self.ctl, self.clock, timeout)

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        self.h.on_time_advanced()

    @property
    def processed(self) -> list[str]:
        return [item for _, item in self.ctl.processed]

    @property
    def blocked(self) -> list[int]:
        return sorted(self.h.blocked_channels())


# -- construction, modes, notation ----------------------------------------------------------


def test_mode_values_are_the_spec_strings() -> None:
    assert [m.value for m in Mode] == [
        "aligned",
        "unaligned",
        "aligned_with_timeout",
        "at_least_once",
    ]
    assert Mode("aligned_with_timeout") is Mode.ALIGNED_WITH_TIMEOUT
    assert isinstance(Mode.ALIGNED, str)
    assert not Mode.AT_LEAST_ONCE.exactly_once
    assert Mode.UNALIGNED.exactly_once


@pytest.mark.parametrize(
    ("channels", "mode", "timeout", "match"),
    [
        (0, "aligned", None, "at least one channel"),
        (2, "exactly_twice", None, "unknown barrier mode"),
        (2, "aligned_with_timeout", None, "alignment_timeout_ms >= 0"),
        (2, "aligned_with_timeout", -1, "alignment_timeout_ms >= 0"),
    ],
)
def test_invalid_configuration_raises_config_error(
    channels: int, mode: str, timeout: int | None, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        BarrierHandler(channels, mode, RecordingController[str](), ManualClock(), timeout)


def test_timeout_applies_to_aligned_with_timeout_checkpoints_only() -> None:
    rig = Rig(2, Mode.ALIGNED, timeout=5)
    assert rig.h.alignment_timeout_ms == 5
    rig.h.on_barrier(0, 1)
    assert rig.h.alignment_deadline_ms() is None
    rig.advance(100)
    assert rig.ctl.triggered == []
    assert rig.blocked == [0]
    rig.h.on_barrier(1, 2, Mode.ALIGNED_WITH_TIMEOUT)  # subsumes 1, aligns with the timeout
    assert rig.h.alignment_deadline_ms() == 105
    rig.advance(5)
    assert rig.ctl.triggered == [(2, UNALIGNED)]
    assert rig.ctl.aborted == [(1, SUBSUMED)]


def test_a_barrier_of_aligned_with_timeout_needs_the_handlers_timeout() -> None:
    rig = Rig(2, Mode.ALIGNED)
    with pytest.raises(ConfigError, match="no alignment_timeout_ms"):
        rig.h.on_barrier(0, 1, "aligned_with_timeout")
    with pytest.raises(ConfigError, match="unknown barrier mode"):
        rig.h.on_barrier(0, 1, "sideways")
    assert rig.h.max_checkpoint_id() is None


# -- one long-lived handler: checkpoints of several modes, a restarted handler -----------------


def test_each_checkpoint_starts_in_the_mode_its_barrier_carries() -> None:
    """As a Flink barrier carries its CheckpointOptions: aligned, then unaligned, then
    at-least-once, then aligned again, through one handler."""
    rig = Rig(2, Mode.ALIGNED)
    rig.h.on_barrier(0, 1)  # the handler's mode: aligned
    rig.h.on_data(0, "held")
    rig.h.on_barrier(1, 1)
    rig.h.on_barrier(0, 2, UNALIGNED)
    rig.h.on_data(1, "in flight")
    rig.h.on_barrier(1, 2, UNALIGNED)
    rig.h.on_barrier(1, 3, AT_LEAST_ONCE)
    rig.h.on_data(0, "not blocked")
    assert rig.blocked == []
    rig.h.on_barrier(0, 3, AT_LEAST_ONCE)
    assert rig.ctl.triggered == [(1, ALIGNED), (2, UNALIGNED), (3, AT_LEAST_ONCE)]
    assert rig.ctl.aborted == []
    assert rig.processed == ["held", "in flight", "not blocked"]
    assert rig.ctl.channel_state == {2: ["in flight"]}


def test_a_newer_exactly_once_barrier_subsumes_pending_at_least_once_checkpoints() -> None:
    rig = Rig(3, AT_LEAST_ONCE)
    rig.h.on_barrier(0, 1)
    rig.h.on_barrier(1, 2)
    rig.h.on_barrier(2, 3, ALIGNED)  # a savepoint: aligned whatever the handler's mode
    assert rig.ctl.aborted == [(1, SUBSUMED), (2, SUBSUMED)]
    assert rig.blocked == [2]
    view = rig.h.current_checkpoint()
    assert view is not None and (view.checkpoint_id, view.phase) == (3, Phase.ALIGNING)
    rig.h.on_barrier(0, 2)  # stale (R1)
    assert rig.blocked == [2]
    rig.h.on_barrier(0, 3)
    rig.h.on_barrier(1, 3)
    assert rig.ctl.triggered == [(3, ALIGNED)]


def test_an_at_least_once_barrier_subsumes_the_current_exactly_once_checkpoint() -> None:
    rig = Rig(2, ALIGNED)
    rig.h.on_barrier(0, 1)
    rig.h.on_data(0, "held")
    rig.h.on_barrier(1, 2, AT_LEAST_ONCE)
    assert rig.ctl.aborted == [(1, SUBSUMED)]
    assert rig.blocked == [] and rig.processed == ["held"]
    assert [v.phase for v in rig.h.pending_checkpoints()] == [Phase.PENDING]


@pytest.mark.parametrize("mode", list(Mode))
def test_a_rebuilt_handler_finds_the_ids_of_its_predecessor_stale(mode: Mode) -> None:
    rig = Rig(2, mode, timeout=0)
    rig.h = BarrierHandler(2, mode, rig.ctl, rig.clock, 0, last_checkpoint_id=4)
    assert rig.h.max_checkpoint_id() == 4
    rig.h.on_barrier(0, 4)
    rig.h.on_cancel(1, 3)
    rig.h.on_barrier(1, 2)
    assert rig.ctl.calls == [] and rig.blocked == []
    assert rig.h.pending_checkpoints() == ()
    rig.h.on_barrier(0, 5)
    assert rig.h.max_checkpoint_id() == 5
    assert [v.checkpoint_id for v in rig.h.pending_checkpoints()] == [5]


def test_string_mode_is_accepted() -> None:
    handler = BarrierHandler(1, "unaligned", RecordingController[str](), ManualClock())
    assert handler.mode is Mode.UNALIGNED
    assert handler.channels == 1


@pytest.mark.parametrize(
    ("text", "event"),
    [
        ("d@3", Data(3)),
        ("b12@0", Barrier(12, 0)),
        ("x4@1", Cancel(4, 1)),
        ("eop@7", EndOfPartition(7)),
        ("t+150", TimeAdvance(150)),
    ],
)
def test_parse_and_format_event(text: str, event: object) -> None:
    assert parse_event(text) == event
    assert format_event(parse_event(text)) == text


@pytest.mark.parametrize("text", ["", "d", "b@1", "bx@1", "y1@0", "t-5", "eop@", "d@-1", "b1@0x"])
def test_malformed_event_raises(text: str) -> None:
    with pytest.raises(BarrierProtocolError, match="malformed event"):
        parse_event(text)


def test_manual_clock_never_goes_back() -> None:
    clock = ManualClock(5)
    assert clock.advance(3) == 8
    with pytest.raises(ValueError):
        clock.advance(-1)


# -- R1 stale markers ---------------------------------------------------------------------


def test_r1_stale_barrier_blocks_nothing() -> None:
    rig = Rig(2, Mode.ALIGNED)
    rig.h.on_barrier(0, 2)
    rig.h.on_barrier(1, 1)  # older than the current 2: stale
    assert rig.blocked == [0]
    rig.h.on_barrier(1, 2)
    assert rig.ctl.triggered == [(2, ALIGNED)]
    rig.h.on_barrier(0, 1)  # late marker of an id that never started
    rig.h.on_barrier(0, 2)  # late marker of a finished id
    rig.h.on_cancel(1, 2)
    assert rig.blocked == []
    assert rig.ctl.aborted == []
    assert rig.h.current_checkpoint() is None


def test_r1_stale_cancel_is_ignored_while_aligning() -> None:
    rig = Rig(2, Mode.ALIGNED)
    rig.h.on_barrier(0, 3)
    rig.h.on_cancel(1, 2)
    assert rig.ctl.aborted == []
    assert rig.blocked == [0]
    view = rig.h.current_checkpoint()
    assert view is not None
    assert (view.checkpoint_id, view.phase) == (3, Phase.ALIGNING)


# -- R2 new alignment / subsumption --------------------------------------------------------


def test_r2_newer_barrier_subsumes_alignment_and_releases_held_data() -> None:
    rig = Rig(3, Mode.ALIGNED)
    rig.h.on_barrier(0, 1)
    rig.h.on_data(0, "a")
    rig.h.on_barrier(1, 1)
    rig.h.on_data(1, "b")
    assert rig.h.held_items() == 2
    rig.h.on_barrier(2, 2)
    assert rig.ctl.aborted == [(1, SUBSUMED)]
    assert rig.blocked == [2]
    assert rig.h.held_items() == 0
    # abort first, then the held items in arrival order
    assert rig.ctl.calls[-3:] == [
        ("abort", 1, SUBSUMED),
        ("process", 0, "a"),
        ("process", 1, "b"),
    ]
    assert rig.h.max_checkpoint_id() == 2


# -- R3 completing an alignment ------------------------------------------------------------


def test_r3_alignment_triggers_before_releasing_held_data() -> None:
    rig = Rig(2, Mode.ALIGNED)
    rig.h.on_barrier(1, 7)
    rig.h.on_data(1, "late")
    rig.h.on_data(0, "early")
    assert rig.processed == ["early"]
    rig.h.on_barrier(0, 7)
    assert rig.ctl.calls[-2:] == [("trigger", 7, ALIGNED), ("process", 1, "late")]
    assert rig.blocked == []
    assert rig.h.current_checkpoint() is None


def test_r3_single_open_channel_triggers_at_first_barrier() -> None:
    rig = Rig(1, Mode.ALIGNED)
    rig.h.on_barrier(0, 1)
    assert rig.ctl.triggered == [(1, ALIGNED)]
    assert rig.blocked == []


# -- R4 blocked channels -------------------------------------------------------------------


def test_r4_channels_unblocking_together_release_in_arrival_order() -> None:
    rig = Rig(3, Mode.ALIGNED)
    rig.h.on_barrier(0, 1)
    rig.h.on_barrier(1, 1)
    for channel, item in [(1, "p"), (0, "q"), (2, "free"), (1, "r"), (0, "s")]:
        rig.h.on_data(channel, item)
    assert rig.processed == ["free"]
    assert rig.h.held_items() == 4
    rig.h.on_barrier(2, 1)
    assert rig.processed == ["free", "p", "q", "r", "s"]


# -- R5 cancel -----------------------------------------------------------------------------


def test_r5_cancel_of_current_aborts_and_unblocks() -> None:
    rig = Rig(2, Mode.ALIGNED)
    rig.h.on_barrier(0, 1)
    rig.h.on_data(0, "held")
    rig.h.on_cancel(1, 1)
    assert rig.ctl.aborted == [(1, CANCELLED)]
    assert rig.processed == ["held"]
    assert rig.blocked == []
    rig.h.on_barrier(1, 1)  # now stale
    assert rig.blocked == []


def test_r5_cancel_of_newer_id_subsumes_current_and_makes_id_stale() -> None:
    rig = Rig(2, Mode.ALIGNED)
    rig.h.on_barrier(0, 1)
    rig.h.on_data(0, "held")
    rig.h.on_cancel(1, 3)
    assert rig.ctl.aborted == [(1, SUBSUMED), (3, CANCELLED)]
    assert rig.processed == ["held"]
    rig.h.on_barrier(0, 3)
    rig.h.on_barrier(1, 2)
    assert rig.blocked == []
    assert rig.ctl.triggered == []
    assert rig.h.max_checkpoint_id() == 3


def test_r5_cancel_before_any_barrier_aborts_once() -> None:
    rig = Rig(2, Mode.UNALIGNED)
    rig.h.on_cancel(0, 4)
    rig.h.on_cancel(1, 4)
    rig.h.on_barrier(0, 4)
    assert rig.ctl.aborted == [(4, CANCELLED)]
    assert rig.ctl.triggered == []


def test_r5_cancel_in_unaligned_discards_recorded_state() -> None:
    rig = Rig(2, Mode.UNALIGNED)
    rig.h.on_barrier(0, 2)
    rig.h.on_data(1, "inflight")
    assert rig.ctl.channel_state == {2: ["inflight"]}
    rig.h.on_cancel(0, 2)  # cancel of the current id, even from a channel that had b2
    assert rig.ctl.triggered == [(2, UNALIGNED)]
    assert rig.ctl.aborted == [(2, CANCELLED)]
    assert rig.ctl.channel_state == {}
    rig.h.on_data(1, "after")
    assert rig.ctl.channel_state == {}


# -- R6 end of partition -------------------------------------------------------------------


def test_r6_end_of_partition_completes_alignment() -> None:
    rig = Rig(3, Mode.ALIGNED)
    rig.h.on_barrier(0, 2)
    rig.h.on_barrier(2, 2)
    rig.h.on_data(0, "held")
    rig.h.on_end_of_partition(1)
    assert rig.ctl.triggered == [(2, ALIGNED)]
    assert rig.ctl.aborted == []
    assert rig.processed == ["held"]
    assert rig.h.open_channels() == frozenset({0, 2})


def test_r6_closing_a_blocked_channel_releases_it_without_completing() -> None:
    rig = Rig(3, Mode.ALIGNED)
    rig.h.on_barrier(0, 1)
    rig.h.on_barrier(1, 1)
    rig.h.on_data(0, "a")
    rig.h.on_data(1, "b")
    rig.h.on_end_of_partition(0)
    assert rig.processed == ["a"]
    assert rig.blocked == [1]
    assert rig.ctl.triggered == []
    rig.h.on_barrier(2, 1)
    assert rig.ctl.triggered == [(1, ALIGNED)]
    assert rig.processed == ["a", "b"]


def test_r6_last_channel_closing_completes_vacuously() -> None:
    rig = Rig(2, Mode.ALIGNED)
    rig.h.on_barrier(0, 1)
    rig.h.on_end_of_partition(0)
    assert rig.ctl.triggered == []
    rig.h.on_end_of_partition(1)
    assert rig.ctl.triggered == [(1, ALIGNED)]
    assert rig.h.open_channels() == frozenset()


def test_r6_end_of_partition_ends_collection() -> None:
    rig = Rig(2, Mode.UNALIGNED)
    rig.h.on_barrier(0, 1)
    rig.h.on_data(1, "x")
    rig.h.on_end_of_partition(1)
    assert rig.h.current_checkpoint() is None
    rig.h.on_data(0, "y")
    assert rig.ctl.channel_state == {1: ["x"]}
    assert rig.ctl.aborted == []


# -- R7 / R8 unaligned ---------------------------------------------------------------------


def test_r7_unaligned_triggers_at_once_and_records_inflight_data() -> None:
    rig = Rig(3, Mode.UNALIGNED)
    rig.h.on_data(1, "before")
    rig.h.on_barrier(0, 1)
    assert rig.ctl.triggered == [(1, UNALIGNED)]
    rig.h.on_data(0, "after-barrier")
    rig.h.on_data(1, "inflight-1")
    rig.h.on_barrier(1, 1)
    rig.h.on_data(1, "after-b1@1")
    rig.h.on_data(2, "inflight-2")
    view = rig.h.current_checkpoint()
    assert view is not None
    assert view.phase is Phase.COLLECTING
    assert view.barriers_received == frozenset({0, 1})
    rig.h.on_barrier(2, 1)
    assert rig.h.current_checkpoint() is None
    assert rig.ctl.channel_state == {1: ["inflight-1", "inflight-2"]}
    assert rig.processed == [
        "before",
        "after-barrier",
        "inflight-1",
        "after-b1@1",
        "inflight-2",
    ]
    assert rig.blocked == []


def test_r8_unaligned_subsumption_discards_state() -> None:
    rig = Rig(2, Mode.UNALIGNED)
    rig.h.on_barrier(0, 1)
    rig.h.on_data(1, "a")
    rig.h.on_barrier(1, 2)
    rig.h.on_data(0, "b")
    assert rig.ctl.triggered == [(1, UNALIGNED), (2, UNALIGNED)]
    assert rig.ctl.aborted == [(1, SUBSUMED)]
    assert rig.ctl.channel_state == {2: ["b"]}
    rig.h.on_barrier(1, 1)  # stale
    assert rig.ctl.aborted == [(1, SUBSUMED)]


# -- R9 aligned with timeout ---------------------------------------------------------------


@pytest.mark.parametrize(("elapsed", "mode"), [(9, ALIGNED), (10, UNALIGNED), (11, UNALIGNED)])
def test_r9_switch_exactly_at_timeout(elapsed: int, mode: Mode) -> None:
    rig = Rig(2, Mode.ALIGNED_WITH_TIMEOUT, timeout=10)
    rig.h.on_barrier(0, 1)
    assert rig.h.alignment_deadline_ms() == 10
    rig.advance(elapsed)
    rig.h.on_barrier(1, 1)
    assert rig.ctl.triggered == [(1, mode)]


def test_r9_timeout_is_measured_from_the_first_barrier() -> None:
    rig = Rig(2, Mode.ALIGNED_WITH_TIMEOUT, timeout=10)
    rig.advance(100)
    rig.h.on_barrier(0, 1)
    rig.advance(9)
    assert rig.ctl.triggered == []
    assert rig.h.alignment_deadline_ms() == 110
    rig.advance(1)
    assert rig.ctl.triggered == [(1, UNALIGNED)]
    assert rig.h.alignment_deadline_ms() is None


def test_r9_switch_releases_held_data_without_recording_it() -> None:
    rig = Rig(2, Mode.ALIGNED_WITH_TIMEOUT, timeout=10)
    rig.h.on_barrier(0, 1)
    rig.h.on_data(0, "held")
    rig.advance(10)
    assert rig.ctl.calls[-2:] == [("trigger", 1, UNALIGNED), ("process", 0, "held")]
    assert rig.blocked == []
    rig.h.on_data(1, "inflight")
    rig.h.on_data(0, "after")
    rig.h.on_barrier(1, 1)
    rig.h.on_data(1, "done")
    assert rig.ctl.channel_state == {1: ["inflight"]}
    assert rig.h.current_checkpoint() is None


def test_r9_switch_is_checked_after_any_event() -> None:
    """The clock may move without a time event; the next event of any kind switches."""
    rig = Rig(2, Mode.ALIGNED_WITH_TIMEOUT, timeout=10)
    rig.h.on_barrier(0, 1)
    rig.clock.advance(50)
    rig.h.on_data(1, "x")  # processed first, then the switch: not channel state
    assert rig.ctl.triggered == [(1, UNALIGNED)]
    assert rig.ctl.channel_state == {}


def test_r9_zero_timeout_switches_right_after_first_barrier() -> None:
    rig = Rig(2, Mode.ALIGNED_WITH_TIMEOUT, timeout=0)
    rig.h.on_barrier(1, 1)
    assert rig.ctl.triggered == [(1, UNALIGNED)]
    assert rig.blocked == []
    rig.h.on_data(0, "inflight")
    assert rig.ctl.channel_state == {1: ["inflight"]}


def test_r9_zero_timeout_single_open_channel_stays_aligned() -> None:
    rig = Rig(2, Mode.ALIGNED_WITH_TIMEOUT, timeout=0)
    rig.h.on_end_of_partition(0)
    rig.h.on_barrier(1, 1)
    assert rig.ctl.triggered == [(1, ALIGNED)]


def test_r9_new_barrier_while_collecting_starts_aligned() -> None:
    rig = Rig(2, Mode.ALIGNED_WITH_TIMEOUT, timeout=10)
    rig.h.on_barrier(0, 1)
    rig.advance(10)
    rig.h.on_data(1, "state-of-1")
    rig.h.on_barrier(0, 2)
    assert rig.ctl.aborted == [(1, SUBSUMED)]
    assert rig.ctl.channel_state == {}
    assert rig.blocked == [0]
    view = rig.h.current_checkpoint()
    assert view is not None
    assert (view.checkpoint_id, view.phase, view.started_at_ms) == (2, Phase.ALIGNING, 10)


def test_r9_no_timeout_after_trigger_abort_or_close() -> None:
    rig = Rig(2, Mode.ALIGNED_WITH_TIMEOUT, timeout=5)
    rig.h.on_barrier(0, 1)
    rig.h.on_barrier(1, 1)
    rig.h.on_barrier(0, 2)
    rig.h.on_cancel(1, 2)
    rig.advance(50)
    assert rig.ctl.triggered == [(1, ALIGNED)]
    assert rig.ctl.aborted == [(2, CANCELLED)]


# -- R10 at least once ---------------------------------------------------------------------


def test_r10_tracker_never_blocks_and_keeps_older_pending() -> None:
    rig = Rig(2, Mode.AT_LEAST_ONCE)
    rig.h.on_barrier(0, 1)
    rig.h.on_data(0, "a")
    rig.h.on_barrier(0, 2)
    assert rig.blocked == []
    assert rig.processed == ["a"]
    assert [v.checkpoint_id for v in rig.h.pending_checkpoints()] == [1, 2]
    current = rig.h.current_checkpoint()
    assert current is not None
    assert (current.checkpoint_id, current.phase) == (2, Phase.PENDING)
    rig.h.on_barrier(1, 1)
    assert rig.ctl.triggered == [(1, AT_LEAST_ONCE)]
    rig.h.on_barrier(1, 2)
    assert rig.ctl.triggered == [(1, AT_LEAST_ONCE), (2, AT_LEAST_ONCE)]
    assert rig.ctl.aborted == []


def test_r10_trigger_drops_older_pending_silently() -> None:
    rig = Rig(2, Mode.AT_LEAST_ONCE)
    rig.h.on_barrier(0, 1)
    rig.h.on_barrier(0, 2)
    rig.h.on_barrier(1, 2)
    assert rig.ctl.triggered == [(2, AT_LEAST_ONCE)]
    assert rig.ctl.aborted == []
    assert rig.h.pending_checkpoints() == ()
    rig.h.on_barrier(1, 1)  # dropped id: stale
    assert rig.h.pending_checkpoints() == ()


def test_r10_cancel_drops_older_pending_silently() -> None:
    rig = Rig(3, Mode.AT_LEAST_ONCE)
    rig.h.on_barrier(0, 1)
    rig.h.on_barrier(0, 2)
    rig.h.on_barrier(0, 3)
    rig.h.on_cancel(1, 2)
    assert rig.ctl.aborted == [(2, CANCELLED)]
    assert [v.checkpoint_id for v in rig.h.pending_checkpoints()] == [3]
    rig.h.on_cancel(2, 1)  # dropped id: ignored
    rig.h.on_cancel(2, 5)  # new id: aborted, max id is 5
    assert rig.ctl.aborted == [(2, CANCELLED), (5, CANCELLED)]
    assert rig.h.max_checkpoint_id() == 5
    assert rig.h.pending_checkpoints() == ()


def test_r10_end_of_partition_completes_pending_in_ascending_order() -> None:
    rig = Rig(3, Mode.AT_LEAST_ONCE)
    for cid in (1, 2, 3):
        rig.h.on_barrier(0, cid)
    rig.h.on_barrier(1, 1)
    rig.h.on_barrier(1, 2)
    rig.h.on_end_of_partition(2)
    assert rig.ctl.triggered == [(1, AT_LEAST_ONCE), (2, AT_LEAST_ONCE)]
    assert [v.checkpoint_id for v in rig.h.pending_checkpoints()] == [3]
    rig.h.on_end_of_partition(1)
    assert rig.ctl.triggered[-1] == (3, AT_LEAST_ONCE)


# -- protocol errors and views -------------------------------------------------------------


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("event", ["data", "barrier", "cancel", "eop"])
def test_event_on_closed_channel_raises(mode: Mode, event: str) -> None:
    rig = Rig(2, mode, timeout=10 if mode is Mode.ALIGNED_WITH_TIMEOUT else None)
    rig.h.on_barrier(1, 1)
    rig.h.on_end_of_partition(0)
    calls = list(rig.ctl.calls)
    with pytest.raises(BarrierProtocolError, match="channel 0 after its end of partition"):
        if event == "data":
            rig.h.on_data(0, "x")
        elif event == "barrier":
            rig.h.on_barrier(0, 2)
        elif event == "cancel":
            rig.h.on_cancel(0, 2)
        else:
            rig.h.on_end_of_partition(0)
    assert rig.ctl.calls == calls
    assert rig.h.open_channels() == frozenset({1})


@pytest.mark.parametrize("channel", [-1, 2])
def test_event_on_unknown_channel_raises(channel: int) -> None:
    rig = Rig(2, Mode.ALIGNED)
    with pytest.raises(BarrierProtocolError, match=r"channels 0\.\.1"):
        rig.h.on_data(channel, "x")


def test_debug_log_names_the_checkpoint(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="barriered.barrier")
    rig = Rig(2, Mode.ALIGNED)
    rig.h.on_barrier(0, 42)
    rig.h.on_barrier(1, 42)
    messages = [r.getMessage() for r in caplog.records]
    assert "checkpoint 42: triggered aligned" in messages
