"""The aligned-vs-unaligned mode policy: one test per branch, reasons asserted (no Spark)."""

from __future__ import annotations

import math

import pytest

from barriered.coordinator import (
    ChannelSignals,
    CoordinatorSettings,
    Mode,
    decide_mode,
    predict,
)
from barriered.errors import CheckpointError

UNALIGNED_2S = CoordinatorSettings(unaligned_enabled=True, aligned_timeout_ms=2_000)


def test_the_coordinator_decides_the_barrier_handlers_modes() -> None:
    from barriered import barrier

    assert Mode is barrier.Mode  # one type: the policy's decisions are handler modes
    assert isinstance(decide_mode(UNALIGNED_2S, None).mode, barrier.Mode)


def test_at_least_once_when_not_exactly_once() -> None:
    settings = CoordinatorSettings(exactly_once=False, unaligned_enabled=True)
    d = decide_mode(settings, None)
    assert d.mode == "at_least_once"
    assert "spark.sql.streaming.barriered.mode=atLeastOnce" in d.reason


def test_savepoint_is_always_aligned() -> None:
    for settings in (
        UNALIGNED_2S,
        CoordinatorSettings(exactly_once=False),
        CoordinatorSettings(unaligned_enabled=True, aligned_timeout_ms=0),
    ):
        d = decide_mode(settings, ChannelSignals({0: 10**9}, {0: 0.0}), kind="savepoint")
        assert d.mode == "aligned"
        assert d.reason == "savepoints are always aligned (no in-flight data)"


def test_aligned_when_unaligned_disabled() -> None:
    d = decide_mode(CoordinatorSettings(), ChannelSignals({0: 10**9}, {0: 0.0}))
    assert d.mode == "aligned"
    assert "spark.sql.streaming.barriered.unaligned.enabled=false" in d.reason


def test_unaligned_straight_away_with_zero_timeout() -> None:
    d = decide_mode(CoordinatorSettings(unaligned_enabled=True, aligned_timeout_ms=0), None)
    assert d.mode == "unaligned"
    assert "alignedCheckpointTimeout=0" in d.reason


def test_unaligned_when_slowest_channel_predicts_timeout() -> None:
    signals = ChannelSignals({0: 0, 1: 600, 2: 100}, {0: 1000.0, 1: 100.0, 2: 1000.0})
    d = decide_mode(UNALIGNED_2S, signals)
    assert d.mode == "unaligned"
    assert d.prediction is not None
    assert d.prediction.slowest_channel == 1
    assert d.prediction.alignment_ms == 6000.0
    assert d.reason == (
        "predicted alignment 6000 ms reaches alignedCheckpointTimeout=2000 ms: slowest "
        "channel 1 has 600 rows of backlog at 100 rows/s, its barrier arrives after 6000 ms, "
        "the first after 0 ms; barriers overtake the backlog at once (unaligned)"
    )


def test_prediction_equal_to_timeout_is_unaligned() -> None:
    d = decide_mode(UNALIGNED_2S, ChannelSignals({0: 0, 1: 200}, {0: 10.0, 1: 100.0}))
    assert d.prediction is not None and d.prediction.alignment_ms == 2000.0
    assert d.mode == "unaligned"


def test_stalled_channel_predicts_unbounded_alignment() -> None:
    d = decide_mode(UNALIGNED_2S, ChannelSignals({0: 0, 3: 50}, {0: 100.0}))
    assert d.mode == "unaligned"
    assert d.prediction is not None and math.isinf(d.prediction.alignment_ms)
    assert "predicted alignment unbounded" in d.reason
    assert "slowest channel 3 has 50 rows of backlog and delivers nothing" in d.reason


def test_blocked_channel_without_rate_is_no_evidence() -> None:
    signals = ChannelSignals({0: 10, 1: 500}, {0: 1000.0, 1: 0.0}, blocked=frozenset({1}))
    d = decide_mode(UNALIGNED_2S, signals)
    assert d.mode == "aligned_with_timeout"
    assert d.prediction is not None and d.prediction.slowest_channel == 0


def test_equal_backlogs_align_quickly() -> None:
    # Every barrier arrives after 5 s, so the alignment itself (first -> last) is short.
    d = decide_mode(UNALIGNED_2S, ChannelSignals({0: 5000, 1: 5000}, {0: 1000.0, 1: 1000.0}))
    assert d.mode == "aligned_with_timeout"
    assert d.prediction is not None and d.prediction.alignment_ms == 0.0
    assert d.reason.startswith("predicted alignment 0 ms (slowest channel 0 has 5000 rows")
    assert d.reason.endswith(
        "below alignedCheckpointTimeout=2000 ms: aligning, switching to unaligned if the "
        "alignment reaches the timeout"
    )


def test_prediction_rounds_up_to_micro_batches() -> None:
    signals = ChannelSignals({0: 0, 1: 1500}, {0: 1000.0, 1: 1000.0}, batch_duration_ms=1000)
    p = predict(signals)
    assert p is not None
    assert (p.first_barrier_ms, p.slowest_ms, p.alignment_ms) == (1000.0, 2000.0, 1000.0)


def test_backlog_is_capped_at_the_read_ahead_buffer() -> None:
    settings = CoordinatorSettings(
        unaligned_enabled=True, aligned_timeout_ms=2_000, buffer_per_channel_rows=1_000
    )
    d = decide_mode(settings, ChannelSignals({0: 0, 1: 10**9}, {0: 1.0, 1: 1000.0}))
    assert d.mode == "aligned_with_timeout"
    assert "channel 1 has 1000 rows of backlog at 1000 rows/s" in d.reason


def test_unaligned_when_recent_alignments_time_out() -> None:
    signals = ChannelSignals({0: 0, 1: 100}, {0: 1000.0, 1: 1000.0})
    d = decide_mode(UNALIGNED_2S, signals, [2500, 100, 2600])
    assert d.mode == "unaligned"
    assert d.recent_p50_ms == 2500.0
    assert d.reason == (
        "median of the last 3 alignments is 2500 ms, reaching alignedCheckpointTimeout=2000 ms "
        "(backlog predicts 100 ms): alignments keep timing out, barriers overtake the backlog "
        "at once (unaligned)"
    )


def test_too_few_recent_alignments_are_ignored() -> None:
    d = decide_mode(UNALIGNED_2S, None, [5000, 5000])
    assert d.mode == "aligned_with_timeout"
    assert d.recent_p50_ms is None


def test_aligned_with_timeout_without_signals() -> None:
    d = decide_mode(UNALIGNED_2S, None, [100, 300, 200])
    assert d.mode == "aligned_with_timeout"
    assert d.reason == (
        "no channel signals yet, median of the last 3 alignments 200 ms; below "
        "alignedCheckpointTimeout=2000 ms: aligning, switching to unaligned if the alignment "
        "reaches the timeout"
    )


def test_signals_from_a_batch() -> None:
    s = ChannelSignals.from_batch({0: 10}, {0: 50, 1: 0}, batch_duration_ms=500)
    assert s.throughput_rows_per_s == {0: 100.0, 1: 0.0}
    assert s.batch_duration_ms == 500


@pytest.mark.parametrize(
    "make",
    [
        lambda: ChannelSignals({0: -1}, {}),
        lambda: ChannelSignals({}, {0: -1.0}),
        lambda: ChannelSignals({}, {}, batch_duration_ms=-1),
        lambda: ChannelSignals.from_batch({}, {}, batch_duration_ms=0),
    ],
)
def test_invalid_signals_are_rejected(make: object) -> None:
    with pytest.raises(CheckpointError, match="ChannelSignals"):
        make()  # type: ignore[operator]
