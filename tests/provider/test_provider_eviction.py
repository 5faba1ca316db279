"""State that Spark evicts as the watermark passes, under the barriered state store provider.

A windowed aggregation in append mode emits a window once the watermark passes its end
and removes it from the state; ``dropDuplicatesWithinWatermark`` removes a key once it
expired. A checkpoint whose store table kept a removed key would bring it back on
restore, and append mode would emit the window a second time. Each case runs the query
in a driver process into the exactly-once ``barriered-delta`` sink, SIGKILLs the driver
after a checkpoint cut past the first evictions, restores it (``restoreFrom=latest``) at
another parallelism into the same output table and runs it until a checkpoint covers the
batch that evicted with the final watermark (the last event time minus the delay). Then
(a) the output holds every emitted row exactly once with the batch computation's values,
(b) Spark's state reader shows exactly the keys the final watermark did not evict, and
(c) every completed checkpoint's store table at its recorded version equals Spark's state
reader at its cut batch, and a later one holds fewer rows than an earlier one (evictions
were captured). See ``queries.py`` for why the results are deterministic. The last test
makes a cut batch be followed by Spark's no-data batch, which repeats the cut's offset.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from queries import (
    CONF,
    MODES,
    PREFIX,
    QUERIES,
    SOURCE,
    expected_eviction,
    final_watermark,
    state_rows,
    stream,
    upstream,
)
from test_provider_recovery import _kill_after_checkpoint, _table_equals_state_reader

from barriered.control.record import ControlRecord
from barriered.statestore import checkpoints_table, operators
from barriered.statestore.layout import SnapshotLayout
from runs import commit_metadata, wait_final_checkpoint

pytestmark = [pytest.mark.spark, pytest.mark.provider]

#: The killed run's checkpoint is cut at channel 0's position 200 or beyond: the
#: watermark (at least the previous batch's position minus the delay) then passed the
#: end of the first two windows, which Spark emitted and removed from the state.
PAST = 200


def _start(
    spark: Any,
    tmp: Path,
    name: str,
    mode: str,
    partitions: int,
    out: Path | None,
    conf: dict[str, str] | None = None,
) -> Any:
    """Start query ``name`` (restored from the latest checkpoint when the killed run's
    ``ck1`` exists: into ``ck2``) on the provider, processingTime, into the
    ``barriered-delta`` sink at ``out`` (``noop`` without)."""
    for key, value in {**CONF, **MODES[mode], **(conf or {})}.items():
        spark.conf.set(PREFIX + key, value)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    restored = (tmp / "ck1").exists()
    events = spark.readStream.format("barriered").options(**SOURCE)
    events = events.option("snapshotPath", str(tmp / "snap"))
    if restored:
        events = events.option("restoreFrom", "latest")
    writer = stream(name, events.load()).writeStream.format("noop")
    if out is not None:
        writer = writer.format("barriered-delta").options(snapshotPath=str(tmp / "snap"))
        writer = writer.option("path", str(out))
    return (
        writer.outputMode(QUERIES[name][1])
        .option("checkpointLocation", str(tmp / ("ck2" if restored else "ck1")))
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def _offset(checkpoint: Path, batch: int) -> tuple[dict[str, Any], str]:
    """Spark's offset log entry of ``batch``: its metadata and the source's offset."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return json.loads(lines[1]), lines[2]


def _covered(tmp: Path, query: Any, checkpoint: Path, after: int) -> int:
    """Wait until a checkpoint above ``after`` completed (the coordinator's last act on it
    done) whose cut is at or after the batch that evicts with the final watermark, stop
    ``query``; return that checkpoint's id."""
    layout = SnapshotLayout.configured(str(tmp / "snap"))
    final_ms = round(final_watermark() * 1000)
    deadline = time.time() + 180
    while time.time() < deadline and query.isActive:
        batches = sorted(int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*"))
        final = [b for b in batches if _offset(checkpoint, b)[0]["batchWatermarkMs"] == final_ms]
        last = ControlRecord.read(layout).last_completed or 0
        for row in checkpoints_table.completed(layout) if final else []:
            cid = row["checkpoint_id"]
            if after < cid <= last and row["cut_batch_id"] >= final[0]:
                query.stop()
                return int(cid)
        time.sleep(0.3)
    raise AssertionError(f"no checkpoint covers the final watermark: {query.exception()}")


def _state_keys(spark: Any, checkpoint: str, name: str) -> set[Any]:
    """The keys Spark's state reader shows now: ``(window start s, user)``, ``(user, block)``."""
    keys = {k for k, _ in state_rows(spark, checkpoint)}
    if name == "window_append":
        return {(int(window[0].timestamp()), user) for window, user in keys}
    return keys


def _output(out: Path) -> list[tuple[Any, ...]]:
    table = DeltaTable(str(out)).to_pyarrow_table()
    return sorted(zip(*(table[c].to_pylist() for c in table.column_names), strict=True))


def _tables_equal_state_reader(
    spark: Any, tmp: Path, name: str, restored: int | None = None
) -> list[int]:
    """Each completed checkpoint holding the store: its table at its recorded version
    equals Spark's state reader at its cut batch (in ``ck1``, or in the restored run's
    ``ck2`` for ids above ``restored``); their row counts, in checkpoint order."""
    layout = SnapshotLayout.configured(str(tmp / "snap"))
    metadata = commit_metadata(layout)
    sizes = []
    for row in checkpoints_table.completed(layout):
        if not operators.stores_of(metadata[row["checkpoint_id"]]):
            continue  # cut before the first stateful batch committed
        later = restored is not None and row["checkpoint_id"] > restored
        sizes.append(_table_equals_state_reader(spark, tmp, row, name, "ck2" if later else "ck1"))
    return sizes


def _evicted_exactly_once(
    spark: Any, tmp: Path, name: str, mode: str, before: int, after: int
) -> None:
    out = tmp / "out"
    began = time.monotonic()
    _kill_after_checkpoint(tmp, name, mode, before, out=out, past=PAST)
    layout = SnapshotLayout.configured(str(tmp / "snap"))
    restored = max(r["checkpoint_id"] for r in checkpoints_table.completed(layout))
    query = _start(spark, tmp, name, mode, after, out)
    _covered(tmp, query, tmp / "ck2", restored)
    emitted, kept = expected_eviction(name)
    assert _output(out) == emitted  # (a) each row once, the batch computation's values
    assert _state_keys(spark, str(tmp / "ck2"), name) == kept  # (b)
    sizes = _tables_equal_state_reader(spark, tmp, name, restored)  # (c)
    assert any(sizes[j] < max(sizes[:j]) for j in range(1, len(sizes))), sizes
    print(f"{name} {mode} {before}->{after}: {time.monotonic() - began:.1f} s, rows {sizes}")


@pytest.mark.full  # each case takes about two minutes; the default run has the last test
@pytest.mark.parametrize(
    ("name", "mode", "before", "after"),
    [
        ("window_append", "unaligned", 2, 5),
        ("window_append", "aligned", 4, 3),
        ("window_append", "aligned", 2, 5),
        ("dedup_watermark", "unaligned", 2, 5),
        ("dedup_watermark", "aligned", 4, 3),
    ],
)
def test_evicted_exactly_once_after_sigkill(
    provider_spark: Any, tmp_path: Path, name: str, mode: str, before: int, after: int
) -> None:
    _evicted_exactly_once(provider_spark, tmp_path, name, mode, before, after)


def test_a_no_data_batch_repeating_a_cut_exports_nothing(
    provider_spark: Any, tmp_path: Path
) -> None:
    """Aligned, with every record inside the first checkpoint's barrier (the buffer holds
    the whole input): its cut is the batch delivering the last records, whose watermark
    makes Spark run a no-data batch next, with the same offsets, the cut's included. That
    batch evicts the windows the watermark passed; the provider must not export the
    checkpoint again there (it would record the evictions as exported, and the next
    checkpoint's table would keep the evicted windows). Every checkpoint's table equals
    Spark's state reader at its cut batch."""
    ck = tmp_path / "ck1"
    conf = {"bufferPerChannel": "2000", "minPauseBetweenCheckpoints": "2s"}
    query = _start(provider_spark, tmp_path, "window_append", "aligned", 2, None, conf)
    _covered(tmp_path, query, ck, 1)
    layout = SnapshotLayout.configured(str(tmp_path / "snap"))
    first = checkpoints_table.completed(layout)[0]
    cut = int(first["cut_batch_id"])
    assert _offset(ck, cut)[1] == _offset(ck, cut + 1)[1]  # the no-data batch repeats it
    sizes = _tables_equal_state_reader(provider_spark, tmp_path, "window_append")
    assert len(sizes) >= 2 and sizes[-1] < sizes[0], sizes


@pytest.mark.full
def test_available_now_commits_what_its_final_watermark_evicts(
    provider_spark: Any, tmp_path: Path
) -> None:
    """An availableNow run with no periodic checkpoint (interval 1 h): only the final one.
    Its output must hold every window the final watermark passed, the last one included."""
    spark, snap = provider_spark, str(tmp_path / "snap")
    for key, value in {**CONF, **MODES["aligned"], "checkpointInterval": "1h"}.items():
        spark.conf.set(PREFIX + key, value)
    events = spark.readStream.format("barriered").options(**SOURCE).option("snapshotPath", snap)
    query = (
        stream("window_append", events.load())
        .writeStream.format("barriered-delta")
        .options(snapshotPath=snap, path=str(tmp_path / "out"))
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "ck1"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    wait_final_checkpoint(SnapshotLayout.configured(snap), tuple(upstream().available()), query)
    assert _output(tmp_path / "out") == expected_eviction("window_append")[0]
