"""The source and its upstream's manifest: loading writes nothing, and positions that a
snapshot path or restore point refers to are never re-derived from a new listing.

Every refusal is checked to name the manifest and to change no file of the snapshot path
(sizes and modification times). No Spark: the data source is driven directly.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from barriered import cli
from barriered.config import BarrieredConf
from barriered.config.source_options import SESSION_CONF_OPTION
from barriered.datasource.reader import BarrieredStreamReader
from barriered.datasource.source import BarrieredDataSource
from barriered.errors import ConfigError, RestoreError, SnapshotStoreError
from barriered.files.fileio import write_json
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve
from barriered.statestore.savepoints import export
from file_tree import tree
from snapshots import checkpoint


def write_rows(path: Path, tag: str, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"user_id": f"{tag}-{i}", "amount": i}) for i in range(count)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def options(data: Path, snap: Path, **extra: str) -> dict[str, str]:
    return {
        "upstream": "files",
        "path": str(data),
        "channels": "1",
        "snapshotPath": str(snap),
        SESSION_CONF_OPTION: "{}",  # what barriered.install's reader hook adds
        **extra,
    }


def start(opts: dict[str, str]) -> BarrieredStreamReader:
    """What Spark does when the query starts: schema(), streamReader(), initialOffset()."""
    source = BarrieredDataSource(opts)
    reader = source.streamReader(source.schema())
    assert isinstance(reader, BarrieredStreamReader)
    reader.initialOffset()
    return reader


def refused(opts: dict[str, str], snap: Path, error: type[Exception]) -> str:
    """Load the stream, and start it: both must fail, changing no file under ``snap``."""
    before = tree(snap)
    with pytest.raises(error) as loading:
        BarrieredDataSource(opts).schema()
    with pytest.raises(error):
        source = BarrieredDataSource(opts)
        source.streamReader(source.schema())
    assert tree(snap) == before, "a refusal changed the snapshot path"
    return str(loading.value)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    write_rows(folder / "b.json", "b", 3)
    return folder


def test_loading_writes_nothing_and_starting_writes_the_manifest(
    data: Path, tmp_path: Path
) -> None:
    snap = tmp_path / "snap"
    source = BarrieredDataSource(options(data, snap))
    schema = source.schema()
    assert not snap.exists()  # a later refusal (e.g. a missing key column) leaves nothing
    reader = source.streamReader(schema)
    assert isinstance(reader, BarrieredStreamReader)
    assert not snap.exists()  # Spark creates readers in several workers: none writes
    reader.initialOffset()  # the run takes the path, then writes
    assert (snap / "_source" / "files_manifest.jsonl").exists()
    assert (snap / "_coordinator" / "config.json").exists()
    assert reader.upstream.available() == [3]


def test_a_schema_that_changed_between_load_and_start_is_refused(
    data: Path, tmp_path: Path
) -> None:
    snap = tmp_path / "snap"
    source = BarrieredDataSource({**options(data, snap), "channels": "2"})
    schema = source.schema()
    (data / "a.json").write_text('{"user_id": "a", "amount": 1.5}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"amount:double.*loaded with .*amount:bigint"):
        source.streamReader(schema)
    assert not snap.exists()


def test_a_deleted_manifest_is_refused_not_rebuilt(data: Path, tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    reader = start(options(data, snap))
    assert reader.upstream.available() == [3]
    write_rows(data / "a.json", "a", 2)  # arrives later under an earlier name
    assert reader.upstream.available() == [5]  # positions 3..5
    manifest = snap / "_source" / "files_manifest.jsonl"
    manifest.unlink()
    message = refused(options(data, snap), snap, SnapshotStoreError)
    assert f"upstream manifest '{manifest}' is missing" in message
    assert str(snap / "_coordinator" / "config.json") in message
    assert "Nothing was written" in message and not manifest.exists()


@pytest.fixture
def restorable(data: Path, tmp_path: Path) -> Path:
    """A snapshot path of a files stream with checkpoint 1 at barrier 5 (of 5 records)."""
    snap = tmp_path / "snap"
    layout = SnapshotLayout.at(str(snap))
    reader = start(options(data, snap))
    assert reader.upstream.available() == [3]
    write_rows(data / "a.json", "a", 2)  # positions 3..5: after b.json, found first
    assert reader.upstream.available() == [5]
    config = json.loads(Path(layout.config_file).read_text(encoding="utf-8"))
    write_json(
        layout.config_file, {**config, "conf": BarrieredConf(snapshot_path=str(snap)).to_dict()}
    )
    checkpoint(layout, 1, [5])
    return snap


def test_a_restore_without_the_manifest_is_refused_by_load_and_restore_plan(
    data: Path, restorable: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = restorable / "_source" / "files_manifest.jsonl"
    saved = manifest.read_bytes()
    manifest.unlink()
    message = refused(options(data, restorable, restoreFrom="latest"), restorable, RestoreError)
    assert message.startswith(f"cannot restore checkpoint 1 of snapshot path '{restorable}'")
    assert f"its upstream manifest '{manifest}' is missing" in message
    assert "Nothing was changed" in message
    before = tree(restorable)
    assert cli.main(["restore-plan", str(restorable)]) == 1
    assert f"upstream manifest '{manifest}' is missing" in capsys.readouterr().err
    with pytest.raises(RestoreError, match=re.escape(f"'{manifest}' is missing")):
        export(SnapshotLayout.at(str(restorable)), None, str(tmp_path / "sp"))
    assert tree(restorable) == before and not (tmp_path / "sp").exists()

    # An older copy that does not reach the checkpoint's barrier is not taken either.
    lines = saved.decode().splitlines()
    manifest.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    message = refused(options(data, restorable, restoreFrom="1"), restorable, RestoreError)
    assert f"manifest '{manifest}' records 3 records of channel 0" in message
    assert "barrier there is at 5" in message


def test_a_savepoint_restore_takes_its_manifest_only_when_the_query_starts(
    data: Path, restorable: Path, tmp_path: Path
) -> None:
    savepoint = tmp_path / "sp"
    export(SnapshotLayout.at(str(restorable)), None, str(savepoint))
    target = tmp_path / "restored"
    opts = options(data, target, restoreFrom=str(savepoint))
    source = BarrieredDataSource(opts)
    schema = source.schema()
    assert not target.exists()  # loading reads the savepoint's manifest, copies nothing
    reader = source.streamReader(schema)
    assert isinstance(reader, BarrieredStreamReader)
    reader.initialOffset()
    copied = target / "_source" / "files_manifest.jsonl"
    assert copied.read_bytes() == (savepoint / "_source" / "files_manifest.jsonl").read_bytes()
    assert reader.upstream.read(0, 3, 5).to_pylist() == [
        {"user_id": f"a-{i}", "amount": i} for i in range(2)
    ]
    point = resolve(SnapshotLayout.at(str(target)), str(savepoint))
    assert point.start_positions == (5,)


def test_a_savepoint_without_its_manifest_is_refused(
    data: Path, restorable: Path, tmp_path: Path
) -> None:
    savepoint = tmp_path / "sp"
    export(SnapshotLayout.at(str(restorable)), None, str(savepoint))
    shutil.rmtree(savepoint / "_source")
    target = tmp_path / "restored"
    message = refused(options(data, target, restoreFrom=str(savepoint)), target, RestoreError)
    assert f"'{savepoint / '_source' / 'files_manifest.jsonl'}' is missing" in message
    assert not target.exists()


def test_a_new_path_for_another_upstream_is_not_refused(data: Path, tmp_path: Any) -> None:
    snap = tmp_path / "snap"
    write_json(str(snap / "_coordinator" / "config.json"), {"upstream": {"upstream": "rate"}})
    assert start(options(data, snap)).upstream.available() == [3]


def test_a_restore_refused_on_its_first_batch_leaves_no_operator_manifest(
    data: Path, restorable: Path
) -> None:
    """The restore manifest of the Spark operators' stores is removed when the run stops
    before any batch committed, or (a failed query's source is not stopped) by the next
    run on the path; a restored query restarting from its offset log writes it again at
    the same path."""
    layout = SnapshotLayout.at(str(restorable))
    schema = '{"type":"struct","fields":[{"name":"user_id","type":"string"}]}'
    store = {"version": None, "key_schema": schema, "value_schema": schema}
    checkpoint(layout, 2, [5], stores={"0-default": store})
    opts = options(data, restorable, restoreFrom="latest")

    def reader() -> BarrieredStreamReader:
        source = BarrieredDataSource(opts)
        made = source.streamReader(source.schema())
        assert isinstance(made, BarrieredStreamReader)
        return made

    stopped = reader()
    path = Path(stopped.initialOffset()["restore"]["operators_manifest"])
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["stores"]["0-default"]["files"] == []
    stopped.stop()  # the query stopped on its first batch
    assert not path.exists()

    refused = reader()
    first = refused.initialOffset()  # refused on its first batch: never stopped
    path = Path(first["restore"]["operators_manifest"])
    nxt = reader()
    own = Path(nxt.initialOffset()["restore"]["operators_manifest"])
    assert not path.exists() and own.exists() and own != path

    restarted = reader()  # the refused query's checkpoint location, restarted
    restarted.partitions(first, first)  # Spark replans batch 0 from its offset log
    assert json.loads(path.read_text(encoding="utf-8")) == written
    restarted.commit(first)
    restarted.stop()
    assert path.exists()  # a batch committed: the manifest stays
