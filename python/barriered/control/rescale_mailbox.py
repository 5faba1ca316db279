"""Rescale requests from outside the driver: ``barriered rescale PATH --partitions N``
for a query a script started through :func:`barriered.managed`.

Spark keeps no way into a running driver, so the request travels through the snapshot
path, as the coordinator's control record does, with one writer per file:

* ``_coordinator/managed.json``: the managed handle's sign of life (query and run ids,
  partitions, when), written by the handle every :data:`ALIVE_EVERY_MS`; a requester
  refuses, writing nothing, when it is missing or older than :data:`ALIVE_WITHIN_MS` (no
  handle would answer: a query started without :func:`barriered.managed` cannot be
  restarted with other partitions);
* ``_coordinator/rescale/request.json``: the pending request (its id, the partitions, when
  and until when it is valid), written by the requester when none is pending and removed
  by the handle once answered, or by the requester when it gave up;
* ``_coordinator/rescale/<request id>.json``: the handle's answer (the ``_rescales`` row,
  or the refusal's message), written once and removed by the requester as it reads it.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from barriered.files.fileio import delete_file, read_json, write_json

__all__ = [
    "Answer",
    "RescaleFiles",
    "RescaleRequest",
    "alive",
    "answer",
    "answer_of",
    "handle_of",
    "pending",
    "post",
    "withdraw",
]

log = logging.getLogger(__name__)

#: How often the managed handle says it is alive.
ALIVE_EVERY_MS = 10_000
#: A sign of life older than this: no handle is running.
ALIVE_WITHIN_MS = 3 * ALIVE_EVERY_MS


class RescaleFiles(Protocol):
    """Where the mailbox lives (a :class:`~barriered.statestore.layout.SnapshotLayout`)."""

    @property
    def managed_file(self) -> str: ...

    @property
    def rescale_request_file(self) -> str: ...

    def rescale_answer_file(self, request_id: str) -> str: ...


@dataclass(frozen=True)
class RescaleRequest:
    """A pending request: rescale to ``partitions``, valid until ``until_ms``."""

    request_id: str
    partitions: int
    requested_ms: int
    until_ms: int

    @classmethod
    def new(cls, partitions: int, now_ms: int, timeout_ms: int) -> RescaleRequest:
        """A request made now, valid for ``timeout_ms``."""
        return cls(uuid.uuid4().hex, partitions, now_ms, now_ms + timeout_ms)


@dataclass(frozen=True)
class Answer:
    """The handle's answer: ``rescale`` (the ``_rescales`` row) or ``error``."""

    request_id: str
    status: str  # "completed" | "refused"
    rescale: dict[str, Any] | None = None
    error: str | None = None


def alive(files: RescaleFiles, query_id: str, run_id: str, partitions: Any, now_ms: int) -> None:
    """The handle's sign of life."""
    write_json(
        files.managed_file,
        {"query_id": query_id, "run_id": run_id, "partitions": partitions, "alive_ms": now_ms},
    )


def handle_of(files: RescaleFiles, now_ms: int) -> dict[str, Any] | None:
    """The running handle's last sign of life, or None when none is recent."""
    seen = read_json(files.managed_file, default=None)
    if not seen or now_ms - int(seen.get("alive_ms", 0)) > ALIVE_WITHIN_MS:
        return None
    return dict(seen)


def pending(files: RescaleFiles) -> RescaleRequest | None:
    """The pending request, if any."""
    raw = read_json(files.rescale_request_file, default=None)
    return None if not raw else RescaleRequest(**raw)


def post(files: RescaleFiles, request: RescaleRequest) -> None:
    """Write ``request`` as the pending one (the requester checked none is)."""
    write_json(files.rescale_request_file, asdict(request))
    log.info("rescale request %s posted: %d partitions", request.request_id, request.partitions)


def withdraw(files: RescaleFiles, request: RescaleRequest) -> None:
    """Remove ``request`` if it is still the pending one."""
    current = pending(files)
    if current is not None and current.request_id == request.request_id:
        delete_file(files.rescale_request_file)


def answer(files: RescaleFiles, reply: Answer) -> None:
    """Write the answer to a request, and remove the request."""
    write_json(files.rescale_answer_file(reply.request_id), asdict(reply))
    delete_file(files.rescale_request_file)
    log.info("rescale request %s answered: %s", reply.request_id, reply.status)


def answer_of(files: RescaleFiles, request_id: str) -> Answer | None:
    """The answer to request ``request_id``, once written; it is removed as it is read
    (the requester reads it once: no answer stays behind)."""
    uri = files.rescale_answer_file(request_id)
    raw = read_json(uri, default=None)
    if not raw:
        return None
    delete_file(uri)
    return Answer(**raw)
