"""Bounded disk over long runs (no Spark): a real QueryCoordinator drives many
checkpoints with real acknowledgements and Delta commits; files and bytes under the
snapshot path stay bounded, and every retained checkpoint stays restorable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from barriered.errors import RestoreError
from barriered.statestore import checkpoints_table
from barriered.statestore.restore_point import committed_checkpoints, resolve
from soak import SoakQuery, Usage, usage


def run(query: SoakQuery, checkpoints: int, window: int) -> Usage:
    """Run ``checkpoints`` checkpoints; return the peak usage over the last ``window``
    (a few maintenance cycles, so the peak does not depend on where a cycle stands)."""
    peak = Usage(0, 0)
    for i in range(checkpoints):
        query.checkpoint()
        if i >= checkpoints - window:
            now = usage(query.layout.root)
            peak = Usage(max(peak.files, now.files), max(peak.bytes, now.bytes))
    return peak


def assert_bounded_and_restorable(tmp_path: Path, early: int, late: int) -> None:
    query = SoakQuery(
        tmp_path / "snap",
        retained_checkpoints=2,
        retention_min_age_ms=0,
        retention_history_size=20,
        retention_maintenance_interval=5,
    )
    window = 15  # three maintenance cycles (5 completions each, every 7th is aborted)
    first = run(query, early, window)
    then = run(query, late - early, window)

    # Bounded: the peak after `late` checkpoints is the peak after `early` ones, give or
    # take the size of the retained checkpoints' files (totals grow a digit or two).
    assert then.files <= first.files + 4, (first, then)
    assert then.bytes <= first.bytes * 1.2, (first, then)

    layout = query.layout
    logs = sorted((Path(layout.state_table) / "_delta_log").glob("*.json"))
    assert len(logs) <= 2 * 5 + 2  # cut at the oldest retained version every 5 completions
    rows = checkpoints_table.read_rows(layout)
    assert len(rows) <= 20 + 5 + 1
    assert rows[-1]["checkpoint_id"] == query.checkpoint_id
    assert not list(Path(layout.root, "_acks").iterdir())

    # The oldest retained checkpoint still resolves from the state table's history, with
    # its barrier positions, and reads exactly the state it had.
    oldest, newest = query.completed[-2], query.completed[-1]
    assert sorted(committed_checkpoints(layout))[-2:] == [oldest, newest]
    point = resolve(layout, str(oldest))
    assert point.barrier == (oldest * 10, oldest * 10)
    point.check_files()
    table = DeltaTable(layout.state_table, version=point.state_version).to_pyarrow_table()
    state = {r["key_group"]: json.loads(r["value"])["total"] for r in table.to_pylist()}
    assert state == query.totals_at[oldest]
    if point.inflight:
        assert point.inflight == ((0, oldest * 10 - 4, oldest * 10),)
        assert sum(f.rows for f in point.inflight_files()) == 4

    # A checkpoint long out of the window is refused with a message saying so.
    gone = query.completed[0]
    with pytest.raises(RestoreError, match=f"checkpoint {gone} .* left the retention window"):
        resolve(layout, str(gone))


def test_disk_is_bounded_over_150_checkpoints(tmp_path: Path) -> None:
    assert_bounded_and_restorable(tmp_path, 50, 150)


@pytest.mark.full
def test_disk_is_bounded_over_500_checkpoints(tmp_path: Path) -> None:
    assert_bounded_and_restorable(tmp_path, 50, 500)
