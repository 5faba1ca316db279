"""The ``delta`` upstream: commit order, exact reads per channel, restarts, append-only."""

from __future__ import annotations

import json
import os
import pickle
import re
import urllib.parse
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from barriered.datasource.upstreams import delta as delta_module
from barriered.datasource.upstreams import make_upstream
from barriered.datasource.upstreams import manifest as manifest_module
from barriered.datasource.upstreams.delta import DeltaUpstream
from barriered.errors import ConfigError, SnapshotStoreError
from file_tree import tree

Rows = list[dict[str, Any]]
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def batch(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def append(table: Path, data: pa.Table, **kwargs: Any) -> None:
    write_deltalake(str(table), data, mode="append", **kwargs)


def added_files(table: Path) -> list[tuple[int, str]]:
    """(version, path) of every data file added with dataChange, in commit order and by
    path within a commit: the order the upstream must follow (an independent oracle)."""
    out = []
    log = table / "_delta_log"
    version = 0
    while (log / f"{version:020d}.json").exists():
        actions = [json.loads(x) for x in (log / f"{version:020d}.json").read_text().splitlines()]
        paths = sorted(
            a["add"]["path"] for a in actions if "add" in a and a["add"].get("dataChange", True)
        )
        out.extend((version, p) for p in paths)
        version += 1
    return out


def file_rows(table: Path, rel: str) -> Rows:
    rows: Rows = pq.read_table(table / urllib.parse.unquote(rel)).to_pylist()
    return rows


def expected_by_file_hash(table: Path, channels: int, start_version: int = 0) -> list[Rows]:
    out: list[Rows] = [[] for _ in range(channels)]
    for version, rel in added_files(table):
        if version >= start_version:
            out[zlib.crc32(rel.encode("utf-8")) % channels].extend(file_rows(table, rel))
    return out


def read_all(upstream: DeltaUpstream, channel: int) -> Rows:
    rows: Rows = upstream.read(channel, 0, upstream.available()[channel]).to_pylist()
    return rows


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "events"
    for i in range(6):
        append(path, batch(10 * i, 3 + i))
    return path


@pytest.fixture
def state(tmp_path: Path) -> str:
    return str(tmp_path / "state" / "upstream")


def opts(path: Path, **extra: str) -> dict[str, str]:
    return {"upstream": "delta", "path": str(path), **extra}


def test_make_upstream_dispatches_delta(table: Path, state: str) -> None:
    upstream = make_upstream(opts(table), state)
    assert isinstance(upstream, DeltaUpstream)
    assert upstream.name == "delta"
    assert upstream.channel_count() == 4
    assert upstream.schema() == SCHEMA
    assert not upstream.is_finite()


def test_appends_are_read_exactly_per_channel(table: Path, state: str) -> None:
    upstream = DeltaUpstream.from_options(opts(table, channels="2"), state)
    expected = expected_by_file_hash(table, 2)
    assert sum(len(e) for e in expected) == sum(3 + i for i in range(6))
    assert upstream.available() == [len(e) for e in expected]
    for channel in range(2):
        want = expected[channel]
        assert read_all(upstream, channel) == want
        for start in range(len(want) + 1):
            for end in range(start, len(want) + 1):
                got = upstream.read(channel, start, end)
                assert got.schema == SCHEMA
                assert got.to_pylist() == want[start:end]


def test_one_channel_is_commit_order(table: Path, state: str) -> None:
    upstream = DeltaUpstream.from_options(opts(table, channels="1"), state)
    want = [row for i in range(6) for row in batch(10 * i, 3 + i).to_pylist()]
    assert read_all(upstream, 0) == want


def test_new_versions_are_appended_and_positions_survive_a_restart(table: Path, state: str) -> None:
    first = DeltaUpstream.from_options(opts(table, channels="3"), state)
    ends = first.available()
    before = [first.read(c, 0, ends[c]).to_pylist() for c in range(3)]
    for i in range(6, 9):
        append(table, batch(10 * i, 4))
    new_ends = first.available()
    assert all(n >= o for n, o in zip(new_ends, ends, strict=True))
    assert sum(new_ends) == sum(ends) + 12
    assert [first.read(c, 0, ends[c]).to_pylist() for c in range(3)] == before
    expected = expected_by_file_hash(table, 3)
    assert [read_all(first, c) for c in range(3)] == expected

    restarted = DeltaUpstream.from_options(opts(table), state)  # channels from the manifest
    assert restarted.channel_count() == 3
    assert restarted.available() == new_ends
    append(table, batch(1000, 5))
    assert sum(restarted.available()) == sum(new_ends) + 5
    assert [read_all(restarted, c) for c in range(3)] == expected_by_file_hash(table, 3)
    assert restarted.describe()["version"] == 9


def test_idle_available_reads_no_commit_twice(
    table: Path, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = DeltaUpstream.from_options(opts(table), state)
    upstream.available()
    applied: list[int] = []
    original = DeltaUpstream._apply_commit

    def spy(self: DeltaUpstream, version: int, raw: bytes, index: Any) -> None:
        applied.append(version)
        original(self, version, raw, index)

    monkeypatch.setattr(DeltaUpstream, "_apply_commit", spy)
    upstream.available()
    assert applied == []
    append(table, batch(500, 2))
    upstream.available()
    assert applied == [6]


def test_pickled_copy_reads_the_same_rows(
    table: Path, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = DeltaUpstream.from_options(opts(table, channels="2"), state)
    ends = upstream.available()
    copy = pickle.loads(pickle.dumps(upstream))
    for channel in range(2):
        assert copy.read(channel, 0, ends[channel]) == upstream.read(channel, 0, ends[channel])
    monkeypatch.setattr(manifest_module, "PICKLE_MANIFEST_LIMIT", 1)
    bare = pickle.loads(pickle.dumps(upstream))
    assert bare._index is None
    start = min(1, ends[1])  # files go to channels by a hash of their (random) names
    assert bare.read(1, start, ends[1]) == upstream.read(1, start, ends[1])


def test_reads_through_the_delta_storage_handler(
    table: Path, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remote tables go through deltalake's file system; check it on a local table."""
    upstream = DeltaUpstream.from_options(opts(table, channels="2"), state)
    monkeypatch.setattr(delta_module, "is_local", lambda path: False)
    upstream._fs = None
    assert upstream.available() == [len(e) for e in expected_by_file_hash(table, 2)]
    append(table, batch(700, 3))
    ends = upstream.available()
    assert [upstream.read(c, 0, ends[c]).to_pylist() for c in range(2)] == (
        expected_by_file_hash(table, 2)
    )


def test_partition_column_channels(tmp_path: Path, state: str) -> None:
    path = tmp_path / "partitioned"
    schema = pa.schema([("region", pa.string()), ("bucket", pa.int64()), ("v", pa.int64())])
    for version in range(3):
        data = pa.table(
            {
                "region": ["eu", "us", "a/b c", "eu"],
                "bucket": [1, 2, 3, 4],
                "v": [version * 10 + i for i in range(4)],
            },
            schema=schema,
        )
        append(path, data, partition_by=["region", "bucket"])
    upstream = DeltaUpstream.from_options(opts(path, channelBy="region"), state)
    assert upstream.schema() == schema
    assert upstream.channel_count() == 3
    assert upstream.available() == [3, 6, 3]  # first-seen order in version 0, by file path
    channels = {c: read_all(upstream, c) for c in range(3)}
    assert {c: {r["region"] for r in rows} for c, rows in channels.items()} == {
        0: {"a/b c"},
        1: {"eu"},
        2: {"us"},
    }
    assert channels[0] == [{"region": "a/b c", "bucket": 3, "v": 10 * v + 2} for v in range(3)]
    assert [r["v"] for r in channels[1]] == [0, 3, 10, 13, 20, 23]
    assert channels[1][1] == {"region": "eu", "bucket": 4, "v": 3}
    assert upstream.read(1, 2, 5).to_pylist() == channels[1][2:5]

    append(
        path,
        pa.table({"region": ["us"], "bucket": [9], "v": [99]}, schema=schema),
        partition_by=["region", "bucket"],
    )
    assert upstream.available() == [3, 6, 4]
    assert upstream.read(2, 3, 4).to_pylist() == [{"region": "us", "bucket": 9, "v": 99}]

    append(
        path,
        pa.table({"region": ["apac"], "bucket": [1], "v": [1]}, schema=schema),
        partition_by=["region", "bucket"],
    )
    with pytest.raises(ConfigError, match=r"version 4 adds partition value 'apac'.*larger"):
        upstream.available()


def test_partition_channels_option_is_checked(tmp_path: Path, state: str) -> None:
    path = tmp_path / "partitioned"
    append(path, pa.table({"k": ["x", "y", "z"], "v": [1, 2, 3]}), partition_by=["k"])
    with pytest.raises(ConfigError, match=r"'channels' is 2 but partition column 'k'.* 3 values"):
        DeltaUpstream.from_options(opts(path, channelBy="k", channels="2"), state)
    with pytest.raises(ConfigError, match=r"'channelBy' must be 'file' or a partition column"):
        DeltaUpstream.from_options(opts(path, channelBy="nope"), state)
    upstream = DeltaUpstream.from_options(opts(path, channelBy="K", channels="5"), state)
    assert upstream.channel_by == "k"
    assert upstream.available() == [1, 1, 1, 0, 0]
    append(path, pa.table({"k": ["w"], "v": [4]}), partition_by=["k"])
    assert upstream.available() == [1, 1, 1, 1, 0]


def test_delete_is_an_error_naming_the_version(table: Path, state: str) -> None:
    upstream = DeltaUpstream.from_options(opts(table), state)
    upstream.available()
    DeltaTable(str(table)).delete("id = 10")
    with pytest.raises(SnapshotStoreError, match=r"version 6 \(DELETE\) removes .*append-only"):
        upstream.available()
    with pytest.raises(SnapshotStoreError, match=r"version 6"):  # stays failed
        upstream.available()


def test_overwrite_is_an_error(table: Path, state: str) -> None:
    upstream = DeltaUpstream.from_options(opts(table), state)
    upstream.available()
    write_deltalake(str(table), batch(0, 1), mode="overwrite")
    with pytest.raises(SnapshotStoreError, match=r"version 6 .*append-only"):
        upstream.available()


def test_optimize_compaction_is_skipped(table: Path, state: str) -> None:
    upstream = DeltaUpstream.from_options(opts(table, channels="2"), state)
    ends = upstream.available()
    want = [upstream.read(c, 0, ends[c]).to_pylist() for c in range(2)]
    DeltaTable(str(table)).optimize.compact()
    assert upstream.available() == ends
    assert [upstream.read(c, 0, ends[c]).to_pylist() for c in range(2)] == want


def test_added_column_is_ignored(table: Path, state: str) -> None:
    upstream = DeltaUpstream.from_options(opts(table, channels="1"), state)
    before = upstream.available()[0]
    wider = pa.table({"id": [900], "name": ["wide"], "extra": [1.5]})
    append(table, wider, schema_mode="merge")
    assert upstream.available() == [before + 1]
    assert upstream.read(0, before, before + 1).to_pylist() == [{"id": 900, "name": "wide"}]


def test_starting_version(table: Path, tmp_path: Path) -> None:
    upstream = DeltaUpstream.from_options(
        opts(table, startingVersion="4", channels="1"), str(tmp_path / "s1")
    )
    assert read_all(upstream, 0) == batch(40, 7).to_pylist() + batch(50, 8).to_pylist()
    latest = DeltaUpstream.from_options(
        opts(table, startingVersion="latest", channels="1"), str(tmp_path / "s2")
    )
    assert latest.available() == [0]
    append(table, batch(600, 2))
    assert read_all(latest, 0) == batch(600, 2).to_pylist()
    with pytest.raises(ConfigError, match=r"'startingVersion' is 99 but .* version 6"):
        DeltaUpstream.from_options(opts(table, startingVersion="99"), str(tmp_path / "s3"))
    with pytest.raises(
        ConfigError,
        match=r"upstream option 'startingVersion': invalid value 'first'; expected 'latest' or a "
        r"table version \(an integer, at least 0\)",
    ):
        DeltaUpstream.from_options(opts(table, startingVersion="first"), str(tmp_path / "s4"))


def test_restart_with_changed_options_is_refused(table: Path, state: str) -> None:
    DeltaUpstream.from_options(opts(table, channels="2"), state).available()
    with pytest.raises(ConfigError, match=r"option 'channels' is 3 but .*started with 2"):
        DeltaUpstream.from_options(opts(table, channels="3"), state)
    with pytest.raises(ConfigError, match=r"option 'startingVersion' is 1"):
        DeltaUpstream.from_options(opts(table, startingVersion="1"), state)


def test_missing_table_and_path_messages(tmp_path: Path, state: str) -> None:
    with pytest.raises(ConfigError, match=r"option 'path' is required by upstream 'delta'"):
        DeltaUpstream.from_options({"upstream": "delta"}, state)
    missing = tmp_path / "no_table"
    missing.mkdir()
    with pytest.raises(
        ConfigError, match=re.escape(f"option 'path': there is no Delta table at '{missing}'")
    ):
        DeltaUpstream.from_options(opts(missing), state)


def test_storage_options_are_collected(table: Path, state: str) -> None:
    upstream = DeltaUpstream.from_options(
        opts(table, **{"storageOptions.AWS_REGION": "eu-west-1", "storageoptions.x": "1"}),
        state,
    )
    assert upstream.storage_options == {"AWS_REGION": "eu-west-1", "x": "1"}


def test_vacuumed_file_is_an_error_naming_it(table: Path, state: str) -> None:
    upstream = DeltaUpstream.from_options(opts(table, channels="1"), state)
    upstream.available()
    version, rel = added_files(table)[0]
    os.remove(table / urllib.parse.unquote(rel))
    with pytest.raises(SnapshotStoreError, match=rf"{re.escape(rel)}.*version {version}.* VACUUM"):
        upstream.read(0, 0, 1)
    assert upstream.read(0, 3, 5).to_pylist() == batch(10, 4).to_pylist()[:2]


def test_row_count_without_stats_reads_the_footer(table: Path, state: str) -> None:
    upstream = DeltaUpstream.from_options(opts(table), state)
    _, rel = added_files(table)[2]
    assert upstream._row_count({"path": rel}) == 5
    assert upstream._row_count({"path": rel, "stats": "{}"}) == 5
    assert upstream._row_count({"path": rel, "stats": '{"numRecords": 5}'}) == 5


def test_option_names_are_case_insensitive(table: Path, state: str) -> None:
    """PySpark hands data sources their option names lower-cased."""
    upstream = make_upstream(
        {
            "upstream": "delta",
            "path": str(table),
            "startingversion": "5",
            "channelby": "file",
            "storageoptions.aws_region": "eu-west-1",
        },
        state,
    )
    assert isinstance(upstream, DeltaUpstream)
    assert upstream.starting_version == 5
    assert upstream.storage_options == {"aws_region": "eu-west-1"}


def test_nothing_is_written_until_the_stream_starts(table: Path, tmp_path: Path) -> None:
    state = tmp_path / "snap" / "_source"
    upstream = DeltaUpstream.from_options(opts(table, startingVersion="latest"), str(state))
    assert not (tmp_path / "snap").exists()
    upstream.persist()  # fixes 'latest' (version 6) for the life of the stream
    append(table, batch(100, 2))
    restarted = DeltaUpstream.from_options(opts(table), str(state))
    assert sum(restarted.available()) == 2


def test_a_missing_manifest_that_positions_refer_to_is_refused(
    table: Path, state: str, tmp_path: Path
) -> None:
    upstream = DeltaUpstream.from_options(opts(table, channels="2"), state)
    assert sum(upstream.available()) == sum(3 + i for i in range(6))
    manifest = Path(state, "delta_manifest.jsonl")
    manifest.unlink()
    before = tree(tmp_path)
    with pytest.raises(
        SnapshotStoreError,
        match=rf"manifest '{re.escape(str(manifest))}' is missing, but checkpoint 3 refers to "
        "positions of the delta upstream",
    ):
        DeltaUpstream.from_options(opts(table, channels="2"), state, "checkpoint 3")
    assert tree(tmp_path) == before
