"""A running query rescaled in one call (``barriered.managed(start).rescale(n)``), on
local Spark.

The query numbers each user's records with ``barriered.keyed`` (``RecordNumbers``) into
the ``barriered-delta`` sink (and, in the full suite, the ``barriered-kafka`` sink) while
files keep arriving: the n-th record of a user is
written as ``(user, n)``, so the output table holds every record exactly once only if
nothing was lost or doubled across the savepoint, the stop and the restored run at the
new partition count. The Delta sink's run asks for the rescale from the command line
(``barriered rescale PATH --partitions N`` in its own process, as for a query a script
started), the Kafka sink's through the API. Refusals leave the query running as it was,
and write nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import barriered
from barriered.errors import RescaleError
from barriered.managed_query import ManagedQuery, Run
from barriered.sink.kafka import publisher
from barriered.statestore import checkpoints_table, rescales_table
from barriered.statestore.layout import SnapshotLayout
from rescale_runs import DeltaOutput, KafkaOutput, numbered, numbering, wait_for
from runs import FILES_SOURCE, PREFIX, state_counts, write_records

pytestmark = pytest.mark.spark

SOURCE = {**FILES_SOURCE, "maxRowsPerChannel": "40"}
CONF = {"checkpointInterval": "200ms", "unaligned.enabled": "false", "maxParallelism": "8"}


def _starter(session: Any, tmp: Path, output: Any, source: dict[str, str] = SOURCE) -> Any:
    def events(run: Run) -> Any:
        return (
            session.readStream.format("barriered")
            .options(**source, path=str(tmp / "data"), **run.source_options)
            .option("snapshotPath", str(tmp / "snap"))
            .load()
        )

    return numbering(events, tmp / "snap", output)


def _refused(handle: ManagedQuery, partitions: Any, message: str) -> None:
    """A rescale to ``partitions`` is refused naming ``message``: the same run goes on."""
    run_id = handle.query.runId
    with pytest.raises(RescaleError, match=message):
        handle.rescale(partitions)
    assert handle.query.isActive and handle.query.runId == run_id


@pytest.mark.parametrize(
    "session",
    ["classic", pytest.param("connect", marks=[pytest.mark.connect, pytest.mark.full])],
    indirect=True,
)
def test_a_running_query_rescales_exactly_once_into_the_delta_sink(
    session: Any, tmp_path: Path
) -> None:
    """The rescale is asked for from the command line (``barriered rescale``), as for a
    query a script started."""
    _rescaled_exactly_once(session, tmp_path, DeltaOutput(tmp_path), _by_the_command_line)


@pytest.mark.full
@pytest.mark.kafka
def test_a_running_query_rescales_exactly_once_into_the_kafka_sink(
    session: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    try:
        _rescaled_exactly_once(session, tmp_path, KafkaOutput(kafka_broker))
    finally:
        publisher.close()


def _by_the_api(handle: ManagedQuery, partitions: int) -> Callable[[], dict[str, Any]]:
    """``handle.rescale(partitions)`` started in a thread; the function waits for it."""
    done: dict[str, Any] = {}
    rescaling = threading.Thread(target=lambda: done.update(row=handle.rescale(partitions)))
    rescaling.start()

    def result() -> dict[str, Any]:
        rescaling.join(300)
        return dict(done["row"])

    return result


def _command(*words: str) -> list[str]:
    return [sys.executable, "-m", "barriered", *words]


def _by_the_command_line(handle: ManagedQuery, partitions: int) -> Callable[[], dict[str, Any]]:
    """``barriered rescale SNAPSHOT --partitions N --json`` in its own process (as from a
    shell, for the query a script started); the function waits for it."""
    path = str(_layout(handle).root)
    # a refusal the handle answers: the command fails with the handle's reason
    refused = subprocess.run(
        _command("rescale", path, "--partitions", "9"), capture_output=True, text=True
    )
    assert refused.returncode == 1 and "has maxParallelism 8 key groups" in refused.stderr
    mailbox = Path(path) / "_coordinator" / "rescale"  # no request or answer stays behind
    assert not list(mailbox.iterdir()) and rescales_table.read_rows(_layout(handle)) == []
    process = subprocess.Popen(
        _command("rescale", path, "--partitions", str(partitions), "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def result() -> dict[str, Any]:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        row: dict[str, Any] = json.loads(out)
        assert row["reason"] == "requested by barriered rescale (command line)"
        return row

    return result


def _layout(handle: ManagedQuery) -> SnapshotLayout:
    return barriered.api.query_coordinator(handle.query, timeout=30.0)[1].layout


def _rescaled_exactly_once(
    session: Any,
    tmp_path: Path,
    output: Any,
    rescale: Callable[[ManagedQuery, int], Callable[[], dict[str, Any]]] = _by_the_api,
) -> None:
    """Rescale 2 -> 3 partitions while files arrive; refusals first; the sink's output
    and the keyed state then hold every record exactly once."""
    for key, value in CONF.items():
        session.conf.set(PREFIX + key, value)
    counts = write_records(tmp_path / "data", "first", 200, 13)
    start = _starter(session, tmp_path, output)
    handle = barriered.managed(start, str(tmp_path / "ck"), session, 2)
    try:
        layout = SnapshotLayout.configured(str(tmp_path / "snap"))
        wait_for("a checkpoint with output", output.started)
        _refused(handle, 0, "partitions must be a whole number >= 1, got 0")
        _refused(handle, 9, "has maxParallelism 8 key groups")
        _refused(handle, 2, "runs at 2 partitions already")
        with pytest.raises(RescaleError, match=r"was not started by barriered\.managed"):
            barriered.rescale(_Plain(), 3)
        assert rescales_table.read_rows(layout) == []

        counts += write_records(
            tmp_path / "data", "second", 200, 13
        )  # records flow during the rescale
        rescaled = rescale(handle, 3)
        wait_for("rescaling", lambda: handle.rescaling, 10)
        with pytest.raises(RescaleError, match=r"a rescale of query .* is running"):
            handle.rescale(4)
        row = rescaled()
        counts += write_records(tmp_path / "data", "third", 100, 13)
        wait_for("all records written once", lambda: output.rows() == numbered(counts))
    finally:
        handle.stop()
    # no handle runs any more: the command refuses, and writes nothing
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "snap").rglob("*"))
    refused = subprocess.run(
        _command("rescale", str(tmp_path / "snap"), "--partitions", "4"),
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 1, refused.stderr
    assert "no query started by barriered.managed(start, ...) runs on" in refused.stderr
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "snap").rglob("*")) == before
    assert (row["from_partitions"], row["to_partitions"], row["max_parallelism"]) == (2, 3, 8)
    assert row["to_checkpoint_location"].endswith("/run-1")
    assert 0 <= row["pause_ms"] < 60_000
    history = checkpoints_table.completed(layout)
    kinds = {r["checkpoint_id"]: r["kind"] for r in history}
    assert kinds[row["savepoint_id"]] == "savepoint"
    assert row["restored_checkpoint_id"] >= row["savepoint_id"]
    assert rescales_table.read_rows(layout) == [row]
    assert layout.registrations()["record_numbers"]["partitions"] == 3
    last = history[-1]
    assert state_counts(layout, last["state_table_version"]) == dict(counts)
    assert output.rows() == numbered(counts)


class _Plain:
    """A query no handle started."""

    id = "not-managed"


@pytest.mark.full
def test_autoscaling_doubles_the_partitions_while_the_backlog_stays_high(
    session: Any, tmp_path: Path
) -> None:
    """``autoscale.*`` set: a backlog far above the bound at 2 completed checkpoints in a
    row doubles 1 partition to 2 (once: the cool-down is an hour); every record is in the
    output exactly once."""
    autoscale = {
        "autoscale.enabled": "true",
        "autoscale.scaleUpBacklog": "50",
        "autoscale.checkpoints": "2",
        "autoscale.coolDown": "1h",
        "autoscale.maxPartitions": "4",
    }
    for key, value in {**CONF, **autoscale}.items():
        session.conf.set(PREFIX + key, value)
    counts = write_records(tmp_path / "data", "first", 600, 13)
    output = DeltaOutput(tmp_path)
    start = _starter(session, tmp_path, output, {**SOURCE, "maxRowsPerChannel": "10"})
    handle = barriered.managed(start, str(tmp_path / "ck"), session, 1)
    try:
        layout = SnapshotLayout.configured(str(tmp_path / "snap"))
        (row,) = wait_for("an autoscaling rescale", lambda: rescales_table.read_rows(layout))
        wait_for("all records written once", lambda: output.rows() == numbered(counts))
    finally:
        handle.stop()
    assert (row["from_partitions"], row["to_partitions"]) == (1, 2)
    assert row["reason"].startswith(
        "autoscale: backlog above autoscale.scaleUpBacklog=50 at 2 checkpoints in a row"
    )
    assert rescales_table.read_rows(layout) == [row]
    assert layout.registrations()["record_numbers"]["partitions"] == 2
