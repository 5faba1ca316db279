"""Configuration keys: parsing, validation, overrides, restore compatibility."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from barriered import config
from barriered.config import (
    KEYS,
    PREFIX,
    BarrieredConf,
    check_restore_compatible,
    resolve,
    split_options,
)
from barriered.durations import format_duration, parse_duration_ms
from barriered.errors import BarrieredError, ConfigError

P = PREFIX


# ---- declarations ----------------------------------------------------------------------


def test_every_key_is_declared_once_and_maps_to_a_field() -> None:
    names = [k.name for k in KEYS]
    assert len(names) == len(set(names))
    fields = [f.name for f in dataclasses.fields(BarrieredConf)]
    assert sorted(k.field for k in KEYS) == sorted(fields)
    for k in KEYS:
        assert k.key == P + k.name
        assert k.doc.strip() and k.doc.rstrip().endswith(".")
        if k.type == "enum":
            assert k.choices


def test_required_keys_exist_with_their_types_and_defaults() -> None:
    expected = {
        "checkpointInterval": ("duration", "10s"),
        "checkpointTimeout": ("duration", "10min"),
        "minPauseBetweenCheckpoints": ("duration", "0s"),
        "maxConcurrentCheckpoints": ("int", "1"),
        "tolerableCheckpointFailures": ("int", "3"),
        "mode": ("enum", "exactlyOnce"),
        "unaligned.enabled": ("bool", "false"),
        "unaligned.adaptive": ("bool", "true"),
        "alignedCheckpointTimeout": ("duration", "0s"),
        "maxParallelism": ("int", "128"),
        "snapshotPath": ("path", None),
        "snapshotStorageOptions": ("json", "{}"),
        "retainedCheckpoints": ("int", "3"),
        "retention.minAge": ("duration", "10min"),
        "retention.historySize": ("int", "1000"),
        "retention.maintenanceInterval": ("int", "10"),
        "inflight.capture": ("enum", "value"),
        "bufferPerChannel": ("int", "10000"),
        "coordinatorTimeout": ("duration", "2min"),
        "leaseTimeout": ("duration", "2min"),
        "provider.changeDetection": ("enum", "writes"),
        "keyed.writeBufferSize": ("bytes", "32m"),
        "keyed.maxRuns": ("int", "8"),
        "keyed.localCacheSize": ("bytes", "10g"),
        "keyed.localCacheDir": ("path", None),
        "metrics.prometheusPort": ("int", None),
        "metrics.host": ("str", "0.0.0.0"),
        "metrics.openTelemetry": ("bool", "false"),
        "autoscale.enabled": ("bool", "false"),
        "autoscale.minPartitions": ("int", "1"),
        "autoscale.maxPartitions": ("int", "0"),
        "autoscale.scaleUpBacklog": ("int", "100000"),
        "autoscale.scaleDownBacklog": ("int", "1000"),
        "autoscale.checkpoints": ("int", "3"),
        "autoscale.coolDown": ("duration", "5min"),
    }
    declared = {k.name: (k.type, k.default) for k in KEYS}
    assert declared == expected
    assert config.MAX_PARALLELISM.restore_may_change is False
    assert [k.name for k in KEYS if not k.restore_may_change] == ["maxParallelism"]


def test_defaults() -> None:
    conf = resolve({})
    assert conf == BarrieredConf()
    assert conf.to_dict() == {
        "checkpoint_interval_ms": 10_000,
        "checkpoint_timeout_ms": 600_000,
        "min_pause_ms": 0,
        "max_concurrent_checkpoints": 1,
        "tolerable_checkpoint_failures": 3,
        "exactly_once": True,
        "unaligned_enabled": False,
        "unaligned_adaptive": True,
        "aligned_checkpoint_timeout_ms": 0,
        "max_parallelism": 128,
        "snapshot_path": None,
        "snapshot_storage_options": "{}",
        "retained_checkpoints": 3,
        "retention_min_age_ms": 600_000,
        "retention_history_size": 1000,
        "retention_maintenance_interval": 10,
        "inflight_capture": "value",
        "buffer_per_channel": 10_000,
        "coordinator_timeout_ms": 120_000,
        "lease_timeout_ms": 120_000,
        "provider_change_detection": "writes",
        "keyed_write_buffer_size": 32 << 20,
        "keyed_max_runs": 8,
        "keyed_local_cache_size": 10 << 30,
        "keyed_local_cache_dir": None,
        "metrics_prometheus_port": None,
        "metrics_host": "0.0.0.0",
        "metrics_open_telemetry": False,
        "autoscale_enabled": False,
        "autoscale_min_partitions": 1,
        "autoscale_max_partitions": 0,
        "autoscale_scale_up_backlog": 100_000,
        "autoscale_scale_down_backlog": 1000,
        "autoscale_checkpoints": 3,
        "autoscale_cool_down_ms": 300_000,
    }
    assert conf.mode == "exactlyOnce"
    json.dumps(conf.to_dict())  # serialisable as snapshot metadata


def test_key_lookup_by_any_name() -> None:
    assert config.key("checkpointInterval") is config.CHECKPOINT_INTERVAL
    assert config.key(P + "checkpointInterval") is config.CHECKPOINT_INTERVAL
    assert config.key("checkpoint_interval_ms") is config.CHECKPOINT_INTERVAL
    with pytest.raises(ConfigError, match=r"did you mean 'spark\.sql\.streaming\.barriered\.mode'"):
        config.key("mdoe")


# ---- parse forms -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("10s", 10_000),
        ("500ms", 500),
        ("2min", 120_000),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("1500", 1500),
        ("0", 0),
        ("1.5s", 1500),
        ("0.5min", 30_000),
        (".5s", 500),
        ("10 s", 10_000),
        (" 10S ", 10_000),
        ("3 seconds", 3000),
        ("1 minute", 60_000),
        ("2 hours", 7_200_000),
        ("250 millis", 250),
    ],
)
def test_duration_forms(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms
    conf = resolve({P + "checkpointTimeout": text}) if ms >= 10 else None
    if conf is not None:
        assert conf.checkpoint_timeout_ms == ms


@pytest.mark.parametrize("text", ["", "s", "ten", "10 sec onds", "1e3", "10w", "1.5ms", "1..5s"])
def test_bad_duration_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|whole number"):
        parse_duration_ms(text)


@given(st.integers(0, 10**12))
def test_format_duration_round_trips(ms: int) -> None:
    assert parse_duration_ms(format_duration(ms)) == ms


def test_format_duration_picks_the_largest_unit() -> None:
    assert [format_duration(v) for v in (0, 1500, 10_000, 600_000, 3_600_000, 86_400_000)] == [
        "0s",
        "1500ms",
        "10s",
        "10min",
        "1h",
        "1d",
    ]


@pytest.mark.parametrize(("text", "value"), [("true", True), ("FALSE", False), (" True ", True)])
def test_bool_forms(text: str, value: bool) -> None:
    assert resolve({P + "unaligned.enabled": text}).unaligned_enabled is value


@pytest.mark.parametrize(("text", "value"), [("256", 256), ("+7", 7), (" 32768 ", 32768)])
def test_int_forms(text: str, value: int) -> None:
    assert resolve({P + "maxParallelism": text}).max_parallelism == value


@pytest.mark.parametrize(
    ("text", "exactly_once", "mode"),
    [
        ("exactlyOnce", True, "exactlyOnce"),
        ("EXACTLYONCE", True, "exactlyOnce"),
        ("atleastonce", False, "atLeastOnce"),
        ("AtLeastOnce", False, "atLeastOnce"),
    ],
)
def test_enum_forms_are_case_insensitive(text: str, exactly_once: bool, mode: str) -> None:
    conf = resolve({P + "mode": text})
    assert conf.exactly_once is exactly_once
    assert conf.mode == mode


def test_enum_returns_canonical_spelling() -> None:
    assert resolve({P + "inflight.capture": "REFERENCE"}).inflight_capture == "reference"


def test_path_is_stripped() -> None:
    conf = resolve({P + "snapshotPath": "  s3://bucket/snaps  "})
    assert conf.snapshot_path == "s3://bucket/snaps"
    assert conf.require_snapshot_path() == "s3://bucket/snaps"


def test_all_keys_together() -> None:
    conf = resolve(
        {
            P + "checkpointInterval": "5s",
            P + "checkpointTimeout": "1min",
            P + "minPauseBetweenCheckpoints": "500ms",
            P + "maxConcurrentCheckpoints": "2",
            P + "tolerableCheckpointFailures": "0",
            P + "mode": "exactlyOnce",
            P + "unaligned.enabled": "true",
            P + "alignedCheckpointTimeout": "2s",
            P + "maxParallelism": "256",
            P + "snapshotPath": "/tmp/snaps",
            P + "retainedCheckpoints": "5",
            P + "inflight.capture": "reference",
            P + "bufferPerChannel": "500",
            "spark.sql.shuffle.partitions": "8",  # not ours: ignored
        }
    )
    assert conf == BarrieredConf(
        checkpoint_interval_ms=5000,
        checkpoint_timeout_ms=60_000,
        min_pause_ms=500,
        max_concurrent_checkpoints=2,
        tolerable_checkpoint_failures=0,
        exactly_once=True,
        unaligned_enabled=True,
        aligned_checkpoint_timeout_ms=2000,
        max_parallelism=256,
        snapshot_path="/tmp/snaps",
        retained_checkpoints=5,
        inflight_capture="reference",
        buffer_per_channel=500,
    )
    assert resolve(conf.to_conf()) == conf


def test_non_string_values_are_accepted() -> None:
    conf = resolve({P + "unaligned.enabled": True, P + "maxParallelism": 64})  # type: ignore[dict-item]
    assert conf.unaligned_enabled is True and conf.max_parallelism == 64


# ---- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("checkpointInterval", "ten seconds", "'10s', '1.5s', '2min'"),
        ("checkpointInterval", "5ms", "at least 10ms"),
        ("checkpointInterval", "1.5ms", "whole number of milliseconds"),
        ("checkpointTimeout", "-1s", "at least 10ms"),
        ("minPauseBetweenCheckpoints", "-5", "at least 0s"),
        ("alignedCheckpointTimeout", "soon", "a bare number is milliseconds"),
        ("maxConcurrentCheckpoints", "0", "an integer, at least 1"),
        ("maxConcurrentCheckpoints", "1.5", "an integer, at least 1"),
        ("tolerableCheckpointFailures", "-1", "an integer, at least 0"),
        ("tolerableCheckpointFailures", "three", "an integer, at least 0"),
        ("mode", "exactly-once", "one of exactlyOnce, atLeastOnce"),
        ("unaligned.enabled", "yes", "true or false"),
        ("unaligned.enabled", "1", "true or false"),
        ("maxParallelism", "0", "an integer, from 1 to 32768"),
        ("maxParallelism", "32769", "an integer, from 1 to 32768"),
        ("maxParallelism", "1_000", "an integer, from 1 to 32768"),
        ("snapshotPath", "   ", "a non-empty path"),
        ("retainedCheckpoints", "0", "an integer, at least 1"),
        ("inflight.capture", "copy", "one of value, reference"),
        ("bufferPerChannel", "0", "an integer, at least 1"),
        ("bufferPerChannel", "10k", "an integer, at least 1"),
    ],
)
def test_bad_session_values(name: str, value: str, accepted: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve({P + name: value})
    message = str(info.value)
    assert message.startswith(f"{P}{name}: ")
    assert repr(value) in message
    assert accepted in message
    assert isinstance(info.value, BarrieredError) and isinstance(info.value, ValueError)


def test_bad_option_value_names_the_option_and_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        resolve({}, {"checkpointinterval": "fast"})
    message = str(info.value)
    assert "source option 'checkpointInterval'" in message
    assert f"overrides {P}checkpointInterval" in message
    assert "'fast'" in message and "'10s'" in message


def test_unknown_key_suggests_the_closest() -> None:
    with pytest.raises(ConfigError) as info:
        resolve({P + "checkpointIntervall": "10s"})
    message = str(info.value)
    assert f"unknown configuration key '{P}checkpointIntervall'" in message
    assert f"did you mean '{P}checkpointInterval'?" in message


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("checkpointinterval", "checkpointInterval"),  # session keys are case-sensitive
        ("unaligned.enable", "unaligned.enabled"),
        ("unalignedEnabled", "unaligned.enabled"),
        ("maxParalellism", "maxParallelism"),
        ("inflightCapture", "inflight.capture"),
        ("retainedCheckpoint", "retainedCheckpoints"),
    ],
)
def test_unknown_key_suggestions(typo: str, suggestion: str) -> None:
    with pytest.raises(ConfigError, match=f"did you mean '{P}{suggestion}'"):
        resolve({P + typo: "1"})


def test_unknown_key_without_close_match_lists_the_keys() -> None:
    with pytest.raises(ConfigError, match="known keys: checkpointInterval, checkpointTimeout"):
        resolve({P + "zzzzzz": "1"})


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        resolve(
            {P + "checkpointIntervall": "1s", P + "mode": "sometimes", P + "maxParallelism": "0"}
        )
    message = str(info.value)
    assert message.startswith("3 configuration problems:")
    assert "checkpointIntervall" in message and "'sometimes'" in message and "'0'" in message


def test_unaligned_needs_exactly_once() -> None:
    with pytest.raises(ConfigError) as info:
        resolve({P + "unaligned.enabled": "true", P + "mode": "atLeastOnce"})
    message = str(info.value)
    assert f"{P}unaligned.enabled=true needs {P}mode=exactlyOnce" in message
    # At least once without unaligned is fine; aligned timeout without unaligned is ignored.
    conf = resolve({P + "mode": "atLeastOnce", P + "alignedCheckpointTimeout": "2s"})
    assert not conf.exactly_once and conf.aligned_checkpoint_timeout_ms == 2000


def test_require_snapshot_path() -> None:
    with pytest.raises(ConfigError, match=f"set {P}snapshotPath .*option\\('snapshotPath'"):
        resolve({}).require_snapshot_path()


def test_direct_construction_is_validated() -> None:
    with pytest.raises(ConfigError, match=f"{P}maxParallelism: value '0' is out of range"):
        BarrieredConf(max_parallelism=0)
    with pytest.raises(ConfigError, match=r"inflight\.capture: invalid value 'copy'"):
        BarrieredConf(inflight_capture="copy")
    with pytest.raises(ConfigError, match="field checkpoint_interval_ms must be int"):
        BarrieredConf(checkpoint_interval_ms="10s")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="field unaligned_enabled must be bool"):
        BarrieredConf(unaligned_enabled=1)  # type: ignore[arg-type]


# ---- source options --------------------------------------------------------------------


def test_option_overrides_session() -> None:
    conf = resolve(
        {P + "checkpointInterval": "10s", P + "mode": "atLeastOnce"},
        {"checkpointInterval": "5s", "path": "/data/events"},
    )
    assert conf.checkpoint_interval_ms == 5000
    assert conf.exactly_once is False  # session value kept where no option is given


def test_options_are_case_insensitive_like_pyspark() -> None:
    # PySpark hands a Python data source its options with lower-cased names.
    conf = resolve({}, {"checkpointinterval": "5s", "unaligned.enabled": "TRUE"})
    assert conf.checkpoint_interval_ms == 5000 and conf.unaligned_enabled


def test_split_options() -> None:
    overrides, rest = split_options(
        {
            "checkpointinterval": "5s",
            P + "retainedCheckpoints": "7",
            "snapshotPath": "/snaps",
            "upstream": "files",
            "path": "/data/events",
            "channels": "8",
        }
    )
    assert overrides == {
        "checkpointInterval": "5s",
        "retainedCheckpoints": "7",
        "snapshotPath": "/snaps",
    }
    assert rest == {"upstream": "files", "path": "/data/events", "channels": "8"}
    assert resolve({}, {P + "retainedCheckpoints": "7"}).retained_checkpoints == 7


def test_every_key_can_be_set_as_a_source_option() -> None:
    assert split_options({"maxparallelism": "256"}) == ({"maxParallelism": "256"}, {})
    assert resolve({f"{P}maxParallelism": "64"}, {"maxParallelism": "256"}).max_parallelism == 256
    for config_key in KEYS:
        assert split_options({config_key.name.lower(): "x"})[0] == {config_key.name: "x"}


def test_unknown_prefixed_option_is_an_error() -> None:
    with pytest.raises(ConfigError, match="did you mean 'checkpointTimeout'"):
        split_options({P + "checkpointTimout": "1min"})


# ---- restore compatibility -------------------------------------------------------------


def test_restore_with_same_fixed_keys_is_fine() -> None:
    previous = resolve({P + "maxParallelism": "256", P + "checkpointInterval": "1s"})
    current = resolve({P + "maxParallelism": "256", P + "checkpointInterval": "1min"})
    check_restore_compatible(previous.to_dict(), current)
    check_restore_compatible(previous.to_conf(), current)
    check_restore_compatible({"maxParallelism": "256"}, current)
    check_restore_compatible({}, current)  # nothing recorded: nothing to check


@pytest.mark.parametrize(
    "previous",
    [
        {"max_parallelism": 128},
        {"maxParallelism": "128"},
        {P + "maxParallelism": "128"},
        BarrieredConf().to_dict(),
    ],
)
def test_changed_max_parallelism_is_refused(previous: dict[str, object]) -> None:
    current = resolve({P + "maxParallelism": "256"})
    with pytest.raises(ConfigError) as info:
        check_restore_compatible(previous, current)
    message = str(info.value)
    assert "maxParallelism is fixed for the life of the snapshot path" in message
    assert "maxParallelism=128" in message and f"{P}maxParallelism=256" in message
    assert "restore with maxParallelism=128 or start a new snapshotPath" in message
    assert "spark.sql.shuffle.partitions" in message


def test_keys_that_may_change_are_not_checked() -> None:
    previous = BarrieredConf(checkpoint_interval_ms=1000, exactly_once=False).to_dict()
    check_restore_compatible(previous, resolve({P + "mode": "exactlyOnce"}))


def test_bad_recorded_value_is_reported() -> None:
    with pytest.raises(ConfigError, match="maxParallelism recorded in the snapshot"):
        check_restore_compatible({"maxParallelism": "lots"}, BarrieredConf())


def test_storage_options_are_a_json_object_of_strings() -> None:
    conf = resolve({P + "snapshotStorageOptions": '{"AWS_REGION": "eu-west-1"}'})
    assert conf.storage_options == {"AWS_REGION": "eu-west-1"}
    assert resolve({}).storage_options == {}
    for bad, why in (("{oops", "not JSON"), ('{"timeout": 30}', "not an object of string")):
        with pytest.raises(ConfigError, match=rf"snapshotStorageOptions.*{why}"):
            resolve({P + "snapshotStorageOptions": bad})
