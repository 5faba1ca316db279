"""Conformance adapter: run the source planner's barrier handling over a published scenario.

See ``docs/barrier-handler.md`` for the scenario format and the result dict. The
scenario's events go, one by one, to the object the source planner keeps for its source:
an :class:`~barriered.datasource.alignment.Alignment` (one long-lived
:class:`~barriered.barrier.BarrierHandler` with the production controller
:class:`~barriered.datasource.alignment.BatchController`), through
:meth:`~barriered.datasource.alignment.Alignment.feed`, as the planner feeds it; every
checkpoint id of the scenario passes through that one handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from barriered.barrier import Data, parse_event
from barriered.datasource.alignment import Alignment

__all__ = ["run_scenario"]


def run_scenario(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """Run the source's :class:`~barriered.datasource.alignment.Alignment` over
    ``scenario["events"]``.

    Each data item is the chunk ``(channel, index, index + 1)`` of its event index. The
    clock is a :class:`~barriered.barrier.ManualClock` starting at 0 that only ``t+MS``
    events move. ``scenario["expect"]`` is never read.

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
    alignment = Alignment(
        int(scenario["channels"]),
        scenario.get("alignment_timeout_ms"),
        None,
        0,
        str(scenario["mode"]),
    )
    blocked: list[list[int]] = []
    for index, text in enumerate(scenario["events"]):
        event = parse_event(text)
        chunk = (event.channel, index, index + 1) if isinstance(event, Data) else None
        alignment.feed(event, chunk)
        blocked.append(sorted(alignment.handler.blocked_channels()))
    controller = alignment.controller
    return {
        "triggered": [[cid, mode.value] for cid, mode in controller.triggered],
        "aborted": [[cid, reason.value] for cid, reason in controller.aborted],
        "processed": [start for _, start, _ in controller.processed],
        "blocked": blocked,
        "channel_state": {
            str(cid): [start for _, start, _ in chunks]
            for cid, chunks in sorted(controller.channel_state.items())
            if chunks
        },
    }
