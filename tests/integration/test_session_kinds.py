"""Classic and Spark Connect sessions alike: every session key reaches the source, the
coordinator's listener is checked, and a query whose coordinator is lost fails loudly."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import barriered
from barriered.config import KEYS, PREFIX, resolve
from barriered.control.columns import BARRIER, META_MAX_PARALLELISM
from barriered.control.record import ControlRecord
from barriered.errors import ConfigError
from barriered.files.fileio import read_json
from barriered.monitoring import hub
from barriered.session import listener_registered
from barriered.statestore.layout import SnapshotLayout
from runs import BOTH

pytestmark = pytest.mark.spark

#: A value for every key but unaligned.enabled (checked apart: it needs exactlyOnce),
#: none of them the default.
NON_DEFAULT = {
    "checkpointInterval": "1234ms",
    "checkpointTimeout": "9min",
    "minPauseBetweenCheckpoints": "7ms",
    "maxConcurrentCheckpoints": "2",
    "tolerableCheckpointFailures": "5",
    "mode": "atLeastOnce",
    "unaligned.adaptive": "false",
    "alignedCheckpointTimeout": "3s",
    "maxParallelism": "16",
    "snapshotPath": "<set per test>",
    "snapshotStorageOptions": '{"timeout": "120s"}',
    "retainedCheckpoints": "7",
    "inflight.capture": "reference",
    "bufferPerChannel": "123",
    "coordinatorTimeout": "5min",
    "leaseTimeout": "3min",
    "retention.minAge": "11min",
    "retention.historySize": "77",
    "retention.maintenanceInterval": "3",
    "provider.changeDetection": "digest",
    "keyed.writeBufferSize": "16m",
    "keyed.maxRuns": "5",
    "keyed.localCacheSize": "2g",
    "keyed.localCacheDir": "<set per test>",
    "metrics.prometheusPort": "0",
    "metrics.host": "127.0.0.1",
    "metrics.openTelemetry": "true",
    "autoscale.enabled": "true",
    "autoscale.minPartitions": "2",
    "autoscale.maxPartitions": "8",
    "autoscale.scaleUpBacklog": "5000",
    "autoscale.scaleDownBacklog": "50",
    "autoscale.checkpoints": "4",
    "autoscale.coolDown": "7min",
}
RATE = {"upstream": "rate", "channels": "2", "rowsPerSecond": "0", "rowsPerChannel": "30"}


@BOTH
def test_a_refused_source_is_the_barriered_error_first(session: Any, tmp_path: Path) -> None:
    """A classic load() refuses in the driver; a Spark Connect load() is lazy and the
    data source's worker refuses when keyed() reads the schema: the user sees the
    ConfigError, its message on the first line, on either session."""
    missing = tmp_path / "no-such-folder"
    reader = session.readStream.format("barriered").options(
        upstream="files", path=str(missing), snapshotPath=str(tmp_path / "snap")
    )
    with pytest.raises(ConfigError) as refused:
        barriered.keyed(reader.load(), "user_id")
    assert str(refused.value).splitlines()[0] == (
        f"upstream option 'path': directory {str(missing)!r} does not exist; create it"
    )


@BOTH
def test_every_session_key_reaches_the_source(session: Any, tmp_path: Path) -> None:
    assert {*NON_DEFAULT, "unaligned.enabled"} == {k.name for k in KEYS}
    keys = {
        **NON_DEFAULT,
        "snapshotPath": str(tmp_path / "snap"),
        "keyed.localCacheDir": str(tmp_path / "cache"),
    }
    for name, value in keys.items():  # only in the session: the source gets no such option
        session.conf.set(PREFIX + name, value)
    events = session.readStream.format("barriered").options(**RATE).load()
    assert events.schema[BARRIER].metadata[META_MAX_PARALLELISM] == 16
    query = (
        barriered.records(events)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query, timeout=120)
    hub.stop()  # the endpoint metrics.prometheusPort started in this process
    seen = read_json(SnapshotLayout.at(keys["snapshotPath"]).config_file)["conf"]
    expected = resolve({PREFIX + k: v for k, v in keys.items()}).to_dict()
    assert seen == expected
    defaults = resolve({PREFIX + "snapshotPath": "/elsewhere"}).to_dict()
    assert [f for f in seen if seen[f] == defaults[f] and f != "unaligned_enabled"] == []

    # unaligned.enabled arrives too: with mode=atLeastOnce the source refuses it by name.
    session.conf.set(PREFIX + "unaligned.enabled", "true")
    with pytest.raises(Exception, match=r"unaligned.enabled=true needs"):
        session.readStream.format("barriered").options(**RATE).load().schema  # noqa: B018


@BOTH
def test_a_lost_coordinator_fails_the_query_and_install_registers_a_new_one(
    session: Any, tmp_path: Path
) -> None:
    listener = barriered.install(session)
    assert listener_registered(session, listener) is True
    session.conf.set(PREFIX + "coordinatorTimeout", "1s")
    snap = str(tmp_path / "snap")
    events = (
        session.readStream.format("barriered")
        .options(upstream="rate", channels="2", rowsPerSecond="200")  # endless
        .option("snapshotPath", snap)
        .load()
    )
    query = (
        barriered.records(events)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        layout = SnapshotLayout.at(snap)
        deadline = time.monotonic() + 60
        while ControlRecord.read(layout).heartbeat is None:
            assert time.monotonic() < deadline, "the coordinator never handled a batch"
            time.sleep(0.1)
        session.streams.removeListener(listener)  # what a broken Connect event stream does
        assert listener_registered(session, listener) is False
        with pytest.raises(Exception, match="no checkpoint coordinator"):
            query.awaitTermination(60)
        assert "CoordinatorLostError" in str(query.exception())
    finally:
        query.stop()
    again = barriered.install(session)
    assert again is not listener
    assert listener_registered(session, again) is True
