"""Exactly-once output: the ``barriered-delta`` sink across a driver crash and a restore.

Each crash is real: a driver process runs the query until a blocking fault
(:mod:`barriered.testing.faults`) holds it at the chosen point, then the test SIGKILLs
that process by its pid. The restore runs here (``restoreFrom=latest``, a new
checkpoint location, 3 shuffle partitions instead of 2) into the same output table, which
must then hold exactly what one uninterrupted run writes: no row missing, none twice.
A second reader polling the table during a run sees only whole checkpoints' output.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

import barriered
from barriered.statestore.layout import SnapshotLayout
from barriered.testing import faults
from runs import (
    MODES,
    PREFIX,
    SOURCE,
    commit_metadata,
    expected_output,
    kill_driver_when,
    output_rows,
    run,
    sink_query,
    start,
    state_counts,
    upstream,
    wait_final_checkpoint,
)

pytestmark = pytest.mark.spark
FULL = pytest.mark.full
DRIVER = Path(__file__).with_name("sink_driver.py")

#: "Before the cut": aligned modes crash while aligning; unaligned has no alignment, so
#: its crash comes in the cut batch, before the in-flight writer acknowledged.
BEFORE_CUT = {
    "aligned": faults.ALIGNING,
    "aligned_with_timeout": faults.ALIGNING,
    "unaligned": faults.INFLIGHT_CAPTURE,
}
#: The default suite's case (mode update's is test_s3_recovery's, on the S3 server).
REPRESENTATIVE = ("append", "unaligned", faults.AFTER_COMMIT)
CASES = [
    pytest.param(kind, mode, point, marks=() if (kind, mode, point) == REPRESENTATIVE else (FULL,))
    for kind in ("append", "update")
    for mode in ("aligned", "unaligned", "aligned_with_timeout")
    for point in (
        BEFORE_CUT[mode],
        faults.BEFORE_COMMIT,
        faults.AFTER_COMMIT,
        faults.AFTER_SINK_COMMIT,
    )
]


def everything() -> dict[int, int]:
    return dict(enumerate(upstream().available()))


def sink_versions(out: Path) -> dict[int, int]:
    """Checkpoint id -> the output table's version that committed its output."""
    if not (out / "_delta_log").exists():
        return {}
    return {
        int(h["barriered.checkpoint_id"]): int(h["version"])
        for h in DeltaTable(str(out)).history()
        if "barriered.checkpoint_id" in h
    }


