"""A JSON file rewritten in place on S3 (the control record) read while it is
replaced: every read returns one whole version (``fileio.read_json`` reads again what came
back cut off, see ``fileio.TORN_READ_ATTEMPTS``), never a corrupt-file error."""

from __future__ import annotations

import threading
import time

import pytest

from barriered.files import storage
from barriered.files.fileio import read_json, write_json
from s3_server import S3Server

pytestmark = pytest.mark.s3


def test_a_json_file_read_while_it_is_rewritten_on_s3_reads_whole(s3_server: S3Server) -> None:
    storage.register(s3_server.uri(), s3_server.storage_options)
    uri = s3_server.uri("torn", "control.json")
    write_json(uri, {"n": 0, "pad": ""})
    written = [0]
    stop = threading.Event()

    def rewrite() -> None:  # versions of changing length, every 5 ms, as the schedule's
        while not stop.wait(0.005):
            n = written[-1] + 1
            write_json(uri, {"n": n, "pad": "x" * (n % 40)})
            written.append(n)

    writer = threading.Thread(target=rewrite)
    writer.start()
    seen = []
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 300 and time.monotonic() < deadline:
            seen.append(read_json(uri))
    finally:
        stop.set()
        writer.join()
    assert len(seen) == 300
    assert all(v == {"n": v["n"], "pad": "x" * (v["n"] % 40)} for v in seen)
    assert len({v["n"] for v in seen}) > 10, "the reads overlapped the rewrites"
