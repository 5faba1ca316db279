"""Coordinator settings validation, clocks and the ``_checkpoints`` row format (no Spark)."""

from __future__ import annotations

import json
import time

import pytest

from barriered.config import BarrieredConf, resolve
from barriered.config.conf import field_value
from barriered.coordinator import (
    STATS_COLUMNS,
    CheckpointStats,
    CoordinatorSettings,
    ManualClock,
    SystemClock,
)
from barriered.coordinator.settings import FIELD_KEYS, SETTING_KEYS, settings_from_conf
from barriered.errors import CheckpointError, ConfigError


def test_defaults_are_valid() -> None:
    s = CoordinatorSettings()
    assert s.checkpoint_interval_ms == 10_000
    assert s.max_concurrent == 1
    assert s.tolerable_failures == 3
    assert s.exactly_once is True


def test_defaults_are_the_declared_ones() -> None:
    settings = CoordinatorSettings()
    for name, config_key in FIELD_KEYS.items():
        declared = field_value(config_key, config_key.default_value)
        assert getattr(settings, name) == declared, name
    assert settings == settings_from_conf(BarrieredConf()) == settings_from_conf(resolve({}))
    assert {name: k.key for name, k in FIELD_KEYS.items()} == SETTING_KEYS


def test_a_conf_reaches_every_field() -> None:
    given = {
        "checkpoint_interval_ms": "3s",
        "checkpoint_timeout_ms": "4s",
        "min_pause_ms": "1s",
        "max_concurrent": "2",
        "tolerable_failures": "5",
        "adaptive": "false",
        "buffer_per_channel_rows": "7",
    }
    conf = resolve({FIELD_KEYS[name].key: value for name, value in given.items()})
    settings = settings_from_conf(conf)
    assert (
        settings.checkpoint_interval_ms,
        settings.checkpoint_timeout_ms,
        settings.min_pause_ms,
        settings.max_concurrent,
        settings.tolerable_failures,
        settings.adaptive,
        settings.buffer_per_channel_rows,
    ) == (3000, 4000, 1000, 2, 5, False, 7)


@pytest.mark.parametrize("name", [n for n, k in FIELD_KEYS.items() if k.min_value is not None])
def test_bounds_are_the_declared_ones(name: str) -> None:
    config_key = FIELD_KEYS[name]
    assert config_key.min_value is not None
    CoordinatorSettings(**{name: config_key.min_value})  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        CoordinatorSettings(**{name: config_key.min_value - 1})  # type: ignore[arg-type]
    assert config_key.range_text().removeprefix(",") in str(info.value)
    assert config_key.key in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("checkpoint_interval_ms", 9, "checkpoint_interval_ms (spark.sql.streaming.barriered"
         ".checkpointInterval) must be at least 10ms, got 9 ms"),
        ("checkpoint_timeout_ms", -1, "checkpoint_timeout_ms (spark.sql.streaming.barriered"
         ".checkpointTimeout) must be at least 10ms, got -1 ms"),
        ("min_pause_ms", -5, "min_pause_ms (spark.sql.streaming.barriered"
         ".minPauseBetweenCheckpoints) must be at least 0s, got -5 ms"),
        ("max_concurrent", 0, "max_concurrent (spark.sql.streaming.barriered"
         ".maxConcurrentCheckpoints) must be at least 1, got 0"),
        ("tolerable_failures", -1, "tolerable_failures (spark.sql.streaming.barriered"
         ".tolerableCheckpointFailures) must be at least 0, got -1"),
        ("aligned_timeout_ms", -1, "aligned_timeout_ms (spark.sql.streaming.barriered"
         ".alignedCheckpointTimeout) must be at least 0s, got -1 ms"),
        ("buffer_per_channel_rows", 0, "buffer_per_channel_rows"),
        ("alignment_history_size", 0, "alignment_history_size must be > 0"),
        ("alignment_min_samples", 0, "alignment_min_samples must be > 0"),
        ("stats_history_size", 0, "stats_history_size must be > 0"),
    ],
)  # fmt: skip
def test_out_of_range_field_is_named(field: str, value: int, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        CoordinatorSettings(**{field: value})  # type: ignore[arg-type]
    assert f"CoordinatorSettings.{field}" in str(info.value)
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("checkpoint_interval_ms", 1.5),
        ("checkpoint_interval_ms", True),
        ("max_concurrent", "2"),
        ("exactly_once", 1),
        ("unaligned_enabled", "true"),
    ],
)
def test_wrong_type_is_named(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"CoordinatorSettings\.{field}.* must be an? "):
        CoordinatorSettings(**{field: value})  # type: ignore[arg-type]


def test_min_samples_cannot_exceed_history() -> None:
    with pytest.raises(ConfigError, match=r"alignment_min_samples must be <= .*\(2\), got 3"):
        CoordinatorSettings(alignment_history_size=2, alignment_min_samples=3)


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        CoordinatorSettings(max_concurrent=0)


def test_manual_clock_moves_only_forward() -> None:
    clock = ManualClock(100)
    assert clock.now_ms() == 100
    assert clock.advance(50) == 150
    clock.set(200)
    assert clock.now_ms() == 200
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        clock.set(199)


def test_system_clock_is_epoch_ms_and_monotonic() -> None:
    clock = SystemClock()
    first = clock.now_ms()
    assert abs(first - time.time() * 1000) < 5_000
    assert clock.now_ms() >= first


def _stats() -> CheckpointStats:
    return CheckpointStats(
        checkpoint_id=7,
        kind="checkpoint",
        mode="aligned_with_timeout",
        mode_reason="because",
        status="completed",
        trigger_timestamp_ms=1_000,
        end_timestamp_ms=2_500,
        start_delay_ms=10,
        alignment_duration_ms=300,
        end_to_end_duration_ms=1_500,
        state_bytes=123,
        state_rows=4,
        inflight_rows=5,
        inflight_bytes=60,
        num_acknowledged=3,
        num_expected=3,
        trigger_batch_id=11,
        cut_batch_id=13,
        barrier_positions={10: 5, 2: 9},
        effective_mode="unaligned",
        state_table_version=42,
    )


def test_to_row_is_flat_json_with_declared_columns() -> None:
    row = _stats().to_row()
    assert list(row) == list(STATS_COLUMNS)
    assert all(v is None or isinstance(v, (int, str)) for v in row.values())
    assert row["barrier_positions"] == '{"2": 9, "10": 5}'
    json.dumps(row)


def test_from_row_round_trips_and_tolerates_table_nulls() -> None:
    stats = _stats()
    assert CheckpointStats.from_row(stats.to_row()) == stats
    row = stats.to_row() | {"failure_reason": float("nan"), "cut_batch_id": float("nan")}
    row["barrier_positions"] = {"2": 9, "10": 5}
    back = CheckpointStats.from_row(row)
    assert back.failure_reason is None
    assert back.cut_batch_id is None
    assert back.barrier_positions == {2: 9, 10: 5}


def test_from_row_rejects_malformed_rows() -> None:
    with pytest.raises(CheckpointError, match="malformed _checkpoints row"):
        CheckpointStats.from_row({"checkpoint_id": "x"})


def test_coordinator_imports_no_spark() -> None:
    import subprocess
    import sys

    code = "import sys, barriered.coordinator; assert 'pyspark' not in sys.modules, 'pyspark'"
    subprocess.run([sys.executable, "-c", code], check=True)
