"""A barriered query with Spark's own stateful operators is refused on its first batch.

Their state is not in any barriered snapshot, so a restore would silently restart them
from empty: the query fails with a message naming the operator before any checkpoint
completes. The aggregation case runs by default; the other operators are in the full
matrix (``-m full``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

import barriered
from barriered.examples import RunningTotals
from barriered.files.fileio import exists
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.stateful_operators import OPERATORS
from foreign_state import CountRows, CountRowsRow, count_per_key
from runs import MODES, PREFIX, SOURCE

pytestmark = pytest.mark.spark


def other_stream(spark: Any) -> DataFrame:
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "5")
        .load()
        .select(F.concat(F.lit("user-"), F.col("value") % 25).alias("user_id"))
    )


Plan = Callable[[DataFrame, Any], DataFrame]

#: operator progress name -> (words the message must hold, how to build it, output mode)
CASES: dict[str, tuple[str, Plan, str]] = {
    "stateStoreSave": (
        "a streaming aggregation",
        lambda ev, s: barriered.records(ev).groupBy("user_id").count(),
        "update",
    ),
    "dedupe": (
        "dropDuplicates()",
        lambda ev, s: barriered.records(ev).dropDuplicates(["user_id"]),
        "append",
    ),
    "dedupeWithinWatermark": (
        "dropDuplicatesWithinWatermark()",
        lambda ev, s: (
            barriered.records(ev)
            .withColumn("ts", F.current_timestamp())
            .withWatermark("ts", "10 seconds")
            .dropDuplicatesWithinWatermark(["user_id"])
        ),
        "append",
    ),
    "symmetricHashJoin": (
        "a stream-stream join",
        lambda ev, s: barriered.records(ev).join(other_stream(s), "user_id"),
        "append",
    ),
    "applyInPandasWithState": (
        "applyInPandasWithState() not made by barriered.keyed()",
        lambda ev, s: (
            barriered.records(ev)
            .groupBy("user_id")
            .applyInPandasWithState(
                count_per_key,
                "user_id string, n long",
                "n long",
                "Update",
                GroupStateTimeout.NoTimeout,
            )
        ),
        "update",
    ),
    "sessionWindowStateStoreSaveExec": (
        "a session window aggregation",
        lambda ev, s: (
            barriered.records(ev)
            .withColumn("ts", F.current_timestamp())
            .withWatermark("ts", "10 seconds")
            .groupBy(F.session_window("ts", "5 seconds"), "user_id")
            .count()
        ),
        "append",
    ),
    "transformWithStateInPandasExec": (
        "transformWithStateInPandas()",
        lambda ev, s: (
            barriered.keyed(ev, "user_id")
            .process(RunningTotals())
            .groupBy("user_id")
            .transformWithStateInPandas(CountRows(), "user_id string, n long", "Append", "None")
        ),
        "append",
    ),
    "transformWithStateInPySparkExec": (
        "transformWithState() (Row-based)",
        lambda ev, s: (
            barriered.records(ev)
            .groupBy("user_id")
            .transformWithState(CountRowsRow(), "user_id string, n long", "Append", "None")
        ),
        "append",
    ),
    "globalLimit": (
        "a streaming limit()",
        lambda ev, s: barriered.records(ev).limit(100),
        "append",
    ),
}


def refused(session: Any, tmp_path: Path, operator: str) -> None:
    words, build, output_mode = CASES[operator]
    for key, value in MODES["aligned"].items():
        session.conf.set(PREFIX + key, value)
    snap = str(tmp_path / "snap")
    events = session.readStream.format("barriered").options(**SOURCE).option("snapshotPath", snap)
    query = (
        build(events.load(), session)
        .writeStream.format("noop")
        .outputMode(output_mode)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()  # not availableNow: the refusal alone must end the query
    )
    message = ""
    try:
        query.awaitTermination(120)
    except Exception as failure:  # Spark wraps the source's error
        message = str(failure)
    finally:
        query.stop()
    assert message, "the query was not refused within 120 s"
    assert "UnsupportedOperatorError" in message
    assert "state outside the snapshot: the query runs " in message
    assert f"{OPERATORS[operator]} ({operator})" in message and words in message
    assert "barriered.keyed(df, *keys).process(processor)" in message
    layout = SnapshotLayout.at(snap)
    assert checkpoints_table.completed(layout) == []  # no checkpoint completed without it
    assert not exists(layout.state_table)


def test_a_streaming_aggregation_is_refused(session: Any, tmp_path: Path) -> None:
    refused(session, tmp_path, "stateStoreSave")


@pytest.mark.full
@pytest.mark.parametrize("operator", [op for op in CASES if op != "stateStoreSave"])
def test_other_stateful_operators_are_refused(session: Any, tmp_path: Path, operator: str) -> None:
    refused(session, tmp_path, operator)
