"""``barriered savepoint rescale``: a savepoint written again with another maxParallelism,
without Spark.

The savepoint is made from a snapshot path whose keyed operator and provider store were
committed as the coordinator commits them (the keyed state's key groups are Spark's
``hash`` of the key, computed here; the second checkpoint replaces some key groups, so
the first file is read through its deletion vector). The rescaled savepoint must hold
exactly the same keys and values, each in ``pmod(hash, N)``; the source is unchanged
byte for byte; bad input is refused, naming the option or path, writing nothing.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from barriered import cli
from barriered.config import BarrieredConf
from barriered.errors import ConfigError, RescaleError
from barriered.files.fileio import write_json
from barriered.state_processor import rescale
from barriered.statestore import checkpoints_table, operators
from barriered.statestore.acks import write_data_file
from barriered.statestore.delta_tables import as_json, commit_files, scan
from barriered.statestore.key_groups import spark_hash
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.regroup import check_keys
from barriered.statestore.restore_point import resolve
from barriered.statestore.savepoints import export
from file_tree import digests
from snapshots import commit_state, registration, state_file, state_rows

OLD = 128
USERS = [f"user-{i}" for i in range(300)]
STORE = "0-default"
STORE_FILE = pa.schema(
    [
        pa.field("hash", pa.int32(), nullable=False),
        pa.field("key", pa.struct([("user_id", pa.string())]), nullable=False),
        pa.field("value", pa.struct([("count", pa.int64())])),
    ]
)


def _hash(user: str) -> int:
    return spark_hash([user], ["string"])


def _state(users: list[str], totals: list[int], cid: int) -> pa.Table:
    rows = state_rows(users, totals, cid)
    groups = pa.array([_hash(u) % OLD for u in users], pa.int32())
    return rows.set_column(rows.schema.get_field_index("key_group"), "key_group", groups)


def _store(layout: SnapshotLayout, cid: int) -> dict[str, Any]:
    """The provider's store of a count per user, in 2 store partitions, committed."""
    files = []
    for part in (0, 1):
        users = [u for u in USERS if _hash(u) % 2 == part]
        for group in sorted({_hash(u) % OLD for u in users}):
            mine = [u for u in users if _hash(u) % OLD == group]
            table = pa.table(
                {
                    "hash": pa.array([_hash(u) for u in mine], pa.int32()),
                    "key": [{"user_id": u} for u in mine],
                    "value": [{"count": len(u)} for u in mine],
                },
                schema=STORE_FILE,
            )
            values = {"key_group": str(group), "store_partition": str(part)}
            files.append(write_data_file(layout.operator_table(STORE), values, f"c{cid}", table))
    schema = STORE_FILE.append(pa.field("key_group", pa.int32()))
    schema = schema.append(pa.field("store_partition", pa.int32()))
    version = commit_files(
        layout.operator_table(STORE), schema, operators.PARTITIONS, cid, files
    ).version
    return {"version": version, "key_schema": "{}", "value_schema": "{}", "watermark_ms": None}


def _commit(layout: SnapshotLayout, cid: int, files: list[Any], stores: dict[str, Any]) -> None:
    metadata = {
        "barriered.kind": "savepoint",
        "barriered.mode": "aligned",
        "barriered.barrier": as_json({"0": 10 * cid, "1": 5 * cid}),
        "barriered.inflight": as_json({}),
        "barriered.inflight_version": None,
        operators.VERSIONS_KEY: as_json(stores),
    }
    version = commit_state(layout, cid, files, metadata)
    checkpoints_table.append(
        layout,
        {"checkpoint_id": cid, "kind": "savepoint", "mode": "aligned", "status": "completed",
         "state_table_version": version,
         "barrier_positions": as_json({"0": 10 * cid, "1": 5 * cid})},
    )  # fmt: skip


