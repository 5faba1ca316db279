"""Retention on real Delta tables (delta-rs, no Spark): what is deleted, what stays."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from barriered.statestore import retention
from barriered.statestore.acks import Ack, read_acks, write_ack, write_data_file
from barriered.statestore.delta_tables import INFLIGHT_PARTITIONS, commit_files
from barriered.statestore.layout import SnapshotLayout
from snapshots import commit_state as commit_files_of_state
from snapshots import state_file as keyed_file
from snapshots import state_rows

INFLIGHT_FILE = pa.schema(
    [("user_id", pa.string()), ("_channel", pa.int32()), ("_seq", pa.int64())]
)


def state_file(layout: SnapshotLayout, key_group: int, checkpoint_id: int, total: int):
    """A key group's whole state (one key) as a partition's file of a cut: it replaces
    every older row of the key group."""
    rows = state_rows(["k1"], [total], checkpoint_id, key_group)
    return keyed_file(layout, rows, checkpoint_id, replaces=[key_group])


def commit_state(layout: SnapshotLayout, checkpoint_id: int, groups: dict[int, int]) -> int:
    files = [state_file(layout, kg, checkpoint_id, total) for kg, total in groups.items()]
    return commit_files_of_state(layout, checkpoint_id, files, {})


def commit_inflight(layout: SnapshotLayout, checkpoint_id: int) -> int:
    table = pa.table({"user_id": ["u"], "_channel": [0], "_seq": [7]}, schema=INFLIGHT_FILE)
    f = write_data_file(layout.inflight_table, {"checkpoint_id": str(checkpoint_id)}, "ch0", table)
    schema = INFLIGHT_FILE.append(pa.field("checkpoint_id", pa.int64()))
    return commit_files(
        layout.inflight_table, schema, INFLIGHT_PARTITIONS, checkpoint_id, [f]
    ).version


def parquet_files(folder: str) -> set[str]:
    return {str(p.relative_to(folder)) for p in Path(folder).rglob("*.parquet")}


def totals(layout: SnapshotLayout, version: int) -> list[str]:
    rows = pa.table(DeltaTable(layout.state_table, version=version).scan().read_all()).to_pylist()
    return sorted(f"{r['key_group']}:{r['total']}" for r in rows)


@pytest.fixture()
def layout(tmp_path: Path) -> SnapshotLayout:
    return SnapshotLayout.at(str(tmp_path / "snap"))


def test_a_file_is_deleted_only_when_no_retained_version_reads_it(layout: SnapshotLayout) -> None:
    v1 = commit_state(layout, 1, {0: 10, 1: 20})
    only_v1 = parquet_files(layout.state_table)
    v2 = commit_state(layout, 2, {0: 11})  # key group 1 unchanged: its file stays live
    v3 = commit_state(layout, 3, {0: 12, 1: 21})
    expected_v2, expected_v3 = totals(layout, v2), totals(layout, v3)

    deleted = retention.apply(
        layout, [retention.Retained(2, v2, None), retention.Retained(3, v3, None)]
    )
    assert deleted == 1  # key group 0 of checkpoint 1: removed at v2, read by v1 only
    assert totals(layout, v2) == expected_v2 and totals(layout, v3) == expected_v3
    assert len(only_v1 - parquet_files(layout.state_table)) == 1

    deleted = retention.apply(layout, [retention.Retained(3, v3, None)])
    assert deleted == 2  # key group 0 of checkpoint 2 and key group 1 of checkpoint 1
    assert totals(layout, v3) == expected_v3
    assert len(parquet_files(layout.state_table)) == 2
    assert retention.apply(layout, [retention.Retained(3, v3, None)]) == 0
    assert v1 < v2 < v3


def test_inflight_records_leave_the_table_then_the_disk(layout: SnapshotLayout) -> None:
    commit_state(layout, 2, {0: 1})
    i2 = commit_inflight(layout, 2)
    v3 = commit_state(layout, 3, {0: 2})
    i3 = commit_inflight(layout, 3)
    assert len(parquet_files(layout.inflight_table)) == 2

    retention.apply(layout, [retention.Retained(3, v3, i3)])
    table = DeltaTable(layout.inflight_table)
    live = table.to_pyarrow_table().column("checkpoint_id").to_pylist()
    assert live == [3]  # checkpoint 2's records left the table ...
    assert len(parquet_files(layout.inflight_table)) == 2  # ... but version i3 still reads them
    assert DeltaTable(layout.inflight_table, version=i3).to_pyarrow_table().num_rows == 2

    v4 = commit_state(layout, 4, {0: 3})
    retention.apply(layout, [retention.Retained(4, v4, None)])
    assert parquet_files(layout.inflight_table) == set()
    assert i2 < i3


def test_discard_deletes_uncommitted_inflight_files_and_keeps_keyed_state_files(
    layout: SnapshotLayout,
) -> None:
    """An aborted checkpoint's in-flight files go; its keyed state files stay: the live
    state of the partition that wrote one reads it and reports it at its next cut."""
    v1 = commit_state(layout, 1, {0: 5})
    pending = state_file(layout, 0, 2, 6)
    table = pa.table({"user_id": ["u"], "_channel": [0], "_seq": [7]}, schema=INFLIGHT_FILE)
    orphan = write_data_file(layout.inflight_table, {"checkpoint_id": "2"}, "ch0", table)
    write_ack(layout, Ack(2, "state/op/0", changed=True, files=(pending,)))
    write_ack(layout, Ack(2, "inflight/0", changed=True, files=(orphan,)))
    assert read_acks(layout, 2)
    retention.discard(layout, 2, delete_data=True)
    assert read_acks(layout, 2) == {}
    assert orphan.path not in parquet_files(layout.inflight_table)
    assert pending.path in parquet_files(layout.state_table)
    assert totals(layout, v1) == ["0:5"]


def test_discard_keeps_data_when_a_commit_may_have_happened(layout: SnapshotLayout) -> None:
    committed = state_file(layout, 0, 1, 5)
    write_ack(layout, Ack(1, "state/op/0", changed=True, files=(committed,)))
    retention.discard(layout, 1, delete_data=False)
    assert read_acks(layout, 1) == {}
    assert committed.path in parquet_files(layout.state_table)


def test_an_unread_file_stays_for_the_grace_period(layout: SnapshotLayout) -> None:
    v1 = commit_state(layout, 1, {0: 10})
    reader = DeltaTable(layout.state_table, version=v1)  # loaded while 1 is retained
    v2 = commit_state(layout, 2, {0: 11})
    files = parquet_files(layout.state_table)
    retained = [retention.Retained(2, v2, None)]

    assert retention.apply(layout, retained, min_age_ms=60_000, now_ms=1_000_000) == 0
    assert retention.apply(layout, retained, min_age_ms=60_000, now_ms=1_059_999) == 0
    assert parquet_files(layout.state_table) == files
    assert pa.table(reader.scan().read_all()).column("total").to_pylist() == [10]

    assert retention.apply(layout, retained, min_age_ms=60_000, now_ms=1_060_000) == 1
    assert len(files - parquet_files(layout.state_table)) == 1
    assert totals(layout, v2) == ["0:11"]
