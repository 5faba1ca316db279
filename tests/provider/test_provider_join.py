"""A stream-stream join of one barriered stream with itself survives a driver SIGKILL and
restores at another parallelism, exactly, with the barriered state store provider.

With both sides keeping the stream's column names, Spark runs one instance of the
barriered source per side; the first plans and the other mirrors it
(``barriered.datasource.mirror``), so both sides are cut at the same batch and positions.
With the right side's columns renamed, Spark runs one instance for both sides. The join
keeps every row of both sides (no watermark): after the restored run, each side's state
equals that side's records (a batch computation).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from queries import JOIN_STORES, expected_join_sides, join_sides, state_rows
from test_provider_recovery import _kill_after_checkpoint, _restore

from barriered.statestore import operators
from barriered.statestore.layout import SnapshotLayout

pytestmark = [pytest.mark.spark, pytest.mark.provider]


def _tables_equal_state_reader(spark: Any, tmp: Path, row: dict[str, Any]) -> None:
    """Each of the join's four store tables at the checkpoint's recorded version holds
    exactly what Spark's state reader shows for that store at the cut batch."""
    layout = SnapshotLayout.configured(str(tmp / "snap"))
    history = DeltaTable(layout.state_table).history()
    meta = next(h for h in history if h.get("barriered.checkpoint_id") == row["checkpoint_id"])
    stores = operators.stores_of(meta)
    assert sorted(stores) == sorted(f"0-{s}" for s in JOIN_STORES)
    for name, info in stores.items():
        table = DeltaTable(layout.operator_table(name), version=info["version"])
        rows = table.to_pyarrow_table().to_pylist()
        exported = {(tuple(r["key"].values()), tuple(r["value"].values())) for r in rows}
        assert len(exported) == len(rows), name
        reader = state_rows(
            spark, str(tmp / "ck1"), int(row["cut_batch_id"]), store=name.split("-", 1)[1]
        )
        assert exported == reader, name
        assert exported, f"{name} is empty at the cut"


def _followers(tmp: Path, epoch: int) -> list[str]:
    """The mirroring instances the leader of ``epoch`` sealed its group with."""
    plan = json.loads((tmp / "snap" / "_coordinator" / "mirror" / f"{epoch}-plan.json").read_text())
    assert plan["sealed"] is True
    return list(plan["followers"])


def _recovered_exactly(
    spark: Any, tmp: Path, mode: str, before: int, after: int, name: str = "join"
) -> None:
    row = _kill_after_checkpoint(tmp, name, mode, before)
    if mode == "aligned":
        _tables_equal_state_reader(spark, tmp, row)
    _restore(spark, tmp, name, mode, after)
    # Both runs (killed: epoch 0, restored: epoch 1) read the stream through two source
    # instances, one mirroring the other; the renamed join through one.
    mirrors = 1 if name == "join" else 0
    assert [len(_followers(tmp, epoch)) for epoch in (0, 1)] == [mirrors, mirrors]
    got, expected = join_sides(spark, str(tmp / "ck2")), expected_join_sides(spark)
    assert got["left"] == expected["left"]
    assert got["right"] == expected["right"]
    assert set(got["left-partitions"]) == set(got["right-partitions"]) == set(range(after))


@pytest.mark.full  # 71 s; the default suite restores the provider's "mixed" query, and
# test_mirror.py runs a mirrored source instance
def test_a_self_join_restores_at_other_parallelism_after_sigkill(
    provider_spark: Any, tmp_path: Path
) -> None:
    _recovered_exactly(provider_spark, tmp_path, "aligned", 2, 5)


@pytest.mark.full
@pytest.mark.parametrize(
    ("name", "mode", "before", "after"),
    [
        ("join", "unaligned", 4, 3),
        ("join", "aligned", 4, 3),
        ("join", "unaligned", 2, 5),
        ("join_renamed", "aligned", 4, 3),
    ],
)
def test_a_self_join_restores_at_other_parallelism_full(
    provider_spark: Any, tmp_path: Path, name: str, mode: str, before: int, after: int
) -> None:
    _recovered_exactly(provider_spark, tmp_path, mode, before, after, name)
