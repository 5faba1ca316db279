"""The barrier handler state machine: aligned, unaligned, aligned-with-timeout, at-least-once.

Pure Python, no Spark. A source planner feeds a :class:`BarrierHandler` the events of its
channels and acts on the decisions reported to its :class:`BarrierController`. The rules
are those of ``docs/barrier-handler.md``.
"""

from __future__ import annotations

from barriered.barrier.clock import Clock, ManualClock
from barriered.barrier.controller import BarrierController
from barriered.barrier.events import (
    Barrier,
    Cancel,
    Data,
    EndOfPartition,
    Event,
    TimeAdvance,
    format_event,
    parse_event,
)
from barriered.barrier.handler import BarrierHandler
from barriered.barrier.modes import AbortReason, Mode, Phase
from barriered.barrier.states import CheckpointView

__all__ = [
    "AbortReason",
    "Barrier",
    "BarrierController",
    "BarrierHandler",
    "Cancel",
    "CheckpointView",
    "Clock",
    "Data",
    "EndOfPartition",
    "Event",
    "ManualClock",
    "Mode",
    "Phase",
    "TimeAdvance",
    "format_event",
    "parse_event",
]
