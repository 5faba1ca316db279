"""A restore point on S3 checks its data files with one listing per table
(``restore_point._check_listed``): a state object that is missing, or whose size is not
the Delta log's, is refused naming it, and the refusal writes nothing."""

from __future__ import annotations

import re

import pytest

from barriered.errors import RestoreError
from barriered.files import storage
from barriered.statestore.restore_point import resolve
from s3_server import S3Server
from snapshots import snapshot_path

pytestmark = pytest.mark.s3


def test_a_missing_or_resized_state_object_on_s3_is_refused_by_name(s3_server: S3Server) -> None:
    storage.register(s3_server.uri(), s3_server.storage_options)
    root = s3_server.uri("restore-check", "snap")
    layout = snapshot_path(root, [[10, 10], [30, 20]])  # type: ignore[arg-type]
    point = resolve(layout, "latest")
    point.check_files()  # every object whole
    victim = point.state_files()[0]
    key = f"restore-check/snap/state/{victim.path}"
    uri = f"{root}/state/{victim.path}"

    s3_server.client().put_object(Bucket=s3_server.bucket, Key=key, Body=b"garbage")
    before = {k: s3_server.read(k) for k in s3_server.keys("restore-check/")}
    message = f"data file '{uri}' has 7 bytes, the Delta log says {victim.size}. Nothing"
    with pytest.raises(RestoreError, match=re.escape(message)):
        resolve(layout, "latest").check_files()
    assert {k: s3_server.read(k) for k in s3_server.keys("restore-check/")} == before

    s3_server.client().delete_object(Bucket=s3_server.bucket, Key=key)
    message = f"data file '{uri}' is missing, the Delta log says {victim.size}. Nothing"
    with pytest.raises(RestoreError, match=re.escape(message)):
        resolve(layout, "latest").check_files()
    assert key not in s3_server.keys("restore-check/")
