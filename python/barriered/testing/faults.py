"""Fault injection for recovery tests: crash a query at a chosen point, exactly once.

Arm a fault with :func:`inject` before starting (or while running) a query; the first
party that reaches the point for a matching checkpoint crashes there:

``aligning``
    The source planner (driver), while a checkpoint is aligning: its barrier positions
    were fixed in an earlier batch and its cut has not happened. ``latestOffset``
    raises; the query fails.
``inflight_capture``
    An executor capturing a channel's in-flight records, after it wrote the data file
    and before it acknowledged: the task fails, and with it the query (local Spark does
    not retry tasks).
``before_commit``
    The coordinator, once every participant acknowledged (the executors wrote every
    snapshot file), before it commits anything.
``after_commit``
    The coordinator right after the ``state`` table commit (the completion point),
    before it records the checkpoint in ``_checkpoints``, applies retention or tells the
    source.

A coordinator fault stands for a crash of the driver: that coordinator does nothing
more (no commit, no row, no cleanup) and the source fails the query at its next planning
step. Every crash leaves the snapshot path exactly as a real crash at that point would;
a restore (``restoreFrom``) must then give the same final state as a run without it.

Faults are small files under ``<snapshotPath>/_coordinator/faults/``, so the driver,
the source's Python worker and executors all see them. The first party to reach the
point claims the file with an atomic rename, so a fault fires once; :func:`fired` tells
(without timing luck) when it has, and :func:`wait_fired` waits for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from barriered.errors import InjectedFault
from barriered.statestore.fileio import exists, filesystem, join, read_json, write_json
from barriered.statestore.layout import SnapshotLayout

ALIGNING = "aligning"
INFLIGHT_CAPTURE = "inflight_capture"
BEFORE_COMMIT = "before_commit"
AFTER_COMMIT = "after_commit"
POINTS = (ALIGNING, INFLIGHT_CAPTURE, BEFORE_COMMIT, AFTER_COMMIT)

#: Start of the message of every injected crash.
MESSAGE_PREFIX = "injected fault"


def _folder(layout: SnapshotLayout) -> str:
    return join(layout.root, "_coordinator", "faults")


def _armed(layout: SnapshotLayout, point: str) -> str:
    return join(_folder(layout), f"{point}.json")


def _fired(layout: SnapshotLayout, point: str) -> str:
    return join(_folder(layout), f"{point}.fired.json")


def inject(snapshot_path: str, point: str, checkpoint_id: int = 1) -> None:
    """Arm a crash at ``point`` for the first checkpoint with id >= ``checkpoint_id``.

    Parameters
    ----------
    snapshot_path : str
        The query's snapshot path.
    point : str
        One of :data:`POINTS`.
    checkpoint_id : int, default 1
        The crash happens at the first checkpoint at or above this id that reaches
        ``point``.
    """
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; choose one of {POINTS}")
    write_json(_armed(SnapshotLayout.at(snapshot_path), point), {"from": checkpoint_id})


def hit(
    layout: SnapshotLayout,
    point: str,
    checkpoint_id: int,
    on_crash: Callable[[str], None] | None = None,
) -> None:
    """Crash here if a fault is armed at ``point`` for ``checkpoint_id``.

    Costs one file-existence check when nothing is armed.

    Parameters
    ----------
    on_crash : callable, optional
        Called with the message before the fault is reported as fired (the coordinator
        uses it to stop and to hand the crash to the source).

    Raises
    ------
    InjectedFault
        When the fault fires.
    """
    armed = _armed(layout, point)
    if not exists(armed):
        return
    plan = read_json(armed, default=None)
    if plan is None or checkpoint_id < int(plan.get("from", 1)):
        return
    fs, path = filesystem(armed)
    try:
        fs.move(path, f"{path}.claimed")
    except OSError:
        return  # another party claimed it first
    message = f"{MESSAGE_PREFIX} at {point} (checkpoint {checkpoint_id})"
    if on_crash is not None:
        on_crash(message)
    write_json(
        _fired(layout, point),
        {"point": point, "checkpoint_id": checkpoint_id, "at_ms": int(time.time() * 1000)},
    )
    raise InjectedFault(message)


def fired(snapshot_path: str, point: str) -> dict[str, Any] | None:
    """Return the record of the fault at ``point`` once it fired (None before)."""
    record: dict[str, Any] | None = read_json(
        _fired(SnapshotLayout.at(snapshot_path), point), default=None
    )
    return record


def wait_fired(snapshot_path: str, point: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Wait until the fault at ``point`` fired; return its record.

    Raises
    ------
    TimeoutError
        When it has not fired within ``timeout_s`` (the point was never reached).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = fired(snapshot_path, point)
        if record is not None:
            return record
        time.sleep(0.1)
    raise TimeoutError(f"the fault at {point!r} on {snapshot_path!r} did not fire")
