"""Value types exchanged between the coordinator and its driver (the Spark listener).

Mode names are the barrier handler's (:mod:`barriered.barrier.modes` and the conformance
spec): ``"aligned"``, ``"unaligned"``, ``"aligned_with_timeout"``, ``"at_least_once"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from barriered.errors import CheckpointError

__all__ = [
    "ALIGNED",
    "ALIGNED_WITH_TIMEOUT",
    "AT_LEAST_ONCE",
    "CHECKPOINT",
    "MODES",
    "SAVEPOINT",
    "UNALIGNED",
    "AckResult",
    "AckStats",
    "CheckpointKind",
    "CheckpointStatus",
    "CompletedCheckpoint",
    "Mode",
    "TriggerRequest",
]

Mode = Literal["aligned", "unaligned", "aligned_with_timeout", "at_least_once"]
"""How the source's barrier handler takes a checkpoint."""

ALIGNED: Mode = "aligned"
UNALIGNED: Mode = "unaligned"
ALIGNED_WITH_TIMEOUT: Mode = "aligned_with_timeout"
AT_LEAST_ONCE: Mode = "at_least_once"
MODES: tuple[Mode, ...] = (ALIGNED, UNALIGNED, ALIGNED_WITH_TIMEOUT, AT_LEAST_ONCE)

CheckpointKind = Literal["checkpoint", "savepoint"]
"""A periodic/manual checkpoint, or a user-requested savepoint (never subsumed)."""

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
    files: tuple[str, ...] = ()
    payload: Any = None

    def __post_init__(self) -> None:
        for name in ("state_bytes", "state_rows", "inflight_rows", "inflight_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CheckpointError(f"AckStats.{name} must be an integer >= 0, got {value!r}")
        object.__setattr__(self, "files", tuple(self.files))


@dataclass(frozen=True)
class TriggerRequest:
    """A checkpoint the source must start: returned by ``tick()``, written to the trigger log.

    Attributes
    ----------
    checkpoint_id : int
        The id; ids strictly increase.
    kind : {"checkpoint", "savepoint"}
        Savepoints are always aligned and never subsumed.
    mode : str
        The barrier handler mode decided for this checkpoint.
    mode_reason : str
        Why that mode was chosen (a sentence with the numbers).
    timestamp_ms : int
        When the checkpoint was triggered (coordinator clock, epoch ms).
    savepoint_target : str or None
        Where a savepoint is to be written (``None`` for checkpoints).
    alignment_timeout_ms : int or None
        The alignment timeout ``T`` for ``"aligned_with_timeout"``, else ``None``.
    trigger_batch_id : int or None
        The last micro-batch the coordinator had seen when it triggered.
    """

    checkpoint_id: int
    kind: CheckpointKind
    mode: Mode
    mode_reason: str
    timestamp_ms: int
    savepoint_target: str | None = None
    alignment_timeout_ms: int | None = None
    trigger_batch_id: int | None = None

    def to_dict(self) -> dict[str, object]:
        """Return the request as JSON-able primitives (for the trigger log)."""
        return {
            "checkpoint_id": self.checkpoint_id,
            "kind": self.kind,
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "timestamp_ms": self.timestamp_ms,
            "savepoint_target": self.savepoint_target,
            "alignment_timeout_ms": self.alignment_timeout_ms,
            "trigger_batch_id": self.trigger_batch_id,
        }


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
    mode : str
        Mode decided at the trigger.
    effective_mode : str or None
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
    effective_mode: str | None
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

    @property
    def is_savepoint(self) -> bool:
        """Whether this is a savepoint."""
        return self.kind == SAVEPOINT