@pytest.fixture
def savepoint(tmp_path: Path) -> tuple[str, dict[str, int]]:
    """A savepoint (of checkpoint 2) and the state it holds: user -> total."""
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    conf = BarrieredConf(snapshot_path=layout.root, max_parallelism=OLD)
    write_json(
        layout.config_file,
        {"conf": conf.to_dict(), "channels": 2, "upstream": {"upstream": "rate"}},
    )
    write_json(layout.operator_file("op"), {**registration("op", OLD), "partitions": 200})
    totals = {u: i for i, u in enumerate(USERS)}
    first = state_file(layout, _state(USERS, list(totals.values()), 1), 1, range(OLD))
    _commit(layout, 1, [first], {STORE: _store(layout, 1)})
    # checkpoint 2 writes every key of a third of the key groups again: the first file's
    # rows of them are deleted (its deletion vector)
    changed = [u for u in USERS if _hash(u) % OLD % 3 == 0]
    totals.update({u: 1000 + totals[u] for u in changed})
    groups = sorted({_hash(u) % OLD for u in changed})
    second = state_file(layout, _state(changed, [totals[u] for u in changed], 2), 2, groups)
    _commit(layout, 2, [second], {STORE: _store(layout, 2)})
    saved = export(layout, None, str(tmp_path / "sp"))
    return saved.path, totals


def _state_of(path: str) -> tuple[dict[str, int], dict[str, int]]:
    """user -> total and user -> key group of the savepoint's checkpoint."""
    layout = SnapshotLayout.at(path)
    (row,) = checkpoints_table.read_rows(layout)
    table = scan(DeltaTable(layout.state_table, version=row["state_table_version"])).to_pylist()
    assert len({r["user_id"] for r in table}) == len(table)
    return {r["user_id"]: r["total"] for r in table}, {r["user_id"]: r["key_group"] for r in table}


def _store_of(path: str) -> Counter[tuple[int, str, int, int]]:
    """(hash, user, count, key group) of every row of the store at the savepoint."""
    point = resolve(SnapshotLayout.at(path), "latest", None)
    version = operators.stores_of(point.metadata)[STORE]["version"]
    rows = DeltaTable(SnapshotLayout.at(path).operator_table(STORE), version=version)
    return Counter(
        (r["hash"], r["key"]["user_id"], r["value"]["count"], r["key_group"])
        for r in rows.to_pyarrow_table().to_pylist()
    )


@pytest.mark.parametrize("new", [512, 64, 100])
def test_every_key_moves_to_its_new_key_group_and_the_source_stays(
    savepoint: tuple[str, dict[str, int]], tmp_path: Path, new: int
) -> None:
    source, totals = savepoint
    before = digests(source)
    store_before = _store_of(source)
    saved = rescale(source, str(tmp_path / f"sp-{new}"), new)
    assert digests(source) == before
    assert saved.checkpoint_id == 2
    state, groups = _state_of(saved.path)
    assert state == totals
    assert groups == {u: _hash(u) % new for u in USERS}
    store = _store_of(saved.path)
    assert Counter((h, u, c, h % new) for h, u, c, _ in store_before.elements()) == store
    out = Path(saved.path)
    for f in (out / "operators" / STORE).rglob("*.parquet"):  # the provider's folders
        group = int(f.parent.parent.name.removeprefix("key_group="))
        hashes = pa.parquet.read_table(f, partitioning=None)["hash"].to_pylist()
        assert {h % new for h in hashes} == {group}
    config = json.loads((out / "_coordinator" / "config.json").read_text())
    assert config["conf"]["max_parallelism"] == new
    reg = json.loads((out / "_coordinator" / "operators" / "op.json").read_text())
    assert (reg["max_parallelism"], reg["partitions"]) == (new, min(200, new))
    marker = json.loads((out / "_savepoint.json").read_text())
    assert (marker["max_parallelism"], marker["rescaled_from"]) == (new, OLD)
    assert marker["origin"] == str(tmp_path / "snap")  # the lineage, not the copy
    point = resolve(SnapshotLayout.at(str(tmp_path / "new-snap")), saved.path)
    point.check_files()
    assert point.barrier == (20, 10)
    point.check_config(BarrieredConf(max_parallelism=new))
    with pytest.raises(ConfigError, match=f"maxParallelism={new}"):
        point.check_config(BarrieredConf(max_parallelism=OLD))


