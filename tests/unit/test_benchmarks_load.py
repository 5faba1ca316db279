"""The benchmark suite loads: every workload module imports and is registered (a renamed
setting or module breaks ``make bench`` at import, which no other test runs)."""

from __future__ import annotations

from benchmarks.run import _parse
from benchmarks.workloads import WORKLOADS


def test_every_workload_loads_and_the_command_line_parses() -> None:
    assert {"overhead", "backpressure", "saturated", "kafka", "sink", "snapshot", "s3"} <= set(
        WORKLOADS
    )
    assert _parse(["--quick", "--only", "overhead"]).only == ["overhead"]
