"""A keyed processor's contract on real Spark: state fields of every type Delta stores
round-trip into a checkpoint's typed state table; a processor breaking the contract fails
the query with a message naming the processor, the method and the contract, and no
checkpoint commits (the input is untouched)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

import barriered
from barriered.errors import ConfigError, ProcessorError
from barriered.files.fileio import exists
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from file_tree import tree
from runs import FILES_SOURCE, MODES, run, start, write_files
from typed_processors import EVERY_TYPE, VALUES, DropsTotal, KeepsEveryType, KeepsKeysTwice

pytestmark = pytest.mark.spark


def test_state_fields_of_every_type_reach_the_typed_state_table(
    session: Any, tmp_path: Path
) -> None:
    users = write_files(tmp_path / "data", {"ch0": 30, "ch1": 30})
    source = {**FILES_SOURCE, "path": str(tmp_path / "data")}
    conf = MODES["aligned"]
    _, layout = run(session, tmp_path, conf, source, final=(30, 30), processor=KeepsEveryType())
    state = barriered.state_table(session, layout.root, operator="keeps_every_type")
    types = dict(state.dtypes)
    assert [types[n] for n, _, _ in EVERY_TYPE] == [
        "int", "boolean", "double", "string", "binary", "date", "timestamp", "timestamp_ntz",
        "decimal(12,3)", "array<bigint>", "map<string,bigint>",
        "struct<n:bigint,tags:array<string>>",
    ]  # fmt: skip
    rows = state.select(
        "user_id",
        *[n for n, _, _ in EVERY_TYPE if n not in ("ts", "ntz")],
        F.unix_micros("ts").alias("ts"),
        F.col("ntz").cast("string").alias("ntz"),
    ).collect()
    assert sorted(r.user_id for r in rows) == sorted(users)
    expected = {
        **VALUES,
        "ts": int(VALUES["ts"].timestamp()) * 1_000_000 + 6,
        "ntz": "2026-01-02 03:04:05.000006",
    }
    for row in rows:
        got = row.asDict(recursive=True)
        assert {n: got[n] for n in expected} == expected, got["user_id"]


@pytest.mark.parametrize(
    ("processor", "message"),
    [
        (
            DropsTotal(),
            "processor DropsTotal (operator 'drops_total'): process_batch() returned output "
            "that lacks output column(s) ['total'] and has column(s) ['totl'] that "
            "output_schema does not declare",
        ),
        pytest.param(
            KeepsKeysTwice(),
            "processor KeepsKeysTwice (operator 'keeps_keys_twice'): process_batch() returned "
            "a new_state that holds the key {'user_id': 'user-",
            marks=pytest.mark.full,
        ),
    ],
)
def test_a_processor_breaking_its_contract_fails_the_query_naming_it(
    session: Any, tmp_path: Path, processor: Any, message: str
) -> None:
    data = tmp_path / "data"
    write_files(data, {"ch0": 30, "ch1": 30})
    before = tree(data)
    source = {**FILES_SOURCE, "path": str(data)}
    query = start(session, tmp_path, MODES["aligned"], source=source, processor=processor)
    with pytest.raises(ProcessorError) as error:  # the error first, Spark's after
        barriered.await_termination(query, 120)
    first = str(error.value).splitlines()[0]
    assert first.startswith(message)
    assert "The contract: process_batch(rows, state) returns a tuple" in first
    assert isinstance(error.value.spark_error, StreamingQueryException)
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    assert checkpoints_table.completed(layout) == []
    assert not exists(layout.state_table)
    assert tree(data) == before


class WaitsPerKey(KeepsEveryType):
    """Declares a state field of a type the keyed state cannot hold."""

    state_schema = "total bigint, waited interval day to second"


def test_a_state_field_of_an_unsupported_type_is_refused_at_process(
    session: Any, tmp_path: Path
) -> None:
    write_files(tmp_path / "data", {"ch0": 3})
    before = tree(tmp_path)
    events = (
        session.readStream.format("barriered")
        .options(**{**FILES_SOURCE, "path": str(tmp_path / "data")})
        .option("snapshotPath", str(tmp_path / "snap"))
        .load()
    )
    with pytest.raises(ConfigError) as error:
        barriered.keyed(events, "user_id").process(WaitsPerKey())
    assert str(error.value).startswith(
        "processor WaitsPerKey (operator 'waits_per_key'): state_schema field 'waited': keyed "
        "state cannot hold the Spark type 'interval day to second'"
    )
    assert tree(tmp_path) == before
