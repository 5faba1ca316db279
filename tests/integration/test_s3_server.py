"""The test suite's own S3 server (``tests/s3_server.py``): moto's standalone server in a
child process, one bucket, objects written and read back, stopped and killed by pid."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from barriered.local.processes import running
from s3_server import START_TIMEOUT, S3Server

pytestmark = pytest.mark.s3


def test_the_session_bucket_takes_and_lists_objects(s3_server: S3Server) -> None:
    server = s3_server
    assert 0 < server.started_in < START_TIMEOUT
    assert running(server.pid)
    assert server.endpoint == f"http://127.0.0.1:{server.port}"
    assert server.uri("a/", "/b") == f"s3://{server.bucket}/a/b"
    buckets = [b["Name"] for b in server.client().list_buckets()["Buckets"]]
    assert server.bucket in buckets
    client = server.client()
    client.put_object(Bucket=server.bucket, Key="server-test/x.bin", Body=b"\x00\x01")
    client.put_object(Bucket=server.bucket, Key="server-test/d/y.txt", Body=b"y")
    assert server.keys("server-test/") == ["server-test/d/y.txt", "server-test/x.bin"]
    assert server.read("server-test/x.bin") == b"\x00\x01"
    # create-if-absent (If-None-Match: *), what object stores offer instead of a rename
    with pytest.raises(Exception, match="PreconditionFailed"):
        client.put_object(
            Bucket=server.bucket, Key="server-test/x.bin", Body=b"other", IfNoneMatch="*"
        )
    assert server.read("server-test/x.bin") == b"\x00\x01"
    client.delete_objects(
        Bucket=server.bucket,
        Delete={"Objects": [{"Key": k} for k in server.keys("server-test/")]},
    )
    assert server.keys("server-test/") == []


_CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
from barriered.local.processes import die_with_parent
from s3_server import S3Server
die_with_parent()()  # this child too, should the test's own process be killed
server = S3Server().start()
print(server.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(
    "how", [pytest.param(signal.SIGTERM, marks=pytest.mark.full), signal.SIGKILL]
)
def test_a_server_is_stopped_by_pid_and_dies_with_the_process_that_started_it(
    how: signal.Signals,
) -> None:
    """:meth:`S3Server.stop` ends its process; a test process killed without running its
    finalizers leaves no server running either."""
    server = S3Server().start()
    pid = server.pid
    server.stop()
    assert not running(pid)
    server.stop()  # twice is fine

    tests = str(Path(__file__).resolve().parents[1])
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(tests=tests)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        pid = int(child.stdout.readline())
        assert running(pid)
        child.send_signal(how)
        child.wait(30)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 30
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(pid)
