"""The points where a recovery test may crash a query, and the one hook that crashes it.

Production code calls :func:`hit` at each point below. The call does nothing (one
boolean test) unless the process was started with the environment variable
``BARRIERED_FAULTS`` naming the module that handles the hits, whose ``fire`` then runs
at every hit (the same arguments as :func:`hit`). The test suite sets
``BARRIERED_FAULTS=barriered.testing.faults`` before any Spark process starts (its Python
workers, executors and drivers inherit it), so a fault armed by that module's ``inject``
fires there; production code names no test module. Users never set it, and the wheel
does not ship ``barriered.testing`` (a source checkout's, for its tests).

``aligning``
    The source planner (driver), while a checkpoint is aligning: its barrier positions
    were fixed in an earlier batch and its cut has not happened.
``inflight_capture``
    An executor capturing a channel's in-flight records, after it wrote the data file
    and before it acknowledged.
``state_snapshot``
    An executor writing a keyed partition's changed state at a cut, after it wrote the
    Parquet file and before it acknowledged.
``state_compaction``
    An executor writing a keyed partition's whole state at a cut (after a restore, or
    past ``keyed.maxRuns`` files), after it wrote the Parquet file and before it
    acknowledged.
``before_commit``
    The coordinator, once every participant acknowledged, before it commits anything.
``after_commit``
    The coordinator right after the ``state`` table commit (the completion point),
    before the sink commit, the ``_checkpoints`` row, retention and telling the source.
``mid_publish``
    The coordinator publishing a completed checkpoint to a ``barriered-kafka`` sink,
    after half its records were produced (and flushed) in the open Kafka transaction,
    before the transaction commits.
``after_sink_commit``
    The coordinator right after the sink commit of a completed checkpoint, before it
    records the checkpoint in ``_checkpoints``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, Protocol

from barriered.errors import BarrieredError

ALIGNING = "aligning"
INFLIGHT_CAPTURE = "inflight_capture"
STATE_SNAPSHOT = "state_snapshot"
STATE_COMPACTION = "state_compaction"
BEFORE_COMMIT = "before_commit"
AFTER_COMMIT = "after_commit"
AFTER_SINK_COMMIT = "after_sink_commit"
MID_PUBLISH = "mid_publish"
POINTS = (
    ALIGNING,
    INFLIGHT_CAPTURE,
    STATE_SNAPSHOT,
    STATE_COMPACTION,
    BEFORE_COMMIT,
    AFTER_COMMIT,
    MID_PUBLISH,
    AFTER_SINK_COMMIT,
)

#: The environment variable that enables fault injection in a process: the module that
#: handles the hits (``barriered.testing.faults``).
ENV = "BARRIERED_FAULTS"
#: The module handling the hits in this process (read once, at import); None: off.
HANDLER = os.environ.get(ENV) or None
#: Whether faults can fire in this process.
ENABLED = HANDLER is not None

_fire: Callable[..., None] | None = None


class SnapshotPath(Protocol):
    """The query's snapshot path (a :class:`~barriered.statestore.layout.SnapshotLayout`),
    under which armed faults live; the handler reads it, this module only passes it on."""

    @property
    def root(self) -> str: ...


def hit(
    layout: SnapshotPath,
    point: str,
    checkpoint_id: int,
    on_crash: Callable[[BarrieredError], None] | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Crash (or block) here if fault injection is enabled and a fault is armed.

    Parameters
    ----------
    layout : SnapshotPath
        The query's snapshot path (armed faults live under it).
    point : str
        One of :data:`POINTS`.
    checkpoint_id : int
        The checkpoint this party works on.
    on_crash : callable, optional
        Called with the :class:`~barriered.errors.InjectedFault` before the fault is
        reported as fired and the error raised.
    detail : dict, optional
        JSON-able facts about what the party did so far, kept in the fault's record.

    Raises
    ------
    InjectedFault
        When an armed ``"raise"`` fault fires.
    """
    if HANDLER is not None:
        global _fire
        if _fire is None:
            _fire = importlib.import_module(HANDLER).fire
        _fire(layout, point, checkpoint_id, on_crash, detail)
