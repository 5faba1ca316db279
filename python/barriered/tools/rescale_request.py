"""``barriered rescale PATH --partitions N``: rescale the running query a script started
through :func:`barriered.managed`, from another process (a shell, a scheduler).

The request goes through the snapshot path's mailbox
(:mod:`barriered.control.rescale_mailbox`): the managed handle in the script's driver
sees it within a second, rescales (:meth:`~barriered.managed_query.ManagedQuery.rescale`:
savepoint, stop, restore at the new partitions) and answers with the ``_rescales`` row
or the refusal, which this command prints or raises.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from barriered import wall_time
from barriered.control import rescale_mailbox as mailbox
from barriered.errors import RescaleError
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

#: How often the answer is looked for.
POLL_S = 0.5


def request_rescale(path: str, partitions: int, timeout: float = 300.0) -> dict[str, Any]:
    """Ask the managed handle of the query on snapshot path ``path`` to rescale it to
    ``partitions`` shuffle partitions, and wait for it.

    Parameters
    ----------
    path : str
        The query's snapshot path.
    partitions : int
        The new ``spark.sql.shuffle.partitions``.
    timeout : float, default 300
        Seconds the rescale may take (the handle's savepoint, stop and restart).

    Returns
    -------
    dict
        The rescale's ``_rescales`` row.

    Raises
    ------
    RescaleError
        No handle runs on the path (a query started without :func:`barriered.managed`,
        or stopped), another request is pending, the handle refused (its reason: a
        partition count out of range, a savepoint that failed...), or no answer came in
        time (the request is withdrawn). Nothing was changed but the mailbox's files.
    """
    layout = SnapshotLayout.existing(path)
    now = wall_time.now_ms()
    handle = mailbox.handle_of(layout, now)
    if handle is None:
        raise RescaleError(
            f"barriered rescale: no query started by barriered.managed(start, ...) runs on "
            f"{path!r} (its handle says it is alive in {layout.managed_file} every "
            f"{mailbox.ALIVE_EVERY_MS // 1000} s). Spark cannot restart a query with other "
            "partitions without its definition: start the query through barriered.managed. "
            "Nothing was changed"
        )
    waiting = mailbox.pending(layout)
    if waiting is not None and now <= waiting.until_ms:
        raise RescaleError(
            f"barriered rescale: a rescale request to {waiting.partitions} partitions is "
            f"pending on {path!r}; wait for it (or {layout.rescale_request_file} to go). "
            "Nothing was changed"
        )
    request = mailbox.RescaleRequest.new(partitions, now, int(timeout * 1000))
    mailbox.post(layout, request)
    # the handle looks once a second while it is alive: twice its sign-of-life period
    # without an answer is no handle
    deadline = time.monotonic() + timeout + 2 * mailbox.ALIVE_EVERY_MS / 1000
    while (reply := mailbox.answer_of(layout, request.request_id)) is None:
        if time.monotonic() > deadline:
            mailbox.withdraw(layout, request)
            raise RescaleError(
                f"barriered rescale: query {handle['query_id']} on {path!r} did not answer "
                f"the request within {timeout:.0f} s; it was withdrawn (barriered rescales "
                f"{path} shows whether a rescale happened)"
            )
        time.sleep(POLL_S)
    if reply.status != "completed" or reply.rescale is None:
        raise RescaleError(f"barriered rescale: {reply.error}")
    log.info("rescale request %s of %s: %s", request.request_id, path, reply.rescale)
    return reply.rescale
