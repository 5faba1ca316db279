"""The checkpoint coordinator: pure core (no Spark import), driven by a query listener.

Mirrors Flink's ``CheckpointCoordinator``, ``PendingCheckpoint``, ``CompletedCheckpoint``,
``CheckpointFailureManager`` and ``CheckpointStatsTracker``, plus a mode policy that picks
aligned or unaligned per checkpoint from measured channel signals. See
:mod:`barriered.coordinator.coordinator` for the rules and the order of events. The
listener's side: :mod:`~barriered.coordinator.driver` drives it from query progress,
:mod:`~barriered.coordinator.checkpoint_store` commits (Flink's
``CompletedCheckpointStore``) and :mod:`~barriered.coordinator.control_channel` writes
what it tells the source.
"""

from __future__ import annotations

from barriered.barrier.modes import Mode
from barriered.control.model import (
    CHECKPOINT,
    SAVEPOINT,
    AckResult,
    AckStats,
    CheckpointKind,
    CheckpointStatus,
    CompletedCheckpoint,
)
from barriered.control.stats import STATS_COLUMNS, CheckpointStats, CheckpointStatsTracker
from barriered.control.triggers import TriggerRequest
from barriered.coordinator.clock import Clock, ManualClock, SystemClock
from barriered.coordinator.coordinator import CheckpointCoordinator
from barriered.coordinator.events import Participants
from barriered.coordinator.failures import CheckpointFailureManager
from barriered.coordinator.outcomes import Committer
from barriered.coordinator.pending import PendingCheckpoint
from barriered.coordinator.policy import (
    AlignmentPrediction,
    ChannelSignals,
    ModeDecision,
    decide_mode,
    predict,
)
from barriered.coordinator.settings import SETTING_KEYS, CoordinatorSettings

__all__ = [
    "CHECKPOINT",
    "SAVEPOINT",
    "SETTING_KEYS",
    "STATS_COLUMNS",
    "AckResult",
    "AckStats",
    "AlignmentPrediction",
    "ChannelSignals",
    "CheckpointCoordinator",
    "CheckpointFailureManager",
    "CheckpointKind",
    "CheckpointStats",
    "CheckpointStatsTracker",
    "CheckpointStatus",
    "Clock",
    "Committer",
    "CompletedCheckpoint",
    "CoordinatorSettings",
    "ManualClock",
    "Mode",
    "ModeDecision",
    "Participants",
    "PendingCheckpoint",
    "SystemClock",
    "TriggerRequest",
    "decide_mode",
    "predict",
]
