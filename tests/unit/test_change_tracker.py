"""The provider's change tracking (``jvm-shim/.../ChangeTracker.java``), without Spark.

A small Java program (``jvm/ChangeTrackerCheck.java``) compiled against the built jar
runs the tracker through committed, aborted and retried store versions, exports, and
every case in which it must answer "unknown" (the exporter then writes the whole
partition): another run, partition count or maxParallelism, a base never exported by this
provider instance, a version committed elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from jvm_checks import run_check


def test_change_tracker_scenarios(tmp_path: Path) -> None:
    assert run_check("ChangeTrackerCheck", tmp_path).strip() == "ok"
