"""The ``files`` upstream: discovery order, exact reads, restarts, archiving, errors."""

from __future__ import annotations

import datetime
import json
import os
import pickle
import re
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from barriered.datasource.upstreams import make_upstream
from barriered.datasource.upstreams import manifest as manifest_module
from barriered.datasource.upstreams.files import FilesUpstream
from barriered.datasource.upstreams.options import schema_option
from barriered.errors import BarrieredError, ConfigError, SnapshotStoreError

Rows = list[dict[str, Any]]


def rows_for(tag: str, count: int, base: int = 0) -> Rows:
    return [{"id": base + i, "name": f"{tag}-{i}"} for i in range(count)]


def write_json(path: Path, rows: Rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def write_csv(path: Path, rows: Rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["id,name", *(f"{r['id']},{r['name']}" for r in rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_parquet(path: Path, rows: Rows, row_group_size: int = 3) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(
        rows, schema=pa.schema([("id", pa.int64()), ("name", pa.string())])
    )
    pq.write_table(table, path, row_group_size=row_group_size)


def hash_channel(rel: str, channels: int) -> int:
    return zlib.crc32(rel.encode("utf-8")) % channels


def read_all(upstream: FilesUpstream, channel: int) -> Rows:
    end = upstream.available()[channel]
    return upstream.read(channel, 0, end).to_pylist()


def opts(path: Path, **extra: str) -> dict[str, str]:
    return {"upstream": "files", "path": str(path), **extra}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    return folder


@pytest.fixture
def state(tmp_path: Path) -> str:
    return str(tmp_path / "state" / "upstream")


# ----------------------------------------------------------------------------- dispatch


def test_make_upstream_dispatches_files(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    upstream = make_upstream(opts(data), state)
    assert isinstance(upstream, FilesUpstream)
    assert upstream.name == "files"
    assert upstream.channel_count() == 4
    assert not upstream.is_finite()


# ----------------------------------------------------------------------------- hash / json


def test_json_hash_channels_read_exact_rows_across_files(data: Path, state: str) -> None:
    names = [f"part-{i:02d}.json" for i in range(8)]
    content = {name: rows_for(name, 3 + i, base=100 * i) for i, name in enumerate(names)}
    for name, rows in content.items():
        write_json(data / name, rows)
    upstream = FilesUpstream.from_options(opts(data, channels="3"), state)
    assert upstream.channel_by == "hash"
    assert upstream.format == "json"
    assert upstream.schema() == pa.schema([("id", pa.int64()), ("name", pa.string())])

    expected: list[Rows] = [[], [], []]
    for name in sorted(names):
        expected[hash_channel(name, 3)].extend(content[name])
    assert upstream.available() == [len(e) for e in expected]
    for channel in range(3):
        want = expected[channel]
        assert read_all(upstream, channel) == want
        # every sub-range, including ones that start/end inside files and span several
        for start in range(0, len(want) + 1, 2):
            for end in range(start, len(want) + 1, 3):
                table = upstream.read(channel, start, end)
                assert table.schema == upstream.schema()
                assert table.to_pylist() == want[start:end]


def test_hidden_and_tmp_files_are_ignored(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    write_json(data / ".hidden.json", rows_for("h", 2))
    write_json(data / "_SUCCESS", [])
    write_json(data / "b.json.tmp", rows_for("t", 2))
    write_json(data / "_tmpdir" / "c.json", rows_for("c", 2))
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert upstream.available() == [2]
    assert upstream.describe()["files"] == 1


def test_sub_folders_are_listed_one_level_in_hash_mode(data: Path, state: str) -> None:
    write_json(data / "top.json", rows_for("top", 2))
    write_json(data / "day=1" / "x.json", rows_for("x", 3))
    write_json(data / "day=1" / "deeper" / "y.json", rows_for("y", 3))  # two levels: ignored
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert upstream.channel_by == "hash"
    assert read_all(upstream, 0) == rows_for("x", 3) + rows_for("top", 2)


# ----------------------------------------------------------------------------- folder / csv


def test_csv_folder_channels(data: Path, state: str) -> None:
    for folder, count in (("b", 2), ("a", 3), ("c", 1)):
        for i in range(count):
            write_csv(data / folder / f"f{i}.csv", rows_for(f"{folder}{i}", 4, base=i * 4))
    upstream = FilesUpstream.from_options(opts(data), state)
    assert upstream.channel_by == "folder"
    assert upstream.folders == ["a", "b", "c"]
    assert upstream.format == "csv"
    assert upstream.channel_count() == 3
    assert upstream.available() == [12, 8, 4]
    expected_a = rows_for("a0", 4) + rows_for("a1", 4, 4) + rows_for("a2", 4, 8)
    assert read_all(upstream, 0) == expected_a
    assert upstream.read(0, 3, 9).to_pylist() == expected_a[3:9]
    assert upstream.read(2, 1, 3).to_pylist() == rows_for("c0", 4)[1:3]


def test_folder_mode_channel_count_must_match(data: Path, state: str) -> None:
    write_csv(data / "a" / "f.csv", rows_for("a", 1))
    write_csv(data / "b" / "f.csv", rows_for("b", 1))
    with pytest.raises(ConfigError, match=r"'channels' is 3 but channelBy 'folder' found 2"):
        FilesUpstream.from_options(opts(data, channels="3"), state)
    assert FilesUpstream.from_options(opts(data, channels="2"), state).channel_count() == 2


def test_folder_mode_rejects_top_level_files_and_new_folders(data: Path, state: str) -> None:
    write_csv(data / "a" / "f.csv", rows_for("a", 1))
    write_csv(data / "top.csv", rows_for("t", 1))
    with pytest.raises(ConfigError, match=r"top.csv"):
        FilesUpstream.from_options(opts(data, channelBy="folder"), state)
    (data / "top.csv").unlink()
    upstream = FilesUpstream.from_options(opts(data, channelBy="folder"), state)
    assert upstream.available() == [1]
    write_csv(data / "z" / "f.csv", rows_for("z", 1))
    with pytest.raises(ConfigError, match=r"new sub-folder .*z"):
        upstream.available()


def test_hash_mode_can_be_forced_over_folders(data: Path, state: str) -> None:
    write_csv(data / "a" / "f.csv", rows_for("a", 2))
    write_csv(data / "b" / "f.csv", rows_for("b", 2))
    upstream = FilesUpstream.from_options(opts(data, channelBy="hash", channels="1"), state)
    assert read_all(upstream, 0) == rows_for("a", 2) + rows_for("b", 2)


# ----------------------------------------------------------------------------- parquet


def test_parquet_reads_span_row_groups_and_files(data: Path, state: str) -> None:
    write_parquet(data / "p0.parquet", rows_for("p0", 10), row_group_size=3)
    write_parquet(data / "p1.parquet", rows_for("p1", 7, base=10), row_group_size=2)
    write_parquet(data / "p2.parquet", [], row_group_size=2)
    write_parquet(data / "p3.parquet", rows_for("p3", 5, base=17), row_group_size=4)
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert upstream.format == "parquet"
    want = rows_for("p0", 10) + rows_for("p1", 7, 10) + rows_for("p3", 5, 17)
    assert upstream.available() == [22]
    for start in range(23):
        for end in range(start, 23):
            assert upstream.read(0, start, end).to_pylist() == want[start:end]


# ----------------------------------------------------------------------------- positions


def test_new_files_are_appended_and_positions_survive_a_restart(data: Path, state: str) -> None:
    write_json(data / "m.json", rows_for("m", 3))
    write_json(data / "n.json", rows_for("n", 2))
    first = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert first.available() == [5]
    before = first.read(0, 0, 5).to_pylist()

    # names that sort *before* the known files still go to the end
    write_json(data / "a.json", rows_for("a", 4))
    write_json(data / "b.json", rows_for("b", 1))
    assert first.available() == [10]
    assert first.read(0, 0, 5).to_pylist() == before
    assert first.read(0, 5, 10).to_pylist() == rows_for("a", 4) + rows_for("b", 1)

    # a brand new upstream (driver restart) continues the same manifest
    second = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert second.available() == [10]
    write_json(data / "0.json", rows_for("zero", 2))
    assert second.available() == [12]
    full = before + rows_for("a", 4) + rows_for("b", 1) + rows_for("zero", 2)
    assert second.read(0, 0, 12).to_pylist() == full
    # a third instance without options it inferred (format, channels) agrees too
    third = FilesUpstream.from_options(opts(data), state)
    assert third.channel_count() == 1
    assert third.read(0, 3, 12).to_pylist() == full[3:12]


def test_two_instances_on_one_state_dir_agree(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    one = FilesUpstream.from_options(opts(data, channels="1"), state)
    two = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert one.available() == [2]
    write_json(data / "b.json", rows_for("b", 2))
    assert two.available() == [4]
    write_json(data / "c.json", rows_for("c", 2))
    assert one.available() == [6]  # reloads the manifest written by `two` first
    assert one.read(0, 0, 6).to_pylist() == two.read(0, 0, 6).to_pylist()
    assert one.read(0, 4, 6).to_pylist() == rows_for("c", 2)


def test_restart_with_changed_options_is_refused(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    FilesUpstream.from_options(opts(data, channels="2"), state).available()
    with pytest.raises(ConfigError, match=r"option 'channels' is 3 but .*started with 2"):
        FilesUpstream.from_options(opts(data, channels="3"), state)
    with pytest.raises(ConfigError, match=r"option 'format' is 'csv'"):
        FilesUpstream.from_options(opts(data, format="csv"), state)
    with pytest.raises(ConfigError, match=r"option 'schema'"):
        FilesUpstream.from_options(opts(data, schema="id long"), state)
    other = data.parent / "other"
    other.mkdir()
    with pytest.raises(ConfigError, match=r"option 'path'"):
        FilesUpstream.from_options(opts(other), state)


def test_pickled_copy_reads_the_same_rows(data: Path, state: str) -> None:
    for i in range(4):
        write_json(data / f"f{i}.json", rows_for(f"f{i}", 3, base=3 * i))
    upstream = FilesUpstream.from_options(opts(data, channels="2"), state)
    ends = upstream.available()
    copy = pickle.loads(pickle.dumps(upstream))
    for channel in range(2):
        assert copy.read(channel, 0, ends[channel]) == upstream.read(channel, 0, ends[channel])
    # a copy pickled before new files were found re-reads the manifest for them
    write_json(data / "late.json", rows_for("late", 2))
    ends = upstream.available()
    channel = hash_channel("late.json", 2)
    assert copy.read(channel, ends[channel] - 2, ends[channel]).to_pylist() == rows_for("late", 2)


def test_large_manifest_is_not_pickled(
    data: Path, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        write_json(data / f"f{i}.json", rows_for(f"f{i}", 2, base=2 * i))
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    upstream.available()
    monkeypatch.setattr(manifest_module, "PICKLE_MANIFEST_LIMIT", 1)
    copy = pickle.loads(pickle.dumps(upstream))
    assert copy._index is None
    assert copy.read(0, 1, 5) == upstream.read(0, 1, 5)


def test_read_arguments_are_checked(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    upstream.available()
    assert upstream.read(0, 1, 1).num_rows == 0
    assert upstream.read(0, 1, 1).schema == upstream.schema()
    with pytest.raises(SnapshotStoreError, match=r"has 2 records .* \[0, 3\)"):
        upstream.read(0, 0, 3)
    with pytest.raises(ValueError, match=r"channel 1 is out of range"):
        upstream.read(1, 0, 1)


# ----------------------------------------------------------------------------- release


def test_release_archives_whole_files_and_reads_still_work(tmp_path: Path, data: Path) -> None:
    state = str(tmp_path / "state")
    archive = tmp_path / "archive"
    for i in range(3):
        write_json(data / "a" / f"f{i}.json", rows_for(f"a{i}", 4, base=4 * i))
    write_json(data / "b" / "g.json", rows_for("b", 4))
    upstream = FilesUpstream.from_options(opts(data, archiveTo=str(archive)), state)
    assert upstream.available() == [12, 4]
    want = read_all(upstream, 0)
    stale_copy = pickle.loads(pickle.dumps(upstream))

    upstream.release(0, 9)  # f0 [0,4) and f1 [4,8) lie wholly before 9; f2 does not
    assert not (data / "a" / "f0.json").exists()
    assert not (data / "a" / "f1.json").exists()
    assert (archive / "a" / "f0.json").exists()
    assert (archive / "a" / "f1.json").exists()
    assert (data / "a" / "f2.json").exists()
    assert (data / "b" / "g.json").exists()
    text = Path(state, "files_manifest.jsonl").read_text(encoding="utf-8")
    manifest = [json.loads(line) for line in text.splitlines()]
    archived = {r["path"] for r in manifest if r.get("archivedTo")}
    assert archived == {"a/f0.json", "a/f1.json"}

    assert upstream.read(0, 0, 12).to_pylist() == want
    assert stale_copy.read(0, 2, 10).to_pylist() == want[2:10]  # its manifest copy is stale
    assert upstream.available() == [12, 4]  # archived files are not discovered again
    restarted = FilesUpstream.from_options(opts(data), state)  # archiveTo removed
    assert restarted.read(0, 0, 12).to_pylist() == want
    upstream.release(0, 12)
    assert not (data / "a" / "f2.json").exists()
    assert restarted.read(0, 0, 12).to_pylist() == want


def test_release_without_archive_does_nothing(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    upstream.available()
    upstream.release(0, 2)
    assert (data / "a.json").exists()
    assert upstream.read(0, 0, 2).to_pylist() == rows_for("a", 2)


def test_archive_folder_inside_path_is_refused(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    with pytest.raises(ConfigError, match=r"'archiveTo' .* lies inside option 'path'"):
        FilesUpstream.from_options(opts(data, archiveTo=str(data / "old")), state)
    upstream = FilesUpstream.from_options(opts(data, archiveTo=str(data / "_archive")), state)
    assert upstream.archive_to == str(data / "_archive")


# ----------------------------------------------------------------------------- modified files


def test_modified_file_is_an_error_naming_it(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 3))
    write_json(data / "b.json", rows_for("b", 3))
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    upstream.available()
    with open(data / "a.json", "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": 99, "name": "late"}) + "\n")
    with pytest.raises(SnapshotStoreError, match=r"a\.json.*must not modify files in place"):
        upstream.read(0, 0, 2)
    assert upstream.read(0, 3, 6).to_pylist() == rows_for("b", 3)  # other files still fine
    (data / "b.json").unlink()
    with pytest.raises(SnapshotStoreError, match=r"b\.json.*disappeared"):
        upstream.read(0, 3, 6)


def test_same_size_rewrite_with_other_row_count_is_caught(data: Path, state: str) -> None:
    (data / "a.json").write_text('{"id":1}\n{"id":2}\n', encoding="utf-8")
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert upstream.available() == [2]
    stamp = (data / "a.json").stat().st_mtime_ns
    (data / "a.json").write_text('{"id":1234567890}\n', encoding="utf-8")  # same 18 bytes
    os.utime(data / "a.json", ns=(stamp, stamp))  # within one timestamp tick: undetectable
    assert upstream.available() == [2]
    with pytest.raises(SnapshotStoreError, match=r"a\.json.* now has 1 records"):
        upstream.read(0, 0, 2)


def manifest_lines(state: str) -> list[dict[str, Any]]:
    text = Path(state, "files_manifest.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_rows_appended_to_a_read_file_fail_the_next_listing(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 3))
    write_json(data / "b.json", rows_for("b", 3))
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert upstream.available() == [6]
    assert upstream.read(0, 0, 6).to_pylist() == rows_for("a", 3) + rows_for("b", 3)
    manifest = Path(state, "files_manifest.jsonl").read_bytes()
    size = (data / "a.json").stat().st_size
    with open(data / "a.json", "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": 99, "name": "late"}) + "\n")
    grown = (data / "a.json").stat().st_size
    expected = (
        rf"file '{re.escape(str(data / 'a.json'))}' changed after the files upstream recorded "
        rf"it \(records 0\.\.3 of channel 0, {size} bytes, modified .*; now {grown} "
        r"bytes.*append new records as a new file"
    )
    with pytest.raises(SnapshotStoreError, match=expected):
        upstream.available()
    with pytest.raises(SnapshotStoreError, match=expected):  # after a restart as well
        FilesUpstream.from_options(opts(data, channels="1"), state).available()
    assert Path(state, "files_manifest.jsonl").read_bytes() == manifest


def test_a_same_size_rewrite_fails_the_next_listing_and_reads(data: Path, state: str) -> None:
    (data / "a.json").write_text('{"id":1}\n{"id":2}\n', encoding="utf-8")
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert upstream.available() == [2]
    stamp = (data / "a.json").stat().st_mtime_ns
    (data / "a.json").write_text('{"id":3}\n{"id":4}\n', encoding="utf-8")  # same 18 bytes
    later = stamp + 1_000_000_000  # a rewrite one second later (any timestamp granularity)
    os.utime(data / "a.json", ns=(later, later))
    expected = (
        rf"a\.json' changed after .*18 bytes, modified .*\(mtime_ns {stamp}\); now 18 bytes, "
        rf"modified .*\(mtime_ns {later}\)"
    )
    with pytest.raises(SnapshotStoreError, match=expected):
        upstream.available()
    with pytest.raises(SnapshotStoreError, match=expected):
        upstream.read(0, 0, 2)
    os.utime(data / "a.json", ns=(stamp, stamp))  # the message's way out: original time back
    assert upstream.available() == [2]


def test_a_manifest_without_modification_times_records_them(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    write_json(data / "b.json", rows_for("b", 2))
    FilesUpstream.from_options(opts(data, channels="1"), state).available()
    lines = manifest_lines(state)
    for line in lines[1:]:  # as written before modification times were kept in ns
        line["mtime"] = line.pop("mtimeNs") / 1e9
    Path(state, "files_manifest.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8"
    )
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert upstream.available() == [4]
    recorded = {line["path"]: line.get("mtimeNs") for line in manifest_lines(state)[1:]}
    assert recorded == {n: (data / n).stat().st_mtime_ns for n in ("a.json", "b.json")}
    later = recorded["b.json"] + 1_000_000_000
    os.utime(data / "b.json", ns=(later, later))
    with pytest.raises(SnapshotStoreError, match=r"b\.json' changed after"):
        upstream.available()


def test_nothing_is_written_until_the_stream_starts(data: Path, tmp_path: Path) -> None:
    state = tmp_path / "snap" / "_source"
    write_json(data / "a.json", rows_for("a", 2))
    upstream = FilesUpstream.from_options(
        opts(data, channels="1", archiveTo=str(tmp_path / "arc")), str(state)
    )
    assert not (tmp_path / "snap").exists() and not (tmp_path / "arc").exists()
    upstream.persist()
    assert [line["kind"] for line in manifest_lines(str(state))] == ["header"]
    assert upstream.available() == [2]
    assert [line["kind"] for line in manifest_lines(str(state))] == ["header", "file"]
    upstream.persist()  # a stream that has a manifest keeps it
    assert [line["kind"] for line in manifest_lines(str(state))] == ["header", "file"]


def test_a_missing_manifest_that_positions_refer_to_is_refused(data: Path, state: str) -> None:
    write_json(data / "b.json", rows_for("b", 2))
    FilesUpstream.from_options(opts(data, channels="1"), state).available()
    Path(state, "files_manifest.jsonl").unlink()
    write_json(data / "a.json", rows_for("a", 2))  # would take positions 0..2 if rebuilt
    manifest = re.escape(str(Path(state, "files_manifest.jsonl")))
    with pytest.raises(
        SnapshotStoreError,
        match=rf"upstream manifest '{manifest}' is missing, but checkpoint 7 refers to positions",
    ):
        FilesUpstream.from_options(opts(data, channels="1"), state, "checkpoint 7")
    assert not Path(state, "files_manifest.jsonl").exists()


def test_a_manifest_that_disappears_while_running_is_an_error(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert upstream.available() == [2]
    Path(state, "files_manifest.jsonl").unlink()
    with pytest.raises(SnapshotStoreError, match=r"files_manifest\.jsonl' disappeared"):
        upstream.available()
    assert not Path(state, "files_manifest.jsonl").exists()


# ----------------------------------------------------------------------------- schema


def test_schema_option_casts_every_file(data: Path, state: str) -> None:
    (data / "a.json").write_text(
        '{"id": 1, "name": 7, "ok": true, "ts": "2024-01-02T03:04:05Z", "x": 1.5}\n'
        '{"id": 2, "name": "two", "ok": false, "ts": "2024-01-02 03:04:06"}\n',
        encoding="utf-8",
    )
    upstream = FilesUpstream.from_options(
        opts(data, channels="1", schema="id long, name string, ok boolean, ts timestamp, x double"),
        state,
    )
    assert upstream.schema().field("ts").type == pa.timestamp("us", tz="UTC")
    assert upstream.available() == [2]
    utc = datetime.timezone.utc
    assert upstream.read(0, 0, 2).to_pylist() == [
        {
            "id": 1,
            "name": "7",
            "ok": True,
            "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=utc),
            "x": 1.5,
        },
        {
            "id": 2,
            "name": "two",
            "ok": False,
            "ts": datetime.datetime(2024, 1, 2, 3, 4, 6, tzinfo=utc),
            "x": None,
        },
    ]


def test_inferred_schema_is_fixed_and_later_files_are_cast(data: Path, state: str) -> None:
    write_csv(data / "a.csv", rows_for("a", 2))
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    assert upstream.schema() == pa.schema([("id", pa.int64()), ("name", pa.string())])
    (data / "b.csv").write_text("name,extra,id\nx,1,5\n", encoding="utf-8")  # reordered + extra
    (data / "c.csv").write_text("name\ny\n", encoding="utf-8")  # missing column -> null
    assert upstream.available() == [4]
    assert upstream.read(0, 2, 4).to_pylist() == [
        {"id": 5, "name": "x"},
        {"id": None, "name": "y"},
    ]


def test_file_that_cannot_be_cast_is_an_error_naming_it(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 2))
    upstream = FilesUpstream.from_options(opts(data, channels="1"), state)
    upstream.available()
    write_json(data / "a2.json", rows_for("a2", 3))  # sorts before the bad file
    (data / "b.json").write_text('{"id": "not a number", "name": "b"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"b\.json.*cannot be read as json"):
        upstream.available()
    with pytest.raises(ConfigError, match=r"b\.json"):  # still failing, nothing half-saved
        upstream.available()
    (data / "b.json").unlink()
    assert upstream.available() == [5]
    assert FilesUpstream.from_options(opts(data), state).available() == [5]
    assert upstream.read(0, 2, 5).to_pylist() == rows_for("a2", 3)


def test_schema_option_parser() -> None:
    schema = schema_option({"schema": "a string, b LONG, c int, d double, e boolean, f timestamp"})
    assert schema is not None
    assert schema.types == [
        pa.string(),
        pa.int64(),
        pa.int32(),
        pa.float64(),
        pa.bool_(),
        pa.timestamp("us", tz="UTC"),
    ]
    assert schema_option({}) is None
    with pytest.raises(ConfigError, match=r"column 'b' has unknown type 'varchar'"):
        schema_option({"schema": "a string, b varchar"})
    with pytest.raises(ConfigError, match=r"column 'a' has unknown type 'string b long'"):
        schema_option({"schema": "a string b long"})  # a comma missing
    with pytest.raises(ConfigError, match=r"must look like 'column type, column type'"):
        schema_option({"schema": "a string, b"})
    with pytest.raises(ConfigError, match=r"column 'a' appears twice"):
        schema_option({"schema": "a string, a long"})


def test_bad_schema_option_message(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 1))
    with pytest.raises(
        ConfigError, match=r"option 'schema': column 'id' has unknown type 'number'"
    ):
        FilesUpstream.from_options(opts(data, schema="id number"), state)


# ----------------------------------------------------------------------------- options


def test_missing_path_messages(tmp_path: Path, state: str) -> None:
    with pytest.raises(ConfigError, match=r"option 'path' is required"):
        FilesUpstream.from_options({"upstream": "files"}, state)
    missing = tmp_path / "nope"
    with pytest.raises(
        ConfigError, match=re.escape(f"option 'path': directory '{missing}' does not exist")
    ):
        FilesUpstream.from_options(opts(missing), state)
    a_file = tmp_path / "file.json"
    a_file.write_text("{}\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=re.escape(f"option 'path': '{a_file}' is not a directory")
    ):
        FilesUpstream.from_options(opts(a_file), state)


def test_bad_format_messages(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 1))
    with pytest.raises(
        ConfigError,
        match=r"upstream option 'format': invalid value 'avro' \(not one of the choices\); "
        r"expected one of json, csv, parquet \(any case\)",
    ):
        FilesUpstream.from_options(opts(data, format="avro"), state)
    (data / "a.json").rename(data / "a.dat")
    with pytest.raises(ConfigError, match=r"cannot be inferred from the first file 'a\.dat'"):
        FilesUpstream.from_options(opts(data), state)
    upstream = FilesUpstream.from_options(opts(data, format="json", channels="1"), state)
    assert upstream.available() == [1]


def test_wrong_format_for_files_is_reported(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 1))
    with pytest.raises(ConfigError, match=r"cannot infer the schema from the first file .*a\.json"):
        FilesUpstream.from_options(opts(data, format="parquet"), state)


def test_empty_directory_needs_format_and_schema(data: Path, state: str) -> None:
    with pytest.raises(ConfigError, match=r"no data files yet.*set options 'format' and 'schema'"):
        FilesUpstream.from_options(opts(data), state)
    upstream = FilesUpstream.from_options(
        opts(data, format="csv", schema="id long, name string", channels="2"), state
    )
    assert upstream.available() == [0, 0]
    write_csv(data / "a.csv", rows_for("a", 3))
    ends = upstream.available()
    assert sum(ends) == 3
    channel = hash_channel("a.csv", 2)
    assert upstream.read(channel, 0, 3).to_pylist() == rows_for("a", 3)


def test_errors_are_barriered_errors(data: Path, state: str) -> None:
    with pytest.raises(BarrieredError):
        FilesUpstream.from_options(opts(data, channels="zero"), state)


def test_describe(data: Path, state: str) -> None:
    write_json(data / "a.json", rows_for("a", 1))
    write_json(data / "b.json", rows_for("b", 1))
    upstream = FilesUpstream.from_options(opts(data, channels="2"), state)
    upstream.available()
    assert upstream.describe() == {
        "upstream": "files",
        "path": str(data),
        "format": "json",
        "channels": 2,
        "channelBy": "hash",
        "files": 2,
        "archiveTo": None,
    }


def test_option_names_are_case_insensitive(data: Path, state: str) -> None:
    """PySpark hands data sources their option names lower-cased."""
    write_csv(data / "a" / "f.csv", rows_for("a", 2))
    write_csv(data / "b" / "f.csv", rows_for("b", 2))
    upstream = make_upstream(
        {"upstream": "files", "path": str(data), "channelby": "hash", "channels": "1"}, state
    )
    assert isinstance(upstream, FilesUpstream)
    assert upstream.channel_by == "hash"
