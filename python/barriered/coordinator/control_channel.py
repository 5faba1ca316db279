"""The coordinator's side of the control record: its one writer.

The coordinator changes the record (:class:`~barriered.control.record.ControlRecord`) in
memory as it handles a batch (requests, cancels, completions, its heartbeat, the
schedule, a fatal error) and :meth:`ControlChannel.flush` writes it once at the end. A
record equal to the one last written is written again only once ``refresh_ms`` passed
(which heals a write of a zombie run). Nothing is written once a newer run took the
snapshot path over: its coordinator continues the record, and a zombie's write would
replace it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from barriered.control.record import ControlFiles, ControlRecord

log = logging.getLogger(__name__)


class ControlChannel:
    """The control record of one run's coordinator, and when it is written.

    The coordinator changes :attr:`record`; :meth:`heartbeat` notes a handled batch;
    :meth:`flush` writes the record.

    Parameters
    ----------
    files : ControlFiles
        The snapshot path's layout (where the record lives).
    epoch : int or None
        The coordinator's run; the record continues the checkpoints of the one on the
        path, without another run's schedule and fatal error.
    refresh_ms : int
        How often an unchanged record is written again, and the heartbeat renewed.
    taken_over : callable
        Whether a newer run took the snapshot path over.
    """

    def __init__(
        self,
        files: ControlFiles,
        epoch: int | None,
        refresh_ms: int,
        taken_over: Callable[[], bool],
    ) -> None:
        self._uri = files.control_file
        self._refresh_ms = refresh_ms
        self._taken_over = taken_over
        #: The record as the coordinator means it now (written by :meth:`flush`).
        self.record = ControlRecord.read(files).for_run(epoch)
        self._written: ControlRecord | None = None
        self._written_ms = 0
        self._beat_ms: int | None = None

    def heartbeat(self, batch_id: int, now_ms: int) -> None:
        """Note that the coordinator handled ``batch_id`` (at most once per ``refresh_ms``)."""
        if self._beat_ms is not None and now_ms - self._beat_ms < self._refresh_ms:
            return
        self.record = self.record.with_heartbeat(batch_id, now_ms)
        self._beat_ms = now_ms

    def flush(self, now_ms: int) -> None:
        """Write the record unless it is unchanged and fresh or the path was taken over."""
        fresh = now_ms - self._written_ms < self._refresh_ms
        if self.record == self._written and fresh:
            return
        if self._taken_over():
            log.info("control record not written: a newer run took %s over", self._uri)
            return
        self.record.write(self._uri)
        self._written, self._written_ms = self.record, now_ms
        schedule = self.record.schedule
        if schedule is not None:
            log.debug(
                "checkpoint %d scheduled at %d ms (%s)%s",
                schedule.checkpoint_id,
                schedule.due_ms,
                schedule.mode,
                "" if schedule.paused is None else f", paused: {schedule.paused}",
            )
