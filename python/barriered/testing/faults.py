"""Fault injection for recovery tests: crash a query at a chosen point, exactly once.

Arm a fault with :func:`inject` before starting (or while running) a query; the first
party that reaches the point (:data:`barriered.crash_points.POINTS`, where they are
described) for a matching checkpoint crashes there. Faults fire only in processes
started with ``BARRIERED_FAULTS=barriered.testing.faults``
(:data:`barriered.crash_points.ENV`, naming this module as the handler of the hits): set
it before the first Spark process starts, as ``tests/conftest.py`` does.

A fault's *action* is ``"raise"`` (the default: the party fails with
:class:`~barriered.errors.InjectedFault`) or ``"block"``: the party records where it is
(its process id and what it wrote, see :func:`wait_fired`) and waits there until the
fault is released (:func:`release`) or ``block_s`` passed, then goes on as if nothing
happened; if its parent process (the executor) dies meanwhile, it exits at once. A test
uses it to kill the executor running the task at exactly that point (the
standalone-cluster tests in ``tests/cluster/``).

A coordinator fault stands for a crash of the driver: that coordinator does nothing
more (no commit, no row, no cleanup) and the source fails the query at its next planning
step. Every crash leaves the snapshot path exactly as a real crash at that point would;
a restore (``restoreFrom``) must then give the same final state as a run without it.

Faults are small files under ``<snapshotPath>/_coordinator/faults/``, so the driver,
the source's Python worker and executors all see them. The first party to reach the
point claims the arming with a create-if-absent write (a hard link locally, a conditional
PUT on S3: a rename on S3 is a copy and a delete, which two parties can both win), so a
fault fires once; :func:`fired` tells (without timing luck) when it has, and
:func:`wait_fired` waits for it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any
from uuid import uuid4

from barriered import crash_points
from barriered.crash_points import (
    AFTER_COMMIT,
    AFTER_SINK_COMMIT,
    ALIGNING,
    BEFORE_COMMIT,
    INFLIGHT_CAPTURE,
    MID_PUBLISH,
    POINTS,
    STATE_COMPACTION,
    STATE_SNAPSHOT,
)
from barriered.errors import BarrieredError, InjectedFault
from barriered.files.fileio import (
    create_if_absent,
    delete_file,
    exists,
    join,
    read_json,
    write_json,
)
from barriered.statestore.layout import SnapshotLayout
from barriered.wall_time import now_ms

__all__ = [
    "AFTER_COMMIT",
    "AFTER_SINK_COMMIT",
    "ALIGNING",
    "BEFORE_COMMIT",
    "INFLIGHT_CAPTURE",
    "MID_PUBLISH",
    "POINTS",
    "STATE_COMPACTION",
    "STATE_SNAPSHOT",
    "fire",
    "fired",
    "inject",
    "release",
    "wait_fired",
]

RAISE = "raise"
BLOCK = "block"
ACTIONS = (RAISE, BLOCK)


def _folder(layout: SnapshotLayout) -> str:
    return join(layout.root, "_coordinator", "faults")


def _armed(layout: SnapshotLayout, point: str) -> str:
    return join(_folder(layout), f"{point}.json")


def _fired(layout: SnapshotLayout, point: str) -> str:
    return join(_folder(layout), f"{point}.fired.json")


def _released(layout: SnapshotLayout, point: str) -> str:
    return join(_folder(layout), f"{point}.released.json")


def inject(
    snapshot_path: str,
    point: str,
    checkpoint_id: int = 1,
    action: str = RAISE,
    block_s: float = 600.0,
) -> None:
    """Arm a fault at ``point`` for the first checkpoint with id >= ``checkpoint_id``.

    Parameters
    ----------
    snapshot_path : str
        The query's snapshot path.
    point : str
        One of :data:`POINTS`.
    checkpoint_id : int, default 1
        The fault fires at the first checkpoint at or above this id that reaches
        ``point``.
    action : {"raise", "block"}, default "raise"
        Crash there, or wait there (see the module docs).
    block_s : float, default 600
        With ``"block"``: the longest wait before going on unreleased.
    """
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; choose one of {POINTS}")
    if not crash_points.ENABLED:
        raise RuntimeError(
            f"fault injection is off in this process: start it (and so the Spark processes "
            f"it starts) with {crash_points.ENV}={__name__}, or the fault at {point!r} never "
            "fires"
        )
    if action not in ACTIONS:
        raise ValueError(f"unknown fault action {action!r}; choose one of {ACTIONS}")
    plan = {"from": checkpoint_id, "action": action, "block_s": block_s, "arming": uuid4().hex}
    write_json(_armed(SnapshotLayout.at(snapshot_path), point), plan)


def release(snapshot_path: str, point: str) -> None:
    """Let the party blocked at ``point`` go on (no effect when nothing blocks there)."""
    write_json(_released(SnapshotLayout.at(snapshot_path), point), {"point": point})


def fire(
    layout: SnapshotLayout,
    point: str,
    checkpoint_id: int,
    on_crash: Callable[[BarrieredError], None] | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Crash (or block) here if a fault is armed at ``point`` for ``checkpoint_id``.

    Called by :func:`barriered.crash_points.hit` (see it for the parameters) when fault
    injection is on; costs one file-existence check when nothing is armed.

    Raises
    ------
    InjectedFault
        When a ``"raise"`` fault fires.
    """
    armed = _armed(layout, point)
    if not exists(armed):
        return
    plan = read_json(armed, default=None)
    if plan is None or checkpoint_id < int(plan.get("from", 1)):
        return
    claim = join(_folder(layout), f"{point}.{plan.get('arming', '')}.claimed")
    if not create_if_absent(claim, str(os.getpid()).encode(), "fault claim"):
        return  # another party claimed it first
    delete_file(armed)
    record = {
        "point": point,
        "checkpoint_id": checkpoint_id,
        "at_ms": now_ms(),
        "action": plan.get("action", RAISE),
        "pid": os.getpid(),
        "detail": detail or {},
    }
    if record["action"] == BLOCK:
        write_json(_fired(layout, point), record)
        _block(layout, point, float(plan.get("block_s", 600.0)))
        return
    error = InjectedFault(f"injected fault at {point} (checkpoint {checkpoint_id})")
    if on_crash is not None:
        on_crash(error)
    write_json(_fired(layout, point), record)
    raise error


def _block(layout: SnapshotLayout, point: str, block_s: float) -> None:
    """Wait until released, orphaned (the parent process died) or ``block_s`` passed."""
    parent = os.getppid()
    deadline = time.monotonic() + block_s
    released = _released(layout, point)
    while time.monotonic() < deadline and os.getppid() == parent and not exists(released):
        time.sleep(0.05)
    if os.getppid() != parent:
        # The process that ran us (an executor) is gone: so are we, as on a lost machine.
        os._exit(1)


def fired(snapshot_path: str, point: str) -> dict[str, Any] | None:
    """Return the record of the fault at ``point`` once it fired (None before)."""
    record: dict[str, Any] | None = read_json(
        _fired(SnapshotLayout.at(snapshot_path), point), default=None
    )
    return record


def wait_fired(snapshot_path: str, point: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Wait until the fault at ``point`` fired; return its record.

    The record holds ``point``, ``checkpoint_id``, ``at_ms``, ``action``, the ``pid`` of
    the process that reached the point and the ``detail`` it gave.

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
