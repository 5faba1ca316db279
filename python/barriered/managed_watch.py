"""The managed handle's watch: one daemon thread per :func:`barriered.managed` handle that,
once a second while its query runs,

* says the handle is alive and answers rescale requests of ``barriered rescale PATH``
  (:mod:`barriered.control.rescale_mailbox`; a refusal is answered with its reason);
* applies the snapshot path's ``autoscale.*`` policy (:mod:`barriered.autoscale`; nothing
  while ``autoscale.enabled`` is not set): once per completed checkpoint it measures the
  source's backlog and rescales when the policy says so. Its rescales are in
  ``_rescales`` with the policy's reason; a refused one (e.g. a savepoint aborted) is
  logged and tried again later.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from barriered import wall_time
from barriered.api import query_coordinator
from barriered.autoscale import AutoscalePolicy, backlog_of
from barriered.control import rescale_mailbox as mailbox
from barriered.errors import ConfigError, RescaleError
from barriered.files.fileio import delete_file, read_json
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

#: The ``_rescales`` reason of a rescale the command line asked for.
REQUESTED = "requested by barriered rescale (command line)"


class Watched(Protocol):
    """What the watch needs of a :class:`~barriered.managed_query.ManagedQuery`."""

    query: Any

    @property
    def rescaling(self) -> bool: ...

    def rescale(
        self, partitions: int, timeout: float = 300.0, reason: str | None = None
    ) -> dict[str, Any]: ...

    def partitions_of(self, layout: SnapshotLayout) -> int | None: ...


def watch(handle: Watched, stopped: threading.Event, every: float = 1.0) -> None:
    """Watch ``handle`` until ``stopped`` is set (the thread's body)."""
    policy: AutoscalePolicy | None = None
    alive_ms, layout = 0, None
    while not stopped.wait(every):
        query = handle.query
        if handle.rescaling or query is None or not query.isActive:
            continue
        try:
            layout = query_coordinator(query, timeout=every)[1].layout
            now = wall_time.now_ms()
            if now - alive_ms >= mailbox.ALIVE_EVERY_MS:
                partitions = handle.partitions_of(layout)
                mailbox.alive(layout, str(query.id), str(query.runId), partitions, now)
                alive_ms = now
            _answer(handle, layout, now)
            if policy is None:
                conf = (read_json(layout.config_file, default={}) or {}).get("conf") or {}
                policy = AutoscalePolicy.from_record(conf)
            if policy.enabled and (decision := _observe(handle, policy, layout)) is not None:
                handle.rescale(decision.partitions, reason=decision.reason)
                policy.rescaled(wall_time.now_ms())
        except ConfigError as exc:  # no batch of this run finished yet
            log.debug("watch of managed query %s: %s", query.id, exc)
        except Exception as exc:  # the watch goes on: a refusal or a failed read
            log.warning("watch of managed query %s: %s", query.id, exc, exc_info=True)
    if layout is not None:  # no handle answers any more
        delete_file(layout.managed_file)


def _answer(handle: Watched, layout: SnapshotLayout, now_ms: int) -> None:
    """Carry out the rescale ``barriered rescale`` asked for, if one is pending."""
    request = mailbox.pending(layout)
    if request is None:
        return
    if now_ms > request.until_ms:
        error = "the request expired before the query's handle saw it; nothing was stopped"
        reply = mailbox.Answer(request.request_id, "refused", error=error)
    else:
        timeout = max(1.0, (request.until_ms - now_ms) / 1000)
        try:
            row = handle.rescale(request.partitions, timeout, REQUESTED)
            reply = mailbox.Answer(request.request_id, "completed", rescale=row)
        except RescaleError as exc:
            reply = mailbox.Answer(request.request_id, "refused", error=str(exc))
    mailbox.answer(layout, reply)


def _observe(handle: Watched, policy: AutoscalePolicy, layout: SnapshotLayout) -> Any:
    done = checkpoints_table.completed(layout)
    progress = handle.query.lastProgress
    partitions = handle.partitions_of(layout)
    if not done or progress is None or partitions is None:
        return None
    backlog = backlog_of(progress.sources[0].latestOffset if progress.sources else None)
    if backlog is None:
        return None
    last = int(done[-1]["checkpoint_id"])
    return policy.observe(last, backlog, partitions, wall_time.now_ms())
