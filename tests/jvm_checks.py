"""Small Java programs in ``tests/unit/jvm/`` that exercise the provider's classes without
Spark: compiled against the built jar and pyspark's jars, then run with ``java``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyspark
import pytest

from barriered import provider

SOURCES = Path(__file__).resolve().parent / "unit" / "jvm"


def run_check(name: str, out: Path, *args: str) -> str:
    """Compile ``tests/unit/jvm/<name>.java`` into ``out``, run ``io.barriered.shim.<name>``
    with ``args`` (assertions on) and return what it printed; skip without a JDK."""
    if shutil.which("javac") is None:
        pytest.skip("needs a JDK (javac)")
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    classpath = os.pathsep.join([provider.jar_path(), jars])
    if not (out / "io" / "barriered" / "shim" / f"{name}.class").exists():
        source = str(SOURCES / f"{name}.java")
        javac = ["javac", "--release", "17", "-nowarn", "-cp", classpath, "-d", str(out), source]
        subprocess.run(javac, check=True, capture_output=True)
    classes = os.pathsep.join([str(out), classpath])
    run = subprocess.run(
        ["java", "-ea", "-cp", classes, f"io.barriered.shim.{name}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout
