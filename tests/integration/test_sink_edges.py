"""The ``barriered-delta`` sink at its edges, on real Spark: every column type Delta
stores round-trips; a bad sink option and a table with other columns are refused by
``start()`` (this process is the driver: see ``barriered.sink.writer.before_start``),
writing nothing (the keyed operator is registered once a run of its stream started); a
stream from another source and a table another query owns are refused when the query's
first batch starts, writing nothing to the table or the input; a query refused for a bad
sink option, rerun fixed on the same checkpoint location with another keyed operator,
completes its checkpoints with exactly one run's output.

Spark creates a sink's writer only when the first batch starts, after the barriered
source planned it: a query refused then has had its source take the snapshot path (its
run's ``_owners``/``_coordinator`` files), but the sink stages nothing, and no
checkpoint, state or output is written.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import StreamingQueryException

import barriered
from barriered.errors import ConfigError, SinkError
from barriered.examples import RecordNumbers, RunningTotals
from barriered.sink import owner
from barriered.statestore.layout import SnapshotLayout
from file_tree import tree
from runs import (
    FILES_SOURCE,
    MODES,
    PREFIX,
    SOURCE,
    expected_output,
    output_rows,
    run,
    start,
    upstream,
    wait_final_checkpoint,
    write_files,
)

pytestmark = pytest.mark.spark
UTC = dt.timezone.utc

#: One column per type Delta stores, computed from each record of the rate upstream.
TYPED = {
    "channel": "_channel",
    "seq": "_seq",
    "tiny": "cast(_channel as tinyint)",
    "small": "cast(_seq as smallint)",
    "whole": "cast(_seq as int)",
    "half": "cast(amount as float) / 2",
    "third": "cast(amount as double) / 4",
    "even": "_seq % 2 = 0",
    "user": "user_id",
    "at": "timestamp_seconds(_seq * 3600 + _channel)",
    "local": "cast(timestamp_seconds(_seq * 3600) as timestamp_ntz)",
    "day": "date_add(date'2024-02-28', cast(_seq as int))",
    "price": "cast(amount / 8 as decimal(12, 3))",
    "raw": "cast(user_id as binary)",
    "pair": "array(_seq, amount)",
    "tags": "map(user_id, amount)",
    "nested": "named_struct('seq', _seq, 'at', timestamp_seconds(_seq), 'xs', array(user_id))",
}


def expected_typed() -> list[dict[str, Any]]:
    rows = []
    for channel, end in enumerate(upstream().available()):
        records = upstream().read(channel, 0, end).to_pylist()
        for seq, r in enumerate(records):
            at = dt.datetime.fromtimestamp(seq * 3600 + channel, UTC)
            rows.append(
                {
                    "channel": channel,
                    "seq": seq,
                    "tiny": channel,
                    "small": seq,
                    "whole": seq,
                    "half": r["amount"] / 2,
                    "third": r["amount"] / 4,
                    "even": seq % 2 == 0,
                    "user": r["user_id"],
                    "at": at,
                    "local": dt.datetime.fromtimestamp(seq * 3600, UTC).replace(tzinfo=None),
                    "day": dt.date(2024, 2, 28) + dt.timedelta(days=seq),
                    "price": (Decimal(r["amount"]) / 8).quantize(Decimal("0.001")),
                    "raw": r["user_id"].encode(),
                    "pair": [seq, r["amount"]],
                    "tags": [(r["user_id"], r["amount"])],
                    "nested": {
                        "seq": seq,
                        "at": dt.datetime.fromtimestamp(seq, UTC),
                        "xs": [r["user_id"]],
                    },
                }
            )
    return sorted(rows, key=lambda r: (r["channel"], r["seq"]))


def test_every_type_delta_stores_round_trips(session: Any, tmp_path: Path) -> None:
    snap, out = str(tmp_path / "snap"), str(tmp_path / "out")
    events = session.readStream.format("barriered").options(**SOURCE)
    events = events.option("snapshotPath", snap).load()
    query = (
        barriered.records(events)
        .selectExpr(*(f"{sql} AS {name}" for name, sql in TYPED.items()))
        .writeStream.format("barriered-delta")
        .options(path=out, snapshotPath=snap)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    layout = SnapshotLayout.configured(snap)
    wait_final_checkpoint(layout, tuple(upstream().available()), query)
    table = DeltaTable(out)
    got = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: (r["channel"], r["seq"]))
    assert got == expected_typed()
    # Spark reads the same values back from the table's files
    files = [uri.removeprefix("file://") for uri in table.file_uris()]
    back = session.read.parquet(*files).orderBy("channel", "seq").collect()
    # (PySpark collects a timestamp as a naive datetime in the local time zone)
    assert [r["at"].astimezone(UTC) for r in back] == [r["at"] for r in got]
    assert [r["local"] for r in back] == [r["local"] for r in got]
    assert [r.asDict(recursive=True) for r in back][5]["nested"]["xs"] == got[5]["nested"]["xs"]
    assert {r["price"] for r in back} == {r["price"] for r in got}


def refused(query: Any) -> str:
    """The message a query failed with when its first batch started."""
    with pytest.raises(StreamingQueryException) as err:
        query.awaitTermination()
    return str(err.value)


def sink_wrote_nothing(snap: Path) -> None:
    """A query refused at its first batch: its source's run files only (see the
    docstring): nothing staged (``_sink``), no state, no checkpoint."""
    assert {p.name for p in snap.iterdir()} <= {"_coordinator", "_owners", "_source"}


def snapshot_files(snap: Path) -> list[str]:
    return sorted(str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file())


def test_a_stream_from_another_source_is_refused(session: Any, tmp_path: Path) -> None:
    out, snap = tmp_path / "out", tmp_path / "snap"
    query = (
        session.readStream.format("rate")
        .load()
        .writeStream.format("barriered-delta")
        .options(path=str(out), snapshotPath=str(snap))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    message = refused(query)
    assert (
        f"barriered.errors.SinkError: barriered-delta sink 'out': no barriered source ever "
        f"read with snapshot path {str(snap)!r}. Nothing was written. The sink writes the "
        "output of a stream read with spark.readStream.format('barriered')"
    ) in message
    assert not out.exists() and not snap.exists()


@pytest.fixture(scope="module")
def owned(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Issue 27, case 3: a query refused at its first batch for ``mode='upsert'``, then
    rerun fixed on the same snapshot path and checkpoint location, to its end. Issue 36,
    case 1: the refused query ran another keyed operator (running totals, for the update
    mode it meant), whose registration made every checkpoint of the rerun wait for it
    forever."""
    barriered.install(spark)
    tmp = tmp_path_factory.mktemp("owned")
    conf = {**MODES["aligned"], "checkpointInterval": "10ms", "maxParallelism": "8"}
    sink = {"path": str(tmp / "out")}
    with pytest.raises(ConfigError) as err:  # by start(), this process being the driver
        start(spark, tmp, conf, processor=RunningTotals(), sink={**sink, "mode": "upsert"})
    message = f"barriered.errors.ConfigError: {err.value}"
    after_refusal = tree(tmp / "out"), snapshot_files(tmp / "snap")
    query, layout = run(spark, tmp, conf, processor=RecordNumbers(), sink=sink)
    barriered.await_termination(query)
    for key in [k for k in spark.conf.getAll if k.startswith("spark.sql.streaming.barriered.")]:
        spark.conf.unset(key)
    return {"tmp": tmp, "message": message, "after_refusal": after_refusal, "layout": layout}


def test_a_rerun_after_a_refused_sink_option_completes_its_checkpoints(
    owned: dict[str, Any],
) -> None:
    assert (
        "barriered.errors.ConfigError: barriered-delta sink option 'mode': invalid value "
        "'upsert'" in owned["message"]
    )
    # nothing at all: keyed().process() registers the operator once a run started
    assert owned["after_refusal"] == ({}, [])
    out = owned["tmp"] / "out"
    assert output_rows(str(out)) == expected_output(
        "append", dict(enumerate(upstream().available()))
    )
    assert not list((owned["tmp"] / "snap" / "_sink" / "out").glob("e*/*.json"))


def test_a_second_query_on_the_table_is_refused(
    session: Any, owned: dict[str, Any], tmp_path: Path
) -> None:
    out = owned["tmp"] / "out"
    data = tmp_path / "data"
    write_files(data, {"c0": 30})
    before = tree(out), tree(data)
    source = {**FILES_SOURCE, "path": str(data)}
    query = start(
        session,
        tmp_path,
        MODES["aligned"],
        source,
        processor=RecordNumbers(),
        sink={"path": str(out)},
    )
    message = refused(query)
    owner = owned["layout"].root
    assert (
        f"barriered.errors.SinkError: barriered-delta sink 'out' of snapshot path "
        f"{SnapshotLayout.at(str(tmp_path / 'snap')).root!r}: the output table {str(out)!r} "
        f"belongs to sink 'out' of another query (snapshot path {owner!r}, table property "
        "'barriered.sink.owner.out')"
    ) in message
    assert "Give this sink its own id (option sinkId)" in message
    assert (tree(out), tree(data)) == before
    sink_wrote_nothing(tmp_path / "snap")


def test_a_table_with_other_columns_is_refused(session: Any, tmp_path: Path) -> None:
    out, data = tmp_path / "out", tmp_path / "data"
    write_deltalake(str(out), pa.table({"a": pa.array([1], pa.int32()), "b": ["x"]}))
    write_files(data, {"c0": 30})
    before = tree(out), tree(data)
    source = {**FILES_SOURCE, "path": str(data)}
    sink = {"path": str(out), "adoptTable": "true"}
    with pytest.raises(SinkError) as err:  # by start(): nothing under the snapshot path
        start(session, tmp_path, MODES["aligned"], source, processor=RecordNumbers(), sink=sink)
    assert (
        f"barriered-delta sink: the output table {str(out)!r} "
        "does not have the query's output columns: a (only in the table); b (only in the "
        "table); user_id (only in the output); n (only in the output)"
    ) in str(err.value)
    assert (tree(out), tree(data)) == before
    assert snapshot_files(tmp_path / "snap") == []


@pytest.mark.full
def test_a_restore_onto_a_new_snapshot_path_takes_the_table_over(
    session: Any, tmp_path: Path
) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    sizes = {"a": 60, "b": 30, "c": 30}
    write_files(data, sizes, tag="first")
    source, sink = {**FILES_SOURCE, "path": str(data)}, {"path": str(out)}
    _, first = run(
        session, tmp_path, MODES["aligned"], source, str(tmp_path / "snap-a"), (60, 30, 30),
        processor=RecordNumbers(), sink=sink,
    )  # fmt: skip
    write_files(data, sizes, tag="second")
    _, restored = run(
        session, tmp_path, {}, {**source, "restoreFrom": first.root}, str(tmp_path / "snap-b"),
        (120, 60, 60), "ck-b", processor=RecordNumbers(), sink=sink,
    )  # fmt: skip
    users = Counter(json.loads(line)["user_id"] for f in data.rglob("*.json") for line in f.open())
    assert output_rows(str(out)) == sorted(
        (u, n) for u, c in users.items() for n in range(1, c + 1)
    )
    assert owner.owners(DeltaTable(str(out))) == {"out": restored.root}


def test_marker_rows_of_a_stream_written_as_it_is_are_not_output(
    session: Any, tmp_path: Path
) -> None:
    """A stateless query that writes the barriered stream itself (no
    ``barriered.records``) gets its records in the table, not the checkpoints' marker
    rows (null user columns, one per key group and checkpoint)."""
    data, out, snap = tmp_path / "data", tmp_path / "out", tmp_path / "snap"
    expected = write_files(data, {"c0": 30, "c1": 12})
    session.conf.set(PREFIX + "snapshotPath", str(snap))
    stream = session.readStream.format("barriered").options(**FILES_SOURCE)
    query = (
        stream.option("path", str(data))
        .load()
        .writeStream.format("barriered-delta")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(out))
    )
    barriered.await_termination(query, timeout=120)
    rows = DeltaTable(str(out)).to_pyarrow_table().to_pylist()
    assert len(rows) == 42 and all(r["_barrier"] is None for r in rows)
    totals: Counter[str] = Counter()
    for r in rows:
        totals[r["user_id"]] += r["amount"]
    assert totals == expected
