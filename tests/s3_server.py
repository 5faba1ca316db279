"""One local S3 server for the tests: moto's standalone server (``moto[server]``).

:class:`S3Server` runs ``python -m moto.server`` as a child process on a free port of
127.0.0.1, waits until it answers, creates one bucket for the test session, and stops it
by pid (SIGTERM, SIGKILL after a grace period). The server keeps its objects in memory:
nothing of it is left on the local disk.

The server is a child of this process: it gets SIGTERM when this process dies, however it
dies (``PR_SET_PDEATHSIG``), and :meth:`S3Server.stop` runs at exit too.

Clients get :attr:`S3Server.storage_options` (the ``snapshotStorageOptions`` of a query
whose paths are on the server: endpoint, region, credentials, plain HTTP, path-style
requests) and :meth:`S3Server.uri`. moto accepts any credentials; the secret key is random
per session so that a test can look for it in every file and log (it must be nowhere).
"""

from __future__ import annotations

import atexit
import logging
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from barriered.local.processes import die_with_parent, free_port, stop, wait_until_it_answers

LOG = logging.getLogger(__name__)
START_TIMEOUT = 30.0
STOP_GRACE = 10.0
REGION = "us-east-1"


class S3ServerError(RuntimeError):
    """The server did not start, or a call to it failed."""


class S3Server:
    """moto's S3 server on a free localhost port with one bucket.

    :meth:`start` it; :attr:`endpoint`, :attr:`bucket`, :attr:`storage_options` and
    :meth:`uri` are what queries and clients need; :meth:`stop` ends the process.
    """

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.bucket = f"barriered-{uuid.uuid4().hex[:12]}"
        self.access_key = f"AKIA{uuid.uuid4().hex[:16].upper()}"
        self.secret_key = f"secret-{uuid.uuid4().hex}"
        self.started_in = 0.0  # seconds from launch until the bucket existed
        self._log: Path | None = None

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The server's URL (plain HTTP)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3Server:
        """Launch the server, wait until it answers, and create the session's bucket."""
        self.port = free_port()
        self._log = Path(tempfile.mkstemp(prefix="barriered-s3-", suffix=".log")[1])
        launched = time.monotonic()
        with self._log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),  # only calls prctl in the child
            )
        atexit.register(self.stop)
        try:
            wait_until_it_answers(
                self.process,
                lambda: bool(self.client().create_bucket(Bucket=self.bucket)),
                START_TIMEOUT,
                f"the S3 server on {self.endpoint}",
                self.log_tail,
            )
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - launched
        LOG.info(
            "S3 server %s up in %.1f s, bucket %s", self.endpoint, self.started_in, self.bucket
        )
        return self

    def stop(self) -> None:
        """SIGTERM the server, SIGKILL it after :data:`STOP_GRACE` seconds, and wait for
        it. Safe to call twice."""
        process, self.process = self.process, None
        if process is not None:
            atexit.unregister(self.stop)
            stop(process, STOP_GRACE, "the S3 server")
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None

    @property
    def pid(self) -> int:
        """The server's process id."""
        if self.process is None:
            raise S3ServerError("the S3 server is not running")
        return self.process.pid

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server's output (for failure messages)."""
        if self._log is None or not self._log.exists():
            return ""
        return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])

    # -- clients ------------------------------------------------------------------------

    @property
    def storage_options(self) -> dict[str, str]:
        """The ``snapshotStorageOptions`` of paths on this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ALLOW_HTTP": "true",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        }

    def uri(self, *parts: str) -> str:
        """``s3://<bucket>/<parts...>``."""
        return "/".join([f"s3://{self.bucket}", *(p.strip("/") for p in parts)])

    def client(self) -> Any:
        """A boto3 S3 client on this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key of the bucket under ``prefix``, sorted."""
        pages = (
            self.client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self.bucket, Prefix=prefix)
        )
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def read(self, key: str) -> bytes:
        """The bytes of one object."""
        body: bytes = self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body

    def no_secret_anywhere(self, prefix: str, logs: str) -> list[str]:
        """Search every object under ``prefix`` and ``logs`` for the secret key and fail
        naming the objects holding it; returns the object keys searched."""
        keys = self.keys(prefix)
        holding = [k for k in keys if self.secret_key.encode() in self.read(k)]
        assert holding == [], f"objects holding the secret key: {holding}"
        assert self.secret_key not in logs, "the logs hold the secret key"
        return keys
