"""What a local server's child process needs: a free localhost port, dying with the
process that started it, waiting until it answers, stopping it by pid, and whether a pid
runs (:mod:`barriered.local.kafka_broker`, and the tests' S3 server)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from barriered.errors import LocalServerError

log = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent() -> Any:
    """A function that has the kernel send SIGTERM to the process calling it when that
    process's parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``): a ``preexec_fn`` for a
    child; ``None`` elsewhere. The libc handle is loaded here, before any fork."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).prctl
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


def running(pid: int) -> bool:
    """Whether the process runs: a zombie (dead, its parent gone and no reaper) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: the state after the command's parenthesis
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def wait_until_it_answers(
    process: subprocess.Popen[bytes],
    answers: Callable[[], bool],
    timeout: float,
    what: str,
    log_tail: Callable[[], str],
) -> None:
    """Call ``answers`` until it returns True (an exception counts as not yet).

    Raises
    ------
    LocalServerError
        ``process`` exited first, or ``timeout`` seconds passed (with ``log_tail()``).
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LocalServerError(
                f"{what} exited with {process.returncode} while starting\n{log_tail()}"
            )
        try:
            if answers():
                return
        except Exception as exc:  # connection refused until it listens
            last = exc
        time.sleep(0.2)
    raise LocalServerError(f"{what} did not answer within {timeout:.0f} s ({last})\n{log_tail()}")


def stop(process: subprocess.Popen[bytes], grace: float, what: str) -> None:
    """SIGTERM ``process``, SIGKILL it after ``grace`` seconds, and wait for it."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) ignored SIGTERM: SIGKILL", what, process.pid)
            process.kill()
            process.wait()
