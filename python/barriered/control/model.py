"""Value types exchanged between the coordinator and its driver (the Spark listener).

A checkpoint's mode is :class:`barriered.barrier.Mode` (the conformance spec's names); a
trigger request is :class:`barriered.control.triggers.TriggerRequest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from barriered.barrier.modes import Mode
from barriered.errors import CheckpointError

__all__ = [
    "CHECKPOINT",
    "SAVEPOINT",
    "AckResult",
    "AckStats",
    "CheckpointKind",
    "CheckpointStatus",
    "CompletedCheckpoint",
]

CheckpointKind = Literal["checkpoint", "savepoint"]
"""A periodic checkpoint (or an availableNow run's final one), or a user-requested
savepoint (never subsumed)."""

CHECKPOINT: CheckpointKind = "checkpoint"
SAVEPOINT: CheckpointKind = "savepoint"

CheckpointStatus = Literal["pending", "completed", "aborted"]

AckResult = Literal["success", "duplicate", "unknown", "discarded"]
"""Outcome of :meth:`~barriered.coordinator.CheckpointCoordinator.acknowledge` (as Flink's
``TaskAcknowledgeResult``): ``"success"`` counted; ``"duplicate"`` already acknowledged by
that participant (or the checkpoint already completed); ``"unknown"`` no such pending
checkpoint (or one whose statistics were dropped from memory) or participant not
expected; ``"discarded"`` the checkpoint is known to be aborted, the participant's files
may be deleted."""


@dataclass(frozen=True)
class AckStats:
    """What one participant (a key group of an operator, an in-flight writer) persisted.

    Parameters
    ----------
    state_bytes : int, default 0
        Bytes of keyed state written for the checkpoint.
    state_rows : int, default 0
        Rows of keyed state written.
    inflight_rows : int, default 0
        In-flight records persisted (unaligned checkpoints).
    inflight_bytes : int, default 0
        Bytes of in-flight records persisted.
    write_ms : int, default 0
        How long the participant's task took to write its state at the cut (a keyed
        partition's file); the checkpoint records the longest.
    files : tuple of str, default ()
        Data files written (relative to the snapshot path), for the committer.
    payload : Any, default None
        Opaque data for the committer (e.g. Delta add actions); never interpreted.

    Raises
    ------
    barriered.errors.CheckpointError
        If a count is negative.
    """

    state_bytes: int = 0
    state_rows: int = 0
    inflight_rows: int = 0
    inflight_bytes: int = 0
    write_ms: int = 0
    files: tuple[str, ...] = ()
    payload: Any = None

    def __post_init__(self) -> None:
        for name in ("state_bytes", "state_rows", "inflight_rows", "inflight_bytes", "write_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CheckpointError(f"AckStats.{name} must be an integer >= 0, got {value!r}")
        object.__setattr__(self, "files", tuple(self.files))


@dataclass(frozen=True)
class CompletedCheckpoint:
    """A fully acknowledged checkpoint: handed to the committer, then to complete listeners.

    The committer receives it before the checkpoint counts as completed (its
    ``state_table_version`` is still ``None``); listeners receive it after a successful
    commit, with the version the committer returned (if it returned an ``int``).

    Attributes
    ----------
    checkpoint_id : int
    kind : {"checkpoint", "savepoint"}
    mode : Mode
        Mode decided at the trigger.
    effective_mode : Mode or None
        Mode the cut was really taken in, as reported by the source (e.g. ``"unaligned"``
        for an ``"aligned_with_timeout"`` checkpoint whose alignment timed out).
    savepoint_target : str or None
    positions : dict of int to int
        The barrier position ``B_n(c)`` per channel.
    acks : dict of str to AckStats
        What every participant persisted.
    trigger_timestamp_ms : int
    completion_timestamp_ms : int
    trigger_batch_id : int or None
    cut_batch_id : int or None
    state_table_version : int or None
    """

    checkpoint_id: int
    kind: CheckpointKind
    mode: Mode
    effective_mode: Mode | None
    savepoint_target: str | None
    positions: Mapping[int, int]
    acks: Mapping[str, AckStats]
    trigger_timestamp_ms: int
    completion_timestamp_ms: int
    trigger_batch_id: int | None
    cut_batch_id: int | None
    state_table_version: int | None = None
    files: tuple[str, ...] = field(default=(), repr=False)
    """Every participant's files, in participant order (convenience for the committer)."""
