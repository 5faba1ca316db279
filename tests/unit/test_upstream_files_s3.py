"""The ``files`` and ``delta`` upstreams with their input and their manifest on the local
S3 server (``tests/s3_server.py``): discovery order, exact reads, restarts, archiving and
the change detection S3 allows (size and ``LastModified`` at every listing, the ``ETag``
at every read)."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from barriered.datasource.upstreams import make_upstream
from barriered.datasource.upstreams.files import FilesUpstream
from barriered.errors import SnapshotStoreError
from barriered.files import storage
from s3_server import S3Server

pytestmark = pytest.mark.s3

Rows = list[dict[str, Any]]


def rows_for(tag: str, count: int, base: int = 0) -> Rows:
    return [{"id": base + i, "name": f"{tag}-{i}"} for i in range(count)]


def put(s3: S3Server, key: str, rows: Rows) -> None:
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    s3.client().put_object(Bucket=s3.bucket, Key=key, Body=body)


def objects(s3: S3Server, prefix: str) -> dict[str, str]:
    """Key -> ETag of every object under ``prefix`` (folder markers left out): what a
    refusal must leave alone."""
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix)
    contents = (o for page in pages for o in page.get("Contents", []))
    return {o["Key"]: o["ETag"] for o in contents if not o["Key"].endswith("/")}


def manifest(s3: S3Server, key: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in s3.read(key).decode().splitlines()]


@pytest.fixture
def s3(s3_server: S3Server) -> S3Server:
    """The server, its settings registered in this process (as a query's load() does)."""
    storage._REGISTERED.clear()
    storage.register(s3_server.uri(), s3_server.storage_options)
    return s3_server


def test_files_on_s3_are_discovered_once_in_order_and_survive_a_restart(s3: S3Server) -> None:
    base = "files-order"
    for i in range(2):
        put(s3, f"{base}/events/a/f{i}.json", rows_for(f"a{i}", 3, base=3 * i))
    put(s3, f"{base}/events/b/g0.json", rows_for("b0", 2))
    options = {"upstream": "files", "path": s3.uri(base, "events/"), "channelBy": "folder"}
    state = s3.uri(base, "snap/_source")
    upstream = make_upstream(options, state)
    assert objects(s3, f"{base}/snap/") == {}  # loading writes nothing
    assert upstream.available() == [6, 2]
    assert upstream.read(0, 0, 6).to_pylist() == rows_for("a0", 3) + rows_for("a1", 3, 3)

    put(s3, f"{base}/events/b/g1.json", rows_for("b1", 4))
    put(s3, f"{base}/events/a/.f2.json.tmp", rows_for("hidden", 5))
    assert upstream.available() == [6, 6]
    assert upstream.available() == [6, 6]  # an unchanged folder: nothing new
    restarted = make_upstream(options, state, required_by="test")
    assert restarted.available() == [6, 6]
    assert restarted.read(1, 1, 6).to_pylist() == rows_for("b0", 2)[1:] + rows_for("b1", 4)

    lines = manifest(s3, f"{base}/snap/_source/files_manifest.jsonl")
    assert lines[0]["path"] == s3.uri(base, "events")
    files = {r["path"]: r for r in lines[1:]}
    assert list(files) == ["a/f0.json", "a/f1.json", "b/g0.json", "b/g1.json"]
    etags = objects(s3, f"{base}/events/")
    for rel, record in files.items():
        assert f'"{record["etag"]}"' == etags[f"{base}/events/{rel}"]
        assert record["mtimeNs"] % 1_000_000_000 == 0  # S3's LastModified: whole seconds


def test_a_changed_object_fails_the_listing_or_the_read_by_size_or_etag(s3: S3Server) -> None:
    base = "files-changed"
    put(s3, f"{base}/events/a.json", [{"id": 1}, {"id": 2}])
    put(s3, f"{base}/events/b.json", [{"id": 7}, {"id": 8}, {"id": 9}])
    options = {"upstream": "files", "path": s3.uri(base, "events"), "channels": "1"}
    state = s3.uri(base, "snap/_source")
    upstream = FilesUpstream.from_options(options, state)
    assert upstream.available() == [5]
    before = objects(s3, f"{base}/snap/")

    put(s3, f"{base}/events/a.json", [{"id": 1}, {"id": 2}, {"id": 3}])  # rows appended
    expected = (
        rf"file '{re.escape(s3.uri(base, 'events/a.json'))}' changed after the files upstream "
        r"recorded it \(records 0\.\.2 of channel 0, 20 bytes, .*now 30 bytes.*ETag "
    )
    with pytest.raises(SnapshotStoreError, match=expected):
        upstream.read(0, 0, 2)
    with pytest.raises(SnapshotStoreError, match=r"a\.json' changed after .*now 30 bytes"):
        upstream.available()

    # the same size, within the same second as likely as not: the ETag tells it apart
    put(s3, f"{base}/events/a.json", [{"id": 3}, {"id": 4}])
    with pytest.raises(
        SnapshotStoreError,
        match=r"a\.json' changed after .*now 20 bytes.*ETag.*original file back \(same bytes\)",
    ):
        upstream.read(0, 0, 2)
    assert upstream.read(0, 2, 5).to_pylist() == [
        {"id": 7},
        {"id": 8},
        {"id": 9},
    ]  # other files still fine
    assert objects(s3, f"{base}/snap/") == before  # the manifest was not touched

    put(s3, f"{base}/events/a.json", [{"id": 1}, {"id": 2}])  # the original bytes back
    assert upstream.read(0, 0, 2).to_pylist() == [{"id": 1}, {"id": 2}]
    assert upstream.available() == [5]  # a new LastModified, the same ETag: unchanged


def test_release_moves_objects_to_the_archive_and_reads_follow(s3: S3Server) -> None:
    base = "files-archive"
    for i in range(3):
        put(s3, f"{base}/events/f{i}.json", rows_for(f"f{i}", 4, base=4 * i))
    archive = s3.uri(base, "archive")
    options = {"upstream": "files", "path": s3.uri(base, "events"), "channels": "1"}
    state = s3.uri(base, "snap/_source")
    upstream = FilesUpstream.from_options({**options, "archiveTo": archive}, state)
    assert upstream.available() == [12]
    want = upstream.read(0, 0, 12).to_pylist()
    upstream.release(0, 9)
    assert sorted(objects(s3, f"{base}/events/")) == [f"{base}/events/f2.json"]
    assert sorted(objects(s3, f"{base}/archive/")) == [
        f"{base}/archive/f0.json",
        f"{base}/archive/f1.json",
    ]
    lines = manifest(s3, f"{base}/snap/_source/files_manifest.jsonl")
    assert {r["path"] for r in lines[1:] if r.get("archivedTo")} == {"f0.json", "f1.json"}
    assert upstream.available() == [12]  # archived objects are not discovered again
    restarted = FilesUpstream.from_options(options, state)
    assert restarted.read(0, 0, 12).to_pylist() == want


def test_a_delta_table_and_its_manifest_on_s3(s3: S3Server) -> None:
    table = s3.uri("delta-upstream", "table")
    for version in range(2):
        batch = pa.table({"id": pa.array(range(10 * version, 10 * version + 5), pa.int64())})
        write_deltalake(table, batch, mode="append", storage_options=s3.storage_options)
    state = s3.uri("delta-upstream", "snap/_source")
    options = {"upstream": "delta", "path": table, "channels": "1"}
    upstream = make_upstream(options, state)  # the store's registered settings, no options
    assert upstream.available() == [10]
    assert sorted(upstream.read(0, 0, 10)["id"].to_pylist()) == [*range(5), *range(10, 15)]
    restarted = make_upstream(options, state, required_by="test")
    assert restarted.available() == [10]
    lines = manifest(s3, "delta-upstream/snap/_source/delta_manifest.jsonl")
    assert (lines[0]["path"], lines[0]["lastVersion"]) == (table, 1)
