"""The files the JVM provider writes are named as the Python side reads them.

``jvm-shim/.../SnapshotPaths.java`` and :class:`~barriered.statestore.layout.SnapshotLayout`
each name the provider's operator tables, acknowledgements and store registrations; a
small Java program prints the Java names, which must equal the Python ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from barriered.files.fileio import join
from barriered.statestore.layout import SnapshotLayout
from jvm_checks import run_check

CASES = [
    ("agg-default", "operator/agg-default/0", 7, 3),
    ("join-left-keyToNumValues", "operator/join-left-keyToNumValues/11", 12, 0),
    ("dedup", "operator/dedup/1", 1, None),  # a run without an epoch
]


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("classes")


@pytest.mark.parametrize(("operator", "participant", "checkpoint_id", "epoch"), CASES)
def test_java_and_python_name_the_same_files(
    classes: Path,
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
    printed = run_check("SnapshotPathsCheck", classes, *args)
    assert printed.splitlines() == [
        layout.operator_table(operator),
        layout.ack_file(checkpoint_id, participant, epoch),
        join(layout.stores_dir, f"{operator}.json"),
    ]
