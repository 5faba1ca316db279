"""Conformance adapter: run the project's barrier handler over a published scenario.

See ``shared/conformance/README.md`` for the scenario format and the result dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from barriered.barrier import (
    Barrier,
    BarrierHandler,
    Cancel,
    Data,
    EndOfPartition,
    ManualClock,
    RecordingController,
    TimeAdvance,
    parse_event,
)

__all__ = ["run_scenario"]


def run_scenario(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """Run a :class:`~barriered.barrier.BarrierHandler` over ``scenario["events"]``.

    Each data item is identified by its event index. The clock is a
    :class:`~barriered.barrier.ManualClock` starting at 0 that only ``t+MS`` events move.
    ``scenario["expect"]`` is never read.

    Parameters
    ----------
    scenario : mapping
        With ``channels``, ``mode``, ``alignment_timeout_ms`` (may be missing or null
        except in ``aligned_with_timeout`` mode) and ``events``.

    Returns
    -------
    dict
        ``triggered`` (``[id, mode]`` pairs), ``aborted`` (``[id, reason]`` pairs),
        ``processed`` (data indices in processing order), ``blocked`` (sorted blocked
        channels after each event) and ``channel_state`` (decimal id -> recorded data
        indices, only for checkpoints that recorded items and were not aborted).

    Raises
    ------
    BarrierProtocolError
        If an event is malformed or arrives on a closed or unknown channel.
    ConfigError
        If ``channels``, ``mode`` or ``alignment_timeout_ms`` is invalid.
    """
    clock = ManualClock()
    controller: RecordingController[int] = RecordingController()
    handler = BarrierHandler(
        int(scenario["channels"]),
        str(scenario["mode"]),
        controller,
        clock,
        scenario.get("alignment_timeout_ms"),
    )
    blocked: list[list[int]] = []
    for index, text in enumerate(scenario["events"]):
        event = parse_event(text)
        if isinstance(event, Data):
            handler.on_data(event.channel, index)
        elif isinstance(event, Barrier):
            handler.on_barrier(event.channel, event.checkpoint_id)
        elif isinstance(event, Cancel):
            handler.on_cancel(event.channel, event.checkpoint_id)
        elif isinstance(event, EndOfPartition):
            handler.on_end_of_partition(event.channel)
        elif isinstance(event, TimeAdvance):
            clock.advance(event.ms)
            handler.on_time_advanced()
        blocked.append(sorted(handler.blocked_channels()))
    return {
        "triggered": [[cid, mode.value] for cid, mode in controller.triggered],
        "aborted": [[cid, reason.value] for cid, reason in controller.aborted],
        "processed": [index for _, index in controller.processed],
        "blocked": blocked,
        "channel_state": {
            str(cid): list(items)
            for cid, items in sorted(controller.channel_state.items())
            if items
        },
    }
