"""``barriered inspect PATH --key``: where one key lives, on a real snapshot path (no Spark).

The checkpoint is committed by a real QueryCoordinator from the acknowledgements the
keyed operator would publish; the key group arithmetic itself is checked against the
JVM in ``tests/integration/test_key_groups_spark.py``.
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from barriered import cli
from barriered.barrier import Mode
from barriered.config import BarrieredConf
from barriered.control.offsets import Cut, SourceOffset, StartedCheckpoint
from barriered.coordinator.driver import QueryCoordinator
from barriered.files.fileio import write_json
from barriered.statestore.acks import Ack, DataFile, state_participant, write_ack
from barriered.statestore.key_groups import key_group_for_key, shuffle_partition, spark_hash
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_schema import file_schema
from snapshots import state_file

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


# --partitions places a key group in the partition whose range holds it.
OP = {
    **registration("op", KEY_SCHEMA, [("k", "string"), ("n", "integer")]),
    "partitions": 2,
}


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


def configured_path(tmp_path: Path) -> SnapshotLayout:
    """A snapshot path with its resolved configuration (GROUPS key groups)."""
    lay = SnapshotLayout.at(str(tmp_path / "snap"))
    conf = BarrieredConf(
        snapshot_path=lay.root, checkpoint_interval_ms=3_600_000, max_parallelism=GROUPS
    )
    write_json(lay.config_file, {"conf": conf.to_dict(), "channels": 1})
    return lay


def cut_checkpoint_1(lay: SnapshotLayout) -> QueryCoordinator:
    """A coordinator that has seen checkpoint 1 cut at position 5 (awaiting its acks)."""
    qc = QueryCoordinator(lay, epoch=None)
    now = int(time.time() * 1000)
    started = StartedCheckpoint(1, "checkpoint", Mode.ALIGNED, (5,), now)
    offset = SourceOffset(
        positions=(5,),
        last_id=1,
        started=(started,),
        cut=Cut(1, "checkpoint", "aligned", (5,), (), None, now),
    )
    qc.on_progress(0, None, offset.to_dict(), None, 0)
    return qc


@pytest.fixture()
def layout(tmp_path: Path) -> SnapshotLayout:
    """A snapshot path with one completed checkpoint of operator ``op`` holding KEYS."""
    lay = configured_path(tmp_path)
    write_json(lay.operator_file("op"), OP)
    qc = cut_checkpoint_1(lay)
    for kg in range(GROUPS):
        mine = [(k, n) for k, n in KEYS if group_of(k, n) == kg]
        table = pa.table(
            {
                "k": [k for k, _ in mine],
                "n": [n for _, n in mine],
                "total": [10 * n for _, n in mine],
                "key_group": [kg] * len(mine),
                "checkpoint_id": [1] * len(mine),
            },
            schema=file_schema(OP),
        )
        f = state_file(lay, table, 1)
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
        assert (found["key_group"], found["partition"]) == (group, group * 3 // GROUPS)
        assert found["partition"] == shuffle_partition(group, 3, GROUPS)
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
        layout.operator_file("op"), registration("op", "p decimal(10,0)", [("p", "decimal(10,0)")])
    )
    before = tree(layout.root)
    assert cli.main(["inspect", layout.root, "--key", "3"]) == 1
    err = capsys.readouterr().err
    assert "key column 'p' has type 'decimal(10,0)'" in err
    assert "pmod(hash(p), maxParallelism)" in err
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


STORE = "0-default"
TIME = pa.timestamp("us", "UTC")
WINDOW_KEY = pa.struct(
    [("window", pa.struct([("start", TIME), ("end", TIME)])), ("user_id", pa.string())]
)
COUNT = pa.struct([("count", pa.int64())])
STORE_KEY_JSON = json.dumps(
    _struct(
        ("window", _struct(("start", "timestamp"), ("end", "timestamp"))), ("user_id", "string")
    )
)
UTC = datetime.timezone.utc
NINE = datetime.datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
FIVE = datetime.timedelta(minutes=5)
WINDOWS = [(NINE + i * FIVE, user) for i in range(3) for user in ("u1", "u2", "u3")]


def window_hash(start: datetime.datetime, user: str) -> int:
    return spark_hash([start, start + FIVE, user], ["timestamp", "timestamp", "string"])


@pytest.fixture()
def store_layout(tmp_path: Path) -> SnapshotLayout:
    """A snapshot path whose one completed checkpoint holds a windowed count's store
    ``0-default`` (written by two store partitions, as the JVM provider writes it)."""
    lay = configured_path(tmp_path)
    registration = {
        "operator": STORE,
        "partitions": 2,
        "epoch": None,
        "key_schema": STORE_KEY_JSON,
        "value_schema": json.dumps(_struct(("count", "long"))),
        "partition_key_columns": 2,
    }
    write_json(f"{lay.stores_dir}/{STORE}.json", registration)
    qc = cut_checkpoint_1(lay)
    for part in range(2):
        files, groups = [], []
        for group in range(GROUPS):
            mine = [(s, u) for s, u in WINDOWS if window_hash(s, u) % GROUPS == group]
            mine = [(s, u) for s, u in mine if window_hash(s, u) % 2 == part]
            if not mine:
                continue
            rel = f"key_group={group}/store_partition={part}/c1-{group}.parquet"
            path = Path(lay.operator_table(STORE)) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            table = pa.table(
                {
                    "hash": pa.array([window_hash(s, u) for s, u in mine], pa.int32()),
                    "key": pa.array(
                        [{"window": {"start": s, "end": s + FIVE}, "user_id": u} for s, u in mine],
                        WINDOW_KEY,
                    ),
                    "value": pa.array([{"count": 10 + i} for i, _ in enumerate(mine)], COUNT),
                }
            )
            pq.write_table(table, path)
            pv: dict[str, str | None] = {"key_group": str(group), "store_partition": str(part)}
            files.append(DataFile(rel, path.stat().st_size, len(mine), pv, 0))
            groups.append(group)
        extra: dict[str, Any] = {
            "operator": STORE,
            "store_partition": part,
            "partitions": 2,
            "full": True,
            "changed_groups": groups,
            "key_schema": STORE_KEY_JSON,
            "value_schema": registration["value_schema"],
        }
        ack = Ack(1, f"operator/{STORE}/{part}", True, tuple(files), extra=extra)
        write_ack(lay, ack)
    qc.between_batches(tick=False)
    assert qc.status(1) == ("completed", None)
    return lay


def test_a_key_of_a_spark_operator_store_is_found_with_its_row(
    store_layout: SnapshotLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    for start, user in WINDOWS:
        end = start + FIVE
        argv = ["inspect", store_layout.root, "--operator", STORE, "--key", start.isoformat(),
                "--key", end.isoformat(), "--key", user, "--partitions", "2", "--json"]  # fmt: skip
        assert cli.main(argv) == 0
        found = json.loads(capsys.readouterr().out)
        h = window_hash(start, user)
        assert (found["hash"], found["key_group"], found["partition"]) == (h, h % GROUPS, h % 2)
        assert found["operator"] == STORE and found["max_parallelism"] == GROUPS
        (row,) = found["state_rows"]
        assert row["key"]["user_id"] == user and row["store_partition"] == h % 2
        assert datetime.datetime.fromisoformat(row["key"]["window"]["start"]) == start
    # a window that holds nothing (same hash bucket possible, no row of that key)
    late = (NINE + 7 * FIVE).isoformat().replace("+00:00", "Z")
    naive = (NINE + 8 * FIVE).replace(tzinfo=None).isoformat()  # no offset: UTC
    argv = ["inspect", store_layout.root, "--operator", STORE, "--key", f"{late},{naive},u1"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert f"key window.start={late}, window.end={naive}, user_id=u1 of operator {STORE}" in text
    assert "checkpoint 1: no state for this key" in text
    # the path's only state is this store: --operator may be left out
    start, user = WINDOWS[4]
    assert cli.main(["inspect", store_layout.root, "--key", f"{start},{start + FIVE},{user}"]) == 0
    assert f"of operator {STORE}: key group {window_hash(start, user) % GROUPS} of" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--key", "u1"], "1 key value(s) ['u1'] for 3 key column(s) (window.start timestamp"),
        (
            ["--key", "9am,10am,u1"],
            "key value '9am' is not a timestamp for key column 'window.start'",
        ),
        (
            ["--key", "u1", "--operator", "1-default"],
            "it has the Spark operator stores ['0-default']",
        ),
    ],
)
def test_a_store_key_that_cannot_be_located_is_refused(
    store_layout: SnapshotLayout, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    before = tree(store_layout.root)
    assert cli.main(["inspect", store_layout.root, "--operator", STORE, *argv]) == 1
    assert message in capsys.readouterr().err
    assert tree(store_layout.root) == before
