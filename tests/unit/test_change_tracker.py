"""The provider's change tracking (``jvm-shim/.../ChangeTracker.java``), without Spark.

A small Java program (``jvm/ChangeTrackerCheck.java``) compiled against the built jar
runs the tracker through committed, aborted and retried store versions, exports, and
every case in which it must answer "unknown" (the exporter then writes the whole
partition): another run, partition count or maxParallelism, a base never exported by this
provider instance, a version committed elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyspark
import pytest

from barriered import provider

HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_change_tracker_scenarios(tmp_path: Path) -> None:
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    classpath = os.pathsep.join([provider.jar_path(), jars])
    source = str(HERE / "jvm" / "ChangeTrackerCheck.java")
    subprocess.run(
        ["javac", "--release", "17", "-nowarn", "-cp", classpath, "-d", str(tmp_path), source],
        check=True,
        capture_output=True,
    )
    classes = os.pathsep.join([str(tmp_path), classpath])
    run = subprocess.run(
        ["java", "-ea", "-cp", classes, "io.barriered.shim.ChangeTrackerCheck"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
