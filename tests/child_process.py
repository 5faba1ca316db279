"""What the test servers (``kafka_broker.py``, ``s3_server.py``) share about their child
process: a free localhost port, dying with the test process, and whether a pid runs."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any


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
