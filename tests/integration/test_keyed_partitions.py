"""The keyed operator's partitions on a resumed query.

Spark resumes a query with the shuffle partitions recorded in its checkpoint, not the
session's, and the live state is kept per partition (each owns a range of key groups):
the partitions of the first start are recorded on the snapshot path and kept, whatever
the session says; a restore into a new checkpoint location takes the session's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from barriered.files.fileio import read_json, write_json
from runs import FILES_SOURCE, MODES, run, start, state_at, write_files

pytestmark = pytest.mark.spark

SIZES = {"a": 30, "b": 12}


def test_a_resume_with_other_session_shuffle_partitions_keeps_its_partitions_and_state(
    session: Any, tmp_path: Path
) -> None:
    data, snap, ck = tmp_path / "data", str(tmp_path / "snap"), tmp_path / "ck"
    source = {**FILES_SOURCE, "path": str(data)}
    conf = {**MODES["aligned"], "maxParallelism": "32"}
    first = write_files(data, SIZES, tag="first")
    _, layout = run(session, tmp_path, conf, source, snap, (30, 12))
    assert read_json(layout.operator_file("running_totals"))["partitions"] == 2
    assert state_at(layout, DeltaTable(layout.state_table).version()) == dict(first)

    second = write_files(data, SIZES, tag="second")
    session.conf.set("spark.sql.shuffle.partitions", "8")
    query, layout = run(session, tmp_path, conf, source, snap, (60, 24))
    # Spark ran on with the checkpoint's 2 partitions and left the session's 8 as they
    # were: the partitions are the recorded ones, and every key kept its state.
    assert session.conf.get("spark.sql.shuffle.partitions") == "8"
    assert sorted(p.name for p in (ck / "state" / "0").iterdir() if p.name.isdigit()) == ["0", "1"]
    assert read_json(layout.operator_file("running_totals"))["partitions"] == 2
    assert query.exception() is None
    assert state_at(layout, DeltaTable(layout.state_table).version()) == dict(first + second)

    # A restore into a new checkpoint location takes the session's; the registration
    # records them once the restored run started.
    third = write_files(data, SIZES, tag="third")
    restored = {**source, "restoreFrom": "latest"}
    _, layout = run(session, tmp_path, conf, restored, snap, (90, 36), checkpoint="ck-restored")
    assert read_json(layout.operator_file("running_totals"))["partitions"] == 8
    restored_ck = tmp_path / "ck-restored" / "state" / "0"
    assert len([p for p in restored_ck.iterdir() if p.name.isdigit()]) == 8
    assert state_at(layout, DeltaTable(layout.state_table).version()) == dict(
        first + second + third
    )


@pytest.mark.full
def test_live_state_of_other_partitions_fails_the_resumed_query_naming_both(
    session: Any, tmp_path: Path
) -> None:
    """The safety net under the recorded partitions: a registration that lost them
    (edited by hand here) makes the resumed query's calls find live state of others."""
    from pyspark.errors import StreamingQueryException

    data, snap = tmp_path / "data", str(tmp_path / "snap")
    source = {**FILES_SOURCE, "path": str(data)}
    conf = MODES["aligned"]
    write_files(data, SIZES, tag="first")
    _, layout = run(session, tmp_path, conf, source, snap, (30, 12))
    version = DeltaTable(layout.state_table).version()
    registration = read_json(layout.operator_file("running_totals"))
    write_json(layout.operator_file("running_totals"), {**registration, "partitions": 1})
    write_files(data, SIZES, tag="second")
    query = start(session, tmp_path, conf, source, snap)
    with pytest.raises(StreamingQueryException) as err:
        query.awaitTermination()
    assert re.search(
        r"KeyedStateError: keyed operator 'running_totals': .*live state in Spark's "
        r"checkpoint .* was written for partition \d of 2.*nothing was written\. Restore the "
        r"latest checkpoint into a new checkpoint location",
        str(err.value),
    ), str(err.value)
    assert DeltaTable(layout.state_table).version() == version  # no checkpoint completed
