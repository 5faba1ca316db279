"""One barriered source read more than once in one query (a self-join): the first
instance plans, the others mirror it; separately loaded sources and other queries are
refused. No Spark: the readers are driven the way Spark drives a query's sources (in a
fixed order, every trigger); a reader in another process is a real subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql.streaming.datasource import ReadAllAvailable

from barriered.config.source_options import SESSION_CONF_OPTION
from barriered.control import offsets
from barriered.control.offsets import SourceOffset
from barriered.control.record import ControlRecord
from barriered.control.triggers import TriggerRequest
from barriered.datasource import mirror
from barriered.datasource.partitions import InflightPartition, MarkerPartition, WithMarkers
from barriered.datasource.reader import BarrieredStreamReader
from barriered.datasource.source import BarrieredDataSource
from barriered.errors import MirrorError, SnapshotPathInUseError
from barriered.statestore.layout import SnapshotLayout
from file_tree import tree


def options(snap: Path) -> dict[str, str]:
    return {
        "upstream": "rate",
        "channels": "2",
        "rowsPerSecond": "0",
        "rowsPerChannel": "60",
        "skew": "0:4",
        "keys": "5",
        "maxRowsPerChannel": "10",
        "snapshotPath": str(snap),
        "unaligned.enabled": "true",
        "alignedCheckpointTimeout": "0s",
        SESSION_CONF_OPTION: "{}",
    }


def reader(source: BarrieredDataSource) -> BarrieredStreamReader:
    made = source.streamReader(source.schema())
    assert isinstance(made, BarrieredStreamReader)
    return made


def trigger(readers: list[BarrieredStreamReader], starts: list[Any]) -> list[Any]:
    """One trigger as Spark runs it: each source in order, from its own start."""
    return [
        r.latestOffset(s, r.getDefaultReadLimit()) for r, s in zip(readers, starts, strict=True)
    ]


def markers(parts: list[Any]) -> list[MarkerPartition]:
    """The marker partitions of a batch's partitions (alone or after records)."""
    found = [p.markers if isinstance(p, WithMarkers) else p for p in parts]
    return [p for p in found if isinstance(p, MarkerPartition)]


