"""The keyed operator's slots (key groups per Python call) on a resumed query.

Spark resumes a query with the shuffle partitions recorded in its checkpoint, not the
session's, and the slots' live state is keyed by slot number: the width chosen at the
first start is recorded on the snapshot path and kept, whatever the session says.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from barriered.errors import KeyedWidthError
from barriered.statestore.fileio import read_json, write_json
from file_tree import tree
from runs import FILES_SOURCE, MODES, PREFIX, run, start, state_at, write_files

pytestmark = pytest.mark.spark

SIZES = {"a": 30, "b": 12}


def test_a_resume_with_other_session_shuffle_partitions_keeps_its_slots_and_its_state(
    session: Any, tmp_path: Path
) -> None:
    data, snap, ck = tmp_path / "data", str(tmp_path / "snap"), tmp_path / "ck"
    session.conf.unset(PREFIX + "keyedKeyGroupsPerCall")  # auto
    source = {**FILES_SOURCE, "path": str(data)}
    conf = {**MODES["aligned"], "maxParallelism": "32"}
    first = write_files(data, SIZES, tag="first")
    _, layout = run(session, tmp_path, conf, source, snap, (30, 12))
    # auto: 32 key groups over 2 partitions -> 8 slots of 4 (4 slots per partition).
    assert read_json(layout.operator_file("running_totals"))["key_groups_per_call"] == 4
    assert state_at(layout, DeltaTable(layout.state_table).version()) == dict(first)

    second = write_files(data, SIZES, tag="second")
    session.conf.set("spark.sql.shuffle.partitions", "8")  # auto would now take 1
    query, layout = run(session, tmp_path, conf, source, snap, (60, 24))
    # Spark ran on with the checkpoint's 2 partitions and left the session's 8 as they
    # were: the width is the recorded one, and every key kept its state.
    assert session.conf.get("spark.sql.shuffle.partitions") == "8"
    assert sorted(p.name for p in (ck / "state" / "0").iterdir() if p.name.isdigit()) == ["0", "1"]
    assert read_json(layout.operator_file("running_totals"))["key_groups_per_call"] == 4
    assert query.exception() is None
    assert state_at(layout, DeltaTable(layout.state_table).version()) == dict(first + second)

    # Another width set explicitly is refused before the query starts: nothing written.
    third = write_files(data, SIZES, tag="third")
    session.conf.set(PREFIX + "keyedKeyGroupsPerCall", "8")
    before = tree(tmp_path)
    with pytest.raises(KeyedWidthError) as err:
        start(session, tmp_path, conf, source, snap)
    assert str(err.value) == (
        f"keyed operator 'running_totals' runs with 4 key groups per call on snapshot path "
        f"{layout.root!r} (its live state in Spark's checkpoint is per slot of that many); "
        "spark.sql.streaming.barriered.keyedKeyGroupsPerCall=8 cannot change it on resume: "
        "unset it, or restore the latest checkpoint into a new checkpoint location (.option("
        '"restoreFrom", "latest")), where any width works; nothing was written'
    )
    assert tree(tmp_path) == before

    # A restore into a new checkpoint location takes it; the registration records it once
    # the restored run started.
    restored = {**source, "restoreFrom": "latest"}
    _, layout = run(session, tmp_path, conf, restored, snap, (90, 36), checkpoint="ck-restored")
    assert read_json(layout.operator_file("running_totals"))["key_groups_per_call"] == 8
    assert state_at(layout, DeltaTable(layout.state_table).version()) == dict(
        first + second + third
    )


@pytest.mark.full
def test_live_state_of_another_width_fails_the_resumed_query_naming_both_widths(
    session: Any, tmp_path: Path
) -> None:
    """The safety net under the recorded width: a registration that lost it (edited by
    hand here) makes the resumed query's slots find live state of another width."""
    from pyspark.errors import StreamingQueryException

    data, snap = tmp_path / "data", str(tmp_path / "snap")
    source = {**FILES_SOURCE, "path": str(data)}
    conf = {**MODES["aligned"], "keyedKeyGroupsPerCall": "4"}
    write_files(data, SIZES, tag="first")
    _, layout = run(session, tmp_path, conf, source, snap, (30, 12))
    version = DeltaTable(layout.state_table).version()
    registration = read_json(layout.operator_file("running_totals"))
    write_json(layout.operator_file("running_totals"), {**registration, "key_groups_per_call": 2})
    write_files(data, SIZES, tag="second")
    query = start(session, tmp_path, {**conf, "keyedKeyGroupsPerCall": "2"}, source, snap)
    with pytest.raises(StreamingQueryException) as err:
        query.awaitTermination()
    assert re.search(
        r"KeyedWidthError: keyed operator 'running_totals': slot \d+'s live state in Spark's "
        r"checkpoint was written with 4 key groups per call, this query runs 2 \(the snapshot "
        r"path's registration of the operator does not match this checkpoint location\); "
        r"nothing of the batch was written\. Restore the latest checkpoint into a new "
        r"checkpoint location",
        str(err.value),
    ), str(err.value)
    assert DeltaTable(layout.state_table).version() == version  # no checkpoint completed