def crash_driver(
    tmp_path: Path,
    kind: str,
    mode: str,
    point: str,
    snap: str | None = None,
    out: str | None = None,
    conf: dict[str, str] | None = None,
    source: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run the query in a driver process until the fault at ``point`` holds it (from
    checkpoint 2 on), SIGKILL the driver; return the fault's record. ``snap`` and ``out``
    default to folders of ``tmp_path``; ``conf`` adds session keys (short names);
    ``source`` replaces the source options (default: ``runs.SOURCE``)."""
    snap = snap or str(tmp_path / "snap")
    faults.inject(snap, point, checkpoint_id=2, action=faults.BLOCK)
    out = out or str(tmp_path / "out")
    args = [snap, str(tmp_path), out, kind, mode]
    return kill_driver_when(
        DRIVER,
        args,
        tmp_path / "driver.out",
        lambda: faults.fired(snap, point),
        env={
            "BARRIERED_TEST_CONF": json.dumps(conf or {}),
            "BARRIERED_TEST_SOURCE": json.dumps(source or {}),
        },
    )


@pytest.mark.parametrize(("kind", "mode", "point"), CASES)
def test_output_after_a_crash_and_restore_is_exactly_one_runs(
    session: Any, tmp_path: Path, kind: str, mode: str, point: str
) -> None:
    out = tmp_path / "out"
    fired = crash_driver(tmp_path, kind, mode, point)
    crashed_at = fired["checkpoint_id"]
    layout = SnapshotLayout.configured(str(tmp_path / "snap"))
    committed, written = commit_metadata(layout), sink_versions(out)
    if point == faults.AFTER_COMMIT:
        # completed (the state commit) while its output is still only staged
        assert crashed_at in committed and crashed_at not in written
    if point == faults.AFTER_SINK_COMMIT:
        assert crashed_at in committed and crashed_at in written
    if point in (faults.BEFORE_COMMIT, BEFORE_CUT[mode]):
        assert crashed_at not in committed and crashed_at not in written
    if point in (faults.BEFORE_COMMIT, faults.AFTER_COMMIT):  # the cut batch's output at least
        staged = list((tmp_path / "snap" / "_sink" / "out").glob("e*/*.json"))
        assert staged, "the crashed run left its output staged, not committed"

    processor, sink = sink_query(kind, str(out))
    session.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        source = {**SOURCE, "restoreFrom": "latest"}
        restored = start(
            session, tmp_path, MODES[mode], source, None, "ck-restored", processor, sink
        )
        restored.awaitTermination()
        wait_final_checkpoint(layout, tuple(upstream().available()), restored, after_id=crashed_at)
    finally:
        session.conf.set("spark.sql.shuffle.partitions", "2")
    if point == faults.AFTER_COMMIT:  # the restored run finished the crashed run's commit
        assert crashed_at in sink_versions(out)
    assert output_rows(str(out)) == expected_output(kind, everything())


def test_a_reader_sees_only_whole_checkpoints(session: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    seen: dict[int, list[tuple[str, int]]] = {}
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            if os.path.isdir(os.path.join(out, "_delta_log")):
                table = DeltaTable(out)
                if table.version() not in seen:
                    seen[table.version()] = output_rows(out, table.version())
            time.sleep(0.02)

    reader = threading.Thread(target=poll, daemon=True)
    reader.start()
    processor, sink = sink_query("append", out)
    try:
        _, layout = run(session, tmp_path, MODES["unaligned"], processor=processor, sink=sink)
    finally:
        done.set()
        reader.join(timeout=30)
    by_version = {v: cid for cid, v in sink_versions(Path(out)).items()}
    state = commit_metadata(layout)
    assert len(seen) >= 3, f"the reader saw only versions {sorted(seen)}"
    history = DeltaTable(out).history()
    recorded = {int(h["version"]) for h in history if h.get("barriered.owner_recorded")}
    assert recorded == {1}  # the sink's owner, recorded after the table's creation
    for version, rows in seen.items():
        # every other version is one checkpoint's commit; the owner's record changes no row
        checkpoint = by_version[version - 1 if version in recorded else version]
        counts = state_counts(layout, int(state[checkpoint]["version"]))
        expected = sorted((user, n) for user, c in counts.items() for n in range(1, c + 1))
        assert rows == expected, f"version {version} is not checkpoint {checkpoint}'s output"
    assert output_rows(out) == expected_output("append", everything())


def test_a_restore_from_an_older_checkpoint_takes_the_output_back(
    session: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    processor, sink = sink_query("append", str(out))
    run(session, tmp_path, MODES["aligned"], processor=processor, sink=sink)
    written = sink_versions(out)
    assert len(written) >= 2, f"only checkpoints {sorted(written)} wrote output"
    older, latest = sorted(written)[-2:]  # the older of the last two with output
    assert output_rows(str(out), written[older]) != output_rows(str(out))
    processor, sink = sink_query("append", str(out))
    source = {**SOURCE, "restoreFrom": str(older)}
    run(
        session,
        tmp_path,
        MODES["aligned"],
        source,
        None,
        None,
        "ck-restored",
        latest,
        processor,
        sink,
    )
    assert output_rows(str(out)) == expected_output("append", everything())
    rewinds = [h for h in DeltaTable(str(out)).history() if "barriered.rewind_to" in h]
    assert [(h["operation"], h["barriered.rewind_to"]) for h in rewinds] == [
        ("RESTORE", written[older])
    ]


def test_the_sink_takes_the_snapshot_path_from_the_session(session: Any, tmp_path: Path) -> None:
    out, snap = tmp_path / "out", str(tmp_path / "snap")
    processor, _ = sink_query("update", str(out))
    for key, value in MODES["unaligned"].items():
        session.conf.set(PREFIX + key, value)
    session.conf.set(PREFIX + "snapshotPath", snap)
    try:
        events = session.readStream.format("barriered").options(**SOURCE).load()
        query = (
            barriered.keyed(events, "user_id")
            .process(processor)
            .writeStream.format("barriered-delta")
            .options(path=str(out), mode="update", keyColumns="user_id")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        wait_final_checkpoint(SnapshotLayout.configured(snap), tuple(upstream().available()), query)
    finally:
        session.conf.unset(PREFIX + "snapshotPath")
    assert output_rows(str(out)) == expected_output("update", everything())
    paths = {h.get("barriered.snapshot_path") for h in DeltaTable(str(out)).history()}
    assert paths == {SnapshotLayout.configured(snap).root}
