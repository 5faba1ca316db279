"""Validation of the barriered source's options, and the admission they give (no Spark
needed: the admission test drives the source's reader the way Spark does)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from barriered.config import KEYS, PREFIX
from barriered.config.source_options import SESSION_CONF_OPTION
from barriered.control.offsets import SourceOffset
from barriered.datasource.options import parse_source_options
from barriered.datasource.source import BarrieredDataSource
from barriered.errors import ConfigError
from file_tree import tree

BASE = {"snapshotPath": "/tmp/snap", "upstream": "rate", SESSION_CONF_OPTION: "{}"}


def test_session_keys_arrive_through_the_hidden_option_and_options_override_them() -> None:
    session = {
        "spark.sql.streaming.barriered.checkpointInterval": "5s",
        "spark.sql.streaming.barriered.maxParallelism": "16",
    }
    opts = {**BASE, SESSION_CONF_OPTION: json.dumps(session), "checkpointInterval": "2s"}
    settings = parse_source_options(opts)
    assert settings.conf.checkpoint_interval_ms == 2000
    assert settings.conf.max_parallelism == 16
    assert settings.upstream == "rate"
    assert settings.max_rows_per_channel is None


def test_unknown_option_is_named_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"'maxrowsperchanel' \(did you mean 'maxRowsPerChannel'"):
        parse_source_options({**BASE, "maxRowsPerChanel": "5"})


def test_misspelt_session_key_as_option_gets_a_suggestion() -> None:
    with pytest.raises(ConfigError) as err:
        parse_source_options({**BASE, "checkpointIntervall": "5s"})
    assert (
        "'checkpointintervall' (did you mean 'checkpointInterval', or the session key "
        "'spark.sql.streaming.barriered.checkpointInterval'?)" in str(err.value)
    )
    with pytest.raises(ConfigError, match=r"did you mean 'maxParallelism', or the session key"):
        parse_source_options({**BASE, "maxParalelism": "64"})


def test_option_of_another_upstream_is_unknown() -> None:
    with pytest.raises(ConfigError, match="'archiveto'"):
        parse_source_options({**BASE, "archiveTo": "/tmp/a"})


def test_missing_snapshot_path_says_how_to_set_it() -> None:
    with pytest.raises(ConfigError, match=r"snapshotPath"):
        parse_source_options({"upstream": "rate", SESSION_CONF_OPTION: "{}"})


def test_restore_from_takes_latest_an_id_or_a_path() -> None:
    assert parse_source_options({**BASE, "restoreFrom": " latest "}).restore_from == "latest"
    assert parse_source_options({**BASE, "restoreFrom": "7"}).restore_from == "7"
    assert parse_source_options({**BASE, "restoreFrom": "/sp/1"}).restore_from == "/sp/1"
    with pytest.raises(ConfigError, match="'restoreFrom' must be 'latest', a checkpoint id >= 1"):
        parse_source_options({**BASE, "restoreFrom": "0"})


def test_admission_must_be_positive() -> None:
    with pytest.raises(ConfigError) as err:
        parse_source_options({**BASE, "maxRowsPerChannel": "0"})
    assert str(err.value) == (
        "source option 'maxRowsPerChannel': value '0' is out of range; expected an integer, "
        "at least 1"
    )
    assert parse_source_options({**BASE, "maxRowsPerChannel": "7"}).max_rows_per_channel == 7


def test_every_key_has_a_source_option_form() -> None:
    session = {PREFIX + k.name: "1" for k in KEYS if k.type == "int"}
    options = {k.name: "2" for k in KEYS if k.type == "int"}
    conf = parse_source_options({**BASE, SESSION_CONF_OPTION: json.dumps(session), **options}).conf
    assert conf.max_parallelism == 2
    assert {k.name: getattr(conf, k.field) for k in KEYS if k.type == "int"} == {
        k.name: 2 for k in KEYS if k.type == "int"
    }


def test_a_source_without_the_session_keys_is_refused() -> None:
    without = {k: v for k, v in BASE.items() if k != SESSION_CONF_OPTION}
    with pytest.raises(ConfigError, match=r"barriered.install\(spark\)"):
        parse_source_options(without)
    assert parse_source_options(BASE).conf.snapshot_path == "/tmp/snap"


def _rate_source(snap: Path, **extra: str) -> dict[str, str]:
    return {
        "upstream": "rate",
        "channels": "3",
        "rowsPerSecond": "0",
        "rowsPerChannel": "100",
        "maxRowsPerChannel": "10",
        "snapshotPath": str(snap),
        SESSION_CONF_OPTION: "{}",
        **extra,
    }


def test_admission_factors_scale_the_admission_of_chosen_channels(tmp_path: Path) -> None:
    source = BarrieredDataSource(_rate_source(tmp_path / "snap", admissionFactors="0:0.25,2:1.5"))
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    ends = []
    for _ in range(3):
        start = reader.latestOffset(start, reader.getDefaultReadLimit())
        ends.append(SourceOffset.from_dict(start).positions)
    reader.stop()
    # floor(10 * 0.25) = 2 rows per batch on channel 0, 10 on channel 1, 15 on channel 2
    assert ends == [(2, 10, 15), (4, 20, 30), (6, 30, 45)]


def test_admission_factors_are_refused_without_admission_or_out_of_range(tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    before = tree(tmp_path)
    unset = {k: v for k, v in _rate_source(snap).items() if k != "maxRowsPerChannel"}
    with pytest.raises(ConfigError) as err:
        parse_source_options({**unset, "admissionFactors": "0:0.5"})
    assert str(err.value) == (
        "option 'admissionFactors' scales 'maxRowsPerChannel', which is not set: set "
        "'maxRowsPerChannel' too, or remove 'admissionFactors'"
    )
    with pytest.raises(ConfigError) as err:
        parse_source_options(_rate_source(snap, admissionFactors="0=0.5"))
    assert str(err.value) == (
        "option 'admissionFactors' must look like 'CHANNEL:FACTOR[,CHANNEL:FACTOR]', "
        "e.g. '0:4', got '0=0.5'"
    )
    source = BarrieredDataSource(_rate_source(snap, admissionFactors="3:0.5"))
    with pytest.raises(ConfigError) as err:
        source.streamReader(source.schema())
    assert str(err.value) == (
        "option 'admissionFactors': channel must be in [0, 3) and factor a finite number > 0, "
        "got '3:0.5'"
    )
    assert tree(tmp_path) == before


@pytest.mark.parametrize("factors", ["0:nan", "1:1e400", "2:inf", "0:-0.5"])
def test_admission_factors_that_are_not_finite_positive_numbers_are_refused_at_load(
    tmp_path: Path, factors: str
) -> None:
    """Issue 36, case 4: ``0:nan`` and ``1:1e400`` passed the check and crashed the
    query's first batch (an UnboundLocalError of pyspark's, from a ValueError of
    ``math.floor``)."""
    before = tree(tmp_path)
    with pytest.raises(ConfigError) as err:
        parse_source_options(_rate_source(tmp_path / "snap", admissionFactors=factors))
    assert str(err.value) == (
        f"option 'admissionFactors': channel must be in [0, {sys.maxsize}) and factor a "
        f"finite number > 0, got {factors!r}"
    )
    assert tree(tmp_path) == before


def test_a_channel_given_twice_in_admission_factors_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        parse_source_options(_rate_source(tmp_path / "snap", admissionFactors="0:0.5,1:2,0:4"))
    assert str(err.value) == (
        "option 'admissionFactors': channel 0 is given twice ('0:0.5,1:2,0:4'); give each "
        "channel one factor"
    )


def test_a_factor_too_large_for_a_float_admits_without_limit(tmp_path: Path) -> None:
    settings = parse_source_options(_rate_source(tmp_path / "snap", admissionFactors="1:1e308"))
    assert settings.admission(3) == [10, sys.maxsize, 10]


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_restore_from_is_refused_at_load(tmp_path: Path, blank: str) -> None:
    """Issue 36: ``restoreFrom=''`` was taken for "no restore" without a word."""
    before = tree(tmp_path)
    with pytest.raises(ConfigError) as err:
        parse_source_options(_rate_source(tmp_path / "snap", restoreFrom=blank))
    assert str(err.value) == (
        f"option 'restoreFrom' is blank ({blank!r}): it would be ignored and the query would "
        "start without a restore. Give 'latest', a checkpoint id or a savepoint path, or "
        "leave 'restoreFrom' out to start (or resume) without one"
    )
    assert tree(tmp_path) == before
