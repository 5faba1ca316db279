"""``barriered inspect PATH --key``: where one key lives, on a real snapshot path (no Spark).

The checkpoint is committed by a real QueryCoordinator from the acknowledgements the
keyed operator would publish; the key group arithmetic itself is checked against the
JVM in ``tests/integration/test_key_groups_spark.py``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from barriered import cli
from barriered.config import BarrieredConf
from barriered.coordinator.driver import QueryCoordinator
from barriered.datasource.offsets import Cut, SourceOffset
from barriered.statestore.acks import Ack, state_participant, write_ack, write_data_file
from barriered.statestore.fileio import write_json
from barriered.statestore.key_groups import key_group_for_key, shuffle_partition
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_schema import file_schema

GROUPS = 4
KEY_SCHEMA = "k string, n int"


def _struct(*fields: tuple[str, str]) -> dict[str, object]:
    return {
        "type": "struct",
        "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields],
    }


def registration(
    name: str, key_schema: str, key_fields: list[tuple[str, str]]
) -> dict[str, object]:
    """A typed keyed operator registration with one state field ``total long``."""
    return {
        "operator": name,
        "key_columns": [n for n, _ in key_fields],
        "key_schema": key_schema,
        "state_schema": "total long",
        "output_schema": "total long",
        "max_parallelism": GROUPS,
        "key_type": _struct(*key_fields),
        "state_type": _struct(("total", "long")),
    }


OP = registration("op", KEY_SCHEMA, [("k", "string"), ("n", "integer")])


def tree(root: str) -> dict[str, tuple[int, int]]:
    base = Path(root)
    return {
        str(p.relative_to(base)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


def group_of(k: str, n: int) -> int:
    return key_group_for_key([k, n], ["string", "int"], GROUPS)


KEYS = [("a", 1), ("a", 2), ("b", 1), ("c", 7), ("d", -3)]


@pytest.fixture()
def layout(tmp_path: Path) -> SnapshotLayout:
    """A snapshot path with one completed checkpoint of operator ``op`` holding KEYS."""
    lay = SnapshotLayout.at(str(tmp_path / "snap"))
    conf = BarrieredConf(
        snapshot_path=lay.root, checkpoint_interval_ms=3_600_000, max_parallelism=GROUPS
    )
    write_json(lay.config_file, {"conf": conf.to_dict(), "channels": 1})
    write_json(lay.operator_file("op"), OP)
    qc = QueryCoordinator(lay, epoch=None)
    now = int(time.time() * 1000)
    started = {"id": 1, "mode": "aligned", "at_ms": now, "barrier": [5]}
    offset = SourceOffset(
        positions=(5,),
        last_id=1,
        started=(started,),
        cut=Cut(1, "checkpoint", "aligned", (5,), (), None, now),
    )
    qc.on_progress(0, None, offset.to_dict(), None, 0)
    for kg in range(GROUPS):
        mine = [(k, n) for k, n in KEYS if group_of(k, n) == kg]
        table = pa.table(
            {
                "k": [k for k, _ in mine],
                "n": [n for _, n in mine],
                "total": [10 * n for _, n in mine],
                "checkpoint_id": [1] * len(mine),
            },
            schema=file_schema(OP),
        )
        f = write_data_file(lay.state_table, {"operator": "op", "key_group": str(kg)}, "t", table)
        write_ack(lay, Ack(1, state_participant("op", kg), True, (f,), len(mine), f.size))
    qc.between_batches(tick=False)
    assert qc.status(1) == ("completed", None)
    return lay


def test_a_key_is_found_with_its_key_group_partition_and_state(
    layout: SnapshotLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    for k, n in KEYS:
        argv = ["inspect", layout.root, "--key", f"{k},{n}", "--partitions", "3", "--json"]
        assert cli.main(argv) == 0
        found = json.loads(capsys.readouterr().out)
        group = group_of(k, n)
        assert (found["key_group"], found["partition"]) == (group, shuffle_partition(group, 3))
        assert found["key"] == {"k": k, "n": str(n)} and found["checkpoint_id"] == 1
        (row,) = found["state_rows"]  # only this key, not the others of its key group
        assert row == {"key_group": group, "k": k, "n": n, "total": 10 * n, "checkpoint_id": 1}
    # One --key per column, and the text form.
    assert cli.main(["inspect", layout.root, "--key", "c", "--key", "7"]) == 0
    text = capsys.readouterr().out
    assert f"key k=c, n=7 of operator op: key group {group_of('c', 7)} of {GROUPS}" in text
    assert 'checkpoint 1: 1 state row(s)\n  {"checkpoint_id": 1' in text
    assert cli.main(["inspect", layout.root, "--key", "zz,9"]) == 0
    assert "checkpoint 1: no state for this key" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--key", "a"], "1 key value(s) ['a'] for 2 key column(s) (k string, n int)"),
        (["--key", "a,x"], "key value 'x' is not a int for key column 'n'"),
        (["--key", "a,1", "--operator", "other"], "has no keyed operator 'other'; it has ['op']"),
        (["--key", "a,1", "--partitions", "0"], "the number of partitions must be >= 1"),
    ],
)
def test_a_key_that_cannot_be_located_is_refused_and_nothing_changes(
    layout: SnapshotLayout, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    before = tree(layout.root)
    assert cli.main(["inspect", layout.root, *argv]) == 1
    assert message in capsys.readouterr().err
    assert tree(layout.root) == before


def test_an_unsupported_key_type_is_refused_naming_the_column(
    layout: SnapshotLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    write_json(
        layout.operator_file("op"), registration("op", "at timestamp", [("at", "timestamp")])
    )
    before = tree(layout.root)
    assert cli.main(["inspect", layout.root, "--key", "2024-01-01 00:00:00"]) == 1
    err = capsys.readouterr().err
    assert "key column 'at' has type 'timestamp'" in err
    assert "pmod(hash(at), maxParallelism)" in err
    assert tree(layout.root) == before


def test_several_operators_need_operator(
    layout: SnapshotLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    write_json(
        layout.operator_file("second"), registration("second", "k string", [("k", "string")])
    )
    assert cli.main(["inspect", layout.root, "--key", "a,1"]) == 1
    assert "keyed operators ['op', 'second']: choose one with --operator" in capsys.readouterr().err
    assert cli.main(["inspect", layout.root, "--key", "a", "--operator", "second"]) == 0
    found = capsys.readouterr().out
    assert f"key group {key_group_for_key(['a'], ['string'], GROUPS)} of {GROUPS}" in found
    assert "no state for this key" in found