def test_a_second_instance_of_one_loaded_source_mirrors_the_first(tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    source = BarrieredDataSource(options(snap))
    leader, follower = reader(source), reader(source)
    starts = [leader.initialOffset(), follower.initialOffset()]
    assert starts[0] == starts[1]
    layout = SnapshotLayout.at(str(snap))
    ControlRecord().with_requests([TriggerRequest(1, mode="unaligned")]).write(layout.control_file)
    cut_seen = False
    for _ in range(12):
        ends = trigger([leader, follower], starts)
        assert ends[0] == ends[1]
        if ends[0] != starts[0] and SourceOffset.from_dict(ends[0]).cut is not None:
            lead = leader.partitions(starts[0], ends[0])
            mirrored = follower.partitions(starts[1], ends[1])
            assert any(isinstance(p, InflightPartition) for p in lead)
            assert not any(isinstance(p, InflightPartition) for p in mirrored)
            assert markers(mirrored) == markers(lead) and len(markers(lead)) == 1
            cut_seen = True
        starts = ends
    assert cut_seen
    # One run, one epoch: the follower took nothing and renews nothing.
    assert DeltaTable(layout.owners_table).version() == 0
    assert sorted(p.name for p in (snap / "_coordinator" / "leases").iterdir()) == ["0-source.json"]
    assert follower.epoch == leader.epoch == 0
    assert leader.reportLatestOffset() is not None
    report = follower.reportLatestOffset()
    assert report is not None and report["barriered"]["mirror"] is True
    # Asked from a start the leader did not plan, the follower fails loudly.
    with pytest.raises(MirrorError, match="latest decision"):
        follower.latestOffset(SourceOffset(positions=(0, 0)).to_dict(), ReadAllAvailable())


def test_a_late_instance_is_another_query_and_is_refused(tmp_path: Path) -> None:
    """Once the leader planned its second batch the group is sealed: a new instance of the
    same loaded stream (a second query started on the same DataFrame) is refused as any
    other query, writing nothing."""
    snap = tmp_path / "snap"
    source = BarrieredDataSource(options(snap))
    leader = reader(source)
    start = leader.initialOffset()
    start = leader.latestOffset(start, ReadAllAvailable())
    leader.latestOffset(start, ReadAllAvailable())
    plan = json.loads((snap / "_coordinator" / "mirror" / "0-plan.json").read_text())
    assert plan["sealed"] is True and plan["followers"] == []
    before = tree(snap)
    with pytest.raises(SnapshotPathInUseError, match="is in use by a running query"):
        reader(source).initialOffset()
    assert tree(snap) == before


def test_two_separately_loaded_sources_in_one_query_are_refused(tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    first = reader(BarrieredDataSource(options(snap)))
    first.initialOffset()
    before = tree(snap)
    with pytest.raises(MirrorError, match="two barriered sources loaded separately") as refused:
        reader(BarrieredDataSource(options(snap))).initialOffset()
    assert "use that one DataFrame on every side" in str(refused.value)
    assert tree(snap) == before


def test_a_reader_of_another_driver_is_not_a_sibling(tmp_path: Path) -> None:
    """Same loaded source id, same host, another parent process: not the same run."""
    snap = tmp_path / "snap"
    source = BarrieredDataSource(options(snap))
    leader = reader(source)
    leader.initialOffset()
    layout = SnapshotLayout.at(str(snap))
    me = mirror.RunIdentity.current(source.source_id)
    other = mirror.RunIdentity(me.source, me.host, "1:0")
    assert mirror.Follower.join(layout, 0, other) is None
    assert mirror.Follower.join(layout, 0, me) is not None


_IDENTITY = (
    "import json, sys; from barriered.datasource.mirror import RunIdentity; "
    "print(json.dumps(RunIdentity.current('s').__dict__))"
)


def _identity_of_child(nested: bool) -> dict[str, str]:
    code = _IDENTITY
    if nested:  # a grandchild: its parent is another process than ours
        code = (
            "import subprocess, sys; sys.stdout.write(subprocess.run([sys.executable, '-c', "
            f"{_IDENTITY!r}], capture_output=True, text=True, check=True).stdout)"
        )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def test_two_workers_of_one_process_share_the_run_identity() -> None:
    """Spark starts every reader process of a query from the driver JVM: two children of
    one process share the identity, a process started elsewhere does not."""
    a, b, elsewhere = _identity_of_child(False), _identity_of_child(False), _identity_of_child(True)
    assert a == b
    assert a["jvm"].split(":")[1] != "", "the parent's start time is read from /proc"
    assert elsewhere["jvm"] != a["jvm"]


def test_two_planning_sources_in_one_progress_are_refused_naming_both() -> None:
    one = {"snapshotPath": "/a", "epoch": 0}
    assert offsets.two_sources_refusal([one, {"snapshotPath": "/a", "mirror": True}]) is None
    message = offsets.two_sources_refusal([one, {"snapshotPath": "/b", "epoch": 3}])
    assert message is not None and message.startswith(offsets.TWO_SOURCES_PREFIX)
    assert "snapshotPath '/a' (epoch 0) and snapshotPath '/b' (epoch 3)" in message


def test_the_coordinator_reads_the_leaders_report() -> None:
    """progress.sources lists both instances (the mirror first here): the listener takes
    the leader's report, whose delivered positions the coordinator measures."""
    from types import SimpleNamespace

    from barriered.coordinator.listener import _barriered_sources

    def source(report: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(latestOffset=json.dumps({"barriered": report}))

    mirrored = {"snapshotPath": "/a", "epoch": 0, "mirror": True, "delivered": [1]}
    leading = {"snapshotPath": "/a", "epoch": 0, "available": [2], "delivered": [1]}
    progress = SimpleNamespace(sources=[source(mirrored), SimpleNamespace(latestOffset=None)])
    progress.sources.append(source(leading))
    found = _barriered_sources(progress)
    assert [r for _, r in found] == [leading, mirrored]
