"""``barriered.state_table`` reads a checkpoint's whole state when delta-rs yields an
empty record batch among its batches: pyspark's ``createDataFrame`` kept no row after one.
``demo --kafka`` lost every row of the files read after a file whose deletion vector held
all of its rows (delta-rs's batches there: 437, 413, 0, 79, 0, 71 rows; the read gave
850 of 1,000 keys). The test reads a real table and splits delta-rs's answer the same
way, since which files come back as empty batches depends on delta-rs's chunking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import barriered
from barriered import views
from barriered.config import BarrieredConf
from barriered.files.fileio import write_json
from barriered.statestore import checkpoints_table
from barriered.statestore.delta_tables import as_json, scan
from barriered.statestore.layout import SnapshotLayout
from snapshots import commit_state, registration, state_file, state_rows

pytestmark = pytest.mark.spark


def test_the_state_of_a_checkpoint_whose_older_file_was_replaced_whole(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    conf = BarrieredConf(snapshot_path=layout.root, max_parallelism=8)
    write_json(layout.config_file, {"conf": conf.to_dict(), "channels": 1, "upstream": {}})
    write_json(layout.operator_file("op"), registration())
    a, b = [f"a{i}" for i in range(300)], [f"b{i}" for i in range(300)]
    files = {  # checkpoint 2 replaces key group 3 (a*) whole; b* (key group 4) stays
        1: [state_file(layout, state_rows(a, [1] * 300, 1, 3), 1),
            state_file(layout, state_rows(b, [2] * 300, 1, 4), 1)],
        2: [state_file(layout, state_rows(a, [10] * 300, 2, 3), 2, replaces=[3])],
    }  # fmt: skip
    for cid, written in files.items():
        meta = {"barriered.kind": "checkpoint", "barriered.barrier": as_json({"0": cid})}
        version = commit_state(layout, cid, written, meta)
        checkpoints_table.append(layout, {"checkpoint_id": cid, "kind": "checkpoint",
                                          "mode": "aligned", "status": "completed",
                                          "state_table_version": version,
                                          "barrier_positions": as_json({"0": cid})})  # fmt: skip

    def scan_as_the_demo_met_it(table: DeltaTable) -> pa.Table:
        read = scan(table)
        whole = read.combine_chunks()
        empty = whole.slice(0, 0)
        return pa.concat_tables([whole.slice(0, 300), empty, whole.slice(300), empty])

    monkeypatch.setattr(views, "scan", scan_as_the_demo_met_it)
    rows = barriered.state_table(spark, layout.root).collect()

    assert sorted((r["user_id"], r["total"]) for r in rows) == sorted(
        [(u, 10) for u in a] + [(u, 2) for u in b]
    )
