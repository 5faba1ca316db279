"""The source's watch on the checkpoint coordinator: no query runs on without checkpoints.

The coordinator is a ``StreamingQueryListener`` in the process that called
:func:`barriered.install` (the notebook's, over Spark Connect). When it is gone (a Spark
Connect client drops every listener when its event stream breaks; a listener that was
never registered), micro-batches still run but nothing triggers or commits a checkpoint.
The coordinator leaves a heartbeat in the trigger log as it handles batches; the source
counts the batches it commits and fails the query with
:class:`~barriered.errors.CoordinatorLostError` when at least :data:`MIN_BATCHES` ran and
``coordinatorTimeout`` passed without a new heartbeat. Only the source's own clock is used
(the coordinator may run on another machine).
"""

from __future__ import annotations

import logging

from barriered.errors import CoordinatorLostError

log = logging.getLogger(__name__)

#: Batches that must run without a heartbeat (besides the timeout) before the query fails.
MIN_BATCHES = 3


class CoordinatorWatchdog:
    """Fails the query when batches progress but the coordinator's heartbeat does not.

    Parameters
    ----------
    snapshot_path : str
        For the message.
    timeout_ms : int
        ``coordinatorTimeout``.
    heartbeat : tuple of int, optional
        The heartbeat in the trigger log when the source started (a previous run's).
    now_ms : int
        The source's clock at start.
    """

    def __init__(
        self, snapshot_path: str, timeout_ms: int, heartbeat: tuple[int, int] | None, now_ms: int
    ) -> None:
        self.snapshot_path = snapshot_path
        self.timeout_ms = timeout_ms
        self._heartbeat = heartbeat
        self._seen_ms = now_ms
        self._batches = 0
        self._batches_at_seen = 0

    def batch_committed(self) -> None:
        """Count one micro-batch the query finished."""
        self._batches += 1

    def check(self, heartbeat: tuple[int, int] | None, now_ms: int) -> None:
        """Note ``heartbeat`` (read from the trigger log now); raise if the coordinator is lost.

        Raises
        ------
        CoordinatorLostError
            When :data:`MIN_BATCHES` batches and ``timeout_ms`` passed since the last new
            heartbeat (or since the source started, when none came).
        """
        if heartbeat != self._heartbeat:
            self._heartbeat = heartbeat
            self._seen_ms = now_ms
            self._batches_at_seen = self._batches
            return
        batches = self._batches - self._batches_at_seen
        silent_ms = now_ms - self._seen_ms
        if batches < MIN_BATCHES or silent_ms < self.timeout_ms:
            return
        since = "it started" if heartbeat is None else f"it handled batch {heartbeat[0]}"
        message = (
            f"no checkpoint coordinator for the barriered source at {self.snapshot_path!r}: "
            f"{batches} micro-batches ran in {silent_ms / 1000:.1f} s since {since} "
            "(coordinatorTimeout "
            f"{self.timeout_ms / 1000:g} s), so no checkpoint would be taken. Its listener is "
            "gone (a Spark Connect client drops its listeners when their event stream "
            "breaks) or was never registered: call barriered.install(spark) again and "
            "restart the query (its checkpointLocation continues where it stopped)"
        )
        log.error(message)
        raise CoordinatorLostError(message)
