"""A checkpoint's keyed state is typed columns: Spark SQL and delta-rs read the same
totals a batch recount gives; a snapshot path of the JSON layout is refused at
``process()`` before anything is written."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

import barriered
from barriered.state_processor import read_state
from barriered.statestore import checkpoints_table
from runs import MODES, run, totals_before, upstream

pytestmark = pytest.mark.spark


def test_spark_sql_and_delta_rs_read_the_typed_state_of_a_batch_recount(
    session: Any, tmp_path: Path
) -> None:
    _, layout = run(session, tmp_path, MODES["unaligned"])
    final = checkpoints_table.completed(layout)[-1]
    expected = totals_before(dict(enumerate(upstream().available())))
    counts = _counts()

    barriered.state_table(session, layout.root).createOrReplaceTempView("barriered_state")
    rows = session.sql(
        "SELECT user_id, total, count FROM barriered_state WHERE operator = 'running_totals'"
    ).collect()
    assert {r["user_id"]: r["total"] for r in rows} == expected
    assert {r["user_id"]: r["count"] for r in rows} == counts
    one = barriered.state_table(session, layout.root, operator="running_totals")
    assert one.columns == ["key_group", "user_id", "total", "count", "checkpoint_id"]
    assert dict(one.dtypes)["total"] == "bigint" and dict(one.dtypes)["key_group"] == "int"

    # The Parquet files of the checkpoint's version, read by Spark itself: typed columns,
    # and older rows of changed keys that the version's deletion vectors delete, which the
    # state processor drops by file and row index (no Delta reader in this session).
    table = DeltaTable(layout.state_table, version=final["state_table_version"])
    files = [uri.removeprefix("file://") for uri in table.file_uris()]
    parquet = session.read.option("basePath", layout.state_table).parquet(*files)
    assert dict(parquet.dtypes)["total"] == "bigint"
    assert parquet.count() > len(expected)  # every checkpoint wrote the keys it changed
    state = read_state(session, layout.root, "running_totals", final["checkpoint_id"])
    assert {r["user_id"]: r["total"] for r in state.collect()} == expected

    # delta-rs alone (DataFusion SQL), no Spark.
    result = pa.table(
        QueryBuilder()
        .register("state", table)
        .execute("SELECT user_id, total FROM state WHERE operator = 'running_totals'")
        .read_all()
    )
    assert result.schema.field("total").type == pa.int64()
    assert dict(zip(result["user_id"].to_pylist(), result["total"].to_pylist(), strict=True)) == (
        expected
    )


def _counts() -> dict[str, int]:
    """Records per user over the whole upstream (the ``count`` field's recount)."""
    source = upstream()
    users = [
        u
        for channel, end in enumerate(source.available())
        for u in source.read(channel, 0, end)["user_id"].to_pylist()
    ]
    return dict(Counter(users))