def test_a_rescaled_savepoint_rescales_again_back_to_the_same_state(
    savepoint: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    source, totals = savepoint
    wide = rescale(source, str(tmp_path / "wide"), 1000)
    back = rescale(wide.path, str(tmp_path / "back"), OLD)
    state, groups = _state_of(back.path)
    assert state == totals and groups == {u: _hash(u) % OLD for u in USERS}
    assert _store_of(back.path) == _store_of(source)


@pytest.mark.parametrize(
    ("value", "message"),
    [(0, "got 0"), (-3, "got -3"), (1 << 15 | 1, "got 32769"), (True, "got True"),
     ("12", "got '12'")],
)  # fmt: skip
def test_a_max_parallelism_out_of_range_is_refused(
    savepoint: tuple[str, dict[str, int]], tmp_path: Path, value: Any, message: str
) -> None:
    source, _ = savepoint
    before = digests(tmp_path)
    with pytest.raises(RescaleError, match=f"max_parallelism must be .* 1 to 32768.*{message}"):
        rescale(source, str(tmp_path / "out"), value)
    assert digests(tmp_path) == before and not (tmp_path / "out").exists()


def test_a_source_that_is_not_a_savepoint_or_a_target_that_exists_is_refused(
    savepoint: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    source, _ = savepoint
    (tmp_path / "empty").mkdir()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("mine")
    before = digests(tmp_path)
    cases = [
        (str(tmp_path / "snap"), "out", "is a snapshot path: it has no _savepoint.json"),
        (str(tmp_path / "empty"), "out", "is not a savepoint folder"),
        (str(tmp_path / "nowhere"), "out", "does not exist"),
        (source, "empty", "target .*empty' exists"),
        (source, "taken", "target .*taken' exists"),
        (source, "sp/inner", "is inside the savepoint"),
    ]
    for src, target, message in cases:
        with pytest.raises(RescaleError, match=message):
            rescale(src, str(tmp_path / target), 64)
        assert digests(tmp_path) == before
    assert not (tmp_path / "out").exists()


def test_a_key_type_without_a_python_hash_is_refused_unless_groups_merge() -> None:
    reg = {**registration("op", OLD), "key_schema": "amount decimal(10,2)"}
    with pytest.raises(RescaleError, match=r"operator .op.: key column .amount. has type .decimal"):
        check_keys({"op": reg}, 100)
    check_keys({"op": reg}, 32)  # 32 divides 128: each key's group is its old one mod 32


def test_the_command_line(
    savepoint: tuple[str, dict[str, int]], tmp_path: Path, capsys: Any
) -> None:
    source, totals = savepoint
    out = tmp_path / "cli"
    code = cli.main(["savepoint", "rescale", source, "-o", str(out), "--max-parallelism", "0"])
    assert code == 1
    err = capsys.readouterr().err
    assert "barriered: error: --max-parallelism must be a whole number" in err
    assert not out.exists()
    code = cli.main(["savepoint", "rescale", source, "-o", str(out), "--max-parallelism", "x"])
    assert code == 1 and "got 'x'" in capsys.readouterr().err
    code = cli.main(["savepoint", "rescale", source, "-o", str(out), "--max-parallelism", "256"])
    assert code == 0
    assert "with maxParallelism 256" in capsys.readouterr().out
    assert _state_of(str(out))[0] == totals
    assert cli.main(["savepoint", "rescale", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: barriered savepoint rescale")


def test_state_of_an_unregistered_operator_is_refused(
    savepoint: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    source, _ = savepoint
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    (copy / "_coordinator" / "operators" / "op.json").unlink()
    with pytest.raises(RescaleError, match=r"keyed operator\(s\) \['op'\] that are not registered"):
        rescale(str(copy), str(tmp_path / "out"), 64)
    assert not (tmp_path / "out").exists()
