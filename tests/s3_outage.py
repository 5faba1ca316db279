"""An outage of the local S3 server, on demand: a TCP relay in front of it that answers
``503 Slow Down`` while the outage lasts.

``python s3_outage.py PORT TARGET_PORT COUNT_FILE`` relays every connection to 127.0.0.1:PORT to the
S3 server on TARGET_PORT, byte for byte (so any client and protocol detail passes). On
SIGUSR1 the outage starts: open connections are cut and every new request gets
``HTTP/1.1 503 Slow Down`` (S3's own throttling answer, which every client retries) and a
closed connection (how many so far: in COUNT_FILE); SIGUSR2 ends it. The server behind
keeps its objects (moto keeps them in memory: stopping it would lose the bucket).
:class:`S3Outage` starts the relay as a child process and stops it by pid.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from barriered.local.processes import die_with_parent, free_port

_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
SLOW_DOWN = (
    b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
    + f"Content-Length: {len(_BODY)}\r\nConnection: close\r\n\r\n".encode()
    + _BODY
)


class S3Outage:
    """The relay process in front of the S3 server on ``target_port``.

    :meth:`start` it, point clients at :attr:`endpoint`, and call :meth:`down` for an
    outage of a few seconds; :meth:`stop` ends the process.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._count = Path(tempfile.mkstemp(prefix="barriered-s3-outage-")[1])

    @property
    def endpoint(self) -> str:
        """The relay's URL (plain HTTP)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3Outage:
        """Launch the relay and wait until it accepts connections."""
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(self.port), str(self.target_port), str(self._count)],
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),
        )
        atexit.register(self.stop)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the S3 outage relay did not listen on {self.port}")

    def outage(self, on: bool) -> None:
        """Start (``on``) or end the outage."""
        assert self.process is not None
        self.process.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """An outage for as long as the block runs."""
        self.outage(True)
        try:
            yield
        finally:
            self.outage(False)

    def refused(self) -> int:
        """How many requests were answered 503 so far."""
        text = self._count.read_text() if self._count.exists() else ""
        return int(text or 0)

    def stop(self) -> None:
        """Terminate the relay by pid (safe to call twice)."""
        process, self.process = self.process, None
        if process is not None:
            atexit.unregister(self.stop)
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._count.unlink(missing_ok=True)


# -- the relay process ----------------------------------------------------------------------

_down = threading.Event()
_answered = [0]
_count_file: list[Path] = []
_open: set[socket.socket] = set()
_lock = threading.Lock()


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, target):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def _serve(client: socket.socket, target_port: int) -> None:
    if _down.is_set():
        client.settimeout(5)
        with contextlib.suppress(OSError):
            head = b""
            while b"\r\n\r\n" not in head and (chunk := client.recv(65536)):
                head += chunk
            client.sendall(SLOW_DOWN)
            with _lock:
                _answered[0] += 1
                _count_file[0].write_text(str(_answered[0]))
        client.close()
        return
    try:
        upstream = socket.create_connection(("127.0.0.1", target_port))
    except OSError:
        client.close()
        return
    with _lock:
        _open.update((client, upstream))
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    with _lock:
        _open.difference_update((client, upstream))
    client.close()
    upstream.close()


def _cut(on: bool) -> None:
    if on:
        _down.set()
        with _lock:
            for s in list(_open):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
    else:
        _down.clear()


def main(port: int, target_port: int, count_file: str) -> None:
    _count_file.append(Path(count_file))
    signal.signal(signal.SIGUSR1, lambda *_: _cut(True))
    signal.signal(signal.SIGUSR2, lambda *_: _cut(False))
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve, args=(client, target_port), daemon=True).start()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
