"""The files the JVM provider writes are named as the Python side reads them.

``jvm-shim/.../SnapshotPaths.java`` and :class:`~barriered.statestore.layout.SnapshotLayout`
each name the provider's operator tables, acknowledgements and store registrations; a
small Java program prints the Java names, which must equal the Python ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyspark
import pytest

from barriered import provider
from barriered.statestore.fileio import join
from barriered.statestore.layout import SnapshotLayout

HERE = Path(__file__).resolve().parent
CASES = [
    ("agg-default", "operator/agg-default/0", 7, 3),
    ("join-left-keyToNumValues", "operator/join-left-keyToNumValues/11", 12, 0),
    ("dedup", "operator/dedup/1", 1, None),  # a run without an epoch
]


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("javac") is None:
        pytest.skip("needs a JDK (javac)")
    out = tmp_path_factory.mktemp("classes")
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    classpath = os.pathsep.join([provider.jar_path(), jars])
    source = str(HERE / "jvm" / "SnapshotPathsCheck.java")
    subprocess.run(
        ["javac", "--release", "17", "-nowarn", "-cp", classpath, "-d", str(out), source],
        check=True,
        capture_output=True,
    )
    return os.pathsep.join([str(out), classpath])


@pytest.mark.parametrize(("operator", "participant", "checkpoint_id", "epoch"), CASES)
def test_java_and_python_name_the_same_files(
    classes: str,
    tmp_path: Path,
    operator: str,
    participant: str,
    checkpoint_id: int,
    epoch: int | None,
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    args = [
        layout.root,
        operator,
        participant,
        str(checkpoint_id),
        str(-1 if epoch is None else epoch),
    ]
    run = subprocess.run(
        ["java", "-cp", classes, "io.barriered.shim.SnapshotPathsCheck", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert run.stdout.splitlines() == [
        layout.operator_table(operator),
        layout.ack_file(checkpoint_id, participant, epoch),
        join(layout.stores_dir, f"{operator}.json"),
    ]
