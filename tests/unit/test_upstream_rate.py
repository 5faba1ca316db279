"""The rate upstream under ``trigger(availableNow=True)`` (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from barriered.datasource.upstreams.rate import RateUpstream
from barriered.errors import ConfigError


def rate(tmp_path: Path, **options: str) -> RateUpstream:
    return RateUpstream.from_options({"channels": "2", **options}, str(tmp_path))


def test_records_over_time_are_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        rate(tmp_path, rowsPerSecond="50").check_available_now()
    assert str(refused.value) == (
        "upstream 'rate' with option 'rowsPerSecond' = 50 produces its records over time, "
        "so a trigger(availableNow=True) run would end at once with none: set "
        "'rowsPerSecond' to 0 and 'rowsPerChannel' to the records per channel (all "
        "available at once), or use a processingTime trigger"
    )


def test_a_bounded_burst_is_served(tmp_path: Path) -> None:
    upstream = rate(tmp_path, rowsPerSecond="0", rowsPerChannel="30")
    upstream.check_available_now()
    assert upstream.available() == [30, 30]
