"""One writer per snapshot path on S3 (the local S3 server, ``tests/s3_server.py``): a
second run is refused while the first is alive, and two runs that take a new path at the
same moment cannot both win (delta-rs's conditional PUT of the ``_owners`` log entry)."""

from __future__ import annotations

import os
import threading

import pytest

from barriered.coordinator.driver import QueryCoordinator
from barriered.errors import SnapshotPathInUseError
from barriered.files import storage
from barriered.statestore import ownership
from barriered.statestore.layout import SnapshotLayout
from s3_server import S3Server

pytestmark = pytest.mark.s3
LEASE_MS = 60_000


def objects(s3: S3Server, prefix: str) -> dict[str, str]:
    """Key -> ETag of every object under ``prefix``."""
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


@pytest.fixture
def s3(s3_server: S3Server) -> S3Server:
    storage._REGISTERED.clear()
    return s3_server


def test_a_second_writer_on_an_s3_snapshot_path_is_refused(s3: S3Server) -> None:
    layout = SnapshotLayout.at(s3.uri("owners-second"), s3.storage_options)
    owner = ownership.acquire(layout, LEASE_MS)
    QueryCoordinator(layout, epoch=owner.epoch).identify("q-1111", "run-2222")
    before = objects(s3, "owners-second/")
    assert any(k.startswith("owners-second/_owners/_delta_log/") for k in before)
    with pytest.raises(SnapshotPathInUseError) as refused:
        ownership.acquire(layout, LEASE_MS)
    message = str(refused.value)
    assert f"snapshot path {layout.root!r} is in use by a running query" in message
    assert "query id q-1111, run id run-2222, epoch 0, running since" in message
    assert f"(pid {os.getpid()})" in message
    assert s3.secret_key not in message
    assert objects(s3, "owners-second/") == before


def test_two_writers_taking_a_new_s3_path_at_once_cannot_both_win(s3: S3Server) -> None:
    layout = SnapshotLayout.at(s3.uri("owners-race"), s3.storage_options)
    start = threading.Barrier(2)
    won: list[int] = []
    refused: list[str] = []

    def take() -> None:
        start.wait()
        try:
            won.append(ownership.acquire(layout, LEASE_MS).epoch)
        except SnapshotPathInUseError as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=take) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert won == [0]
    assert len(refused) == 1 and "is in use by a running query" in refused[0]
    logs = [k for k in objects(s3, "owners-race/_owners/_delta_log/") if k.endswith(".json")]
    assert logs == ["owners-race/_owners/_delta_log/00000000000000000000.json"]
