"""Checkpoint rows written through the real code path, for the monitoring tests (no Spark).

:func:`finish` appends one finished checkpoint's row to a snapshot path's ``_checkpoints``
table the way the driver does (:meth:`CheckpointStats.to_row`, then
:func:`barriered.statestore.checkpoints_table.append`); :func:`snapshot_path` makes a
snapshot path with its ``config.json``; :func:`samples` scrapes a Prometheus endpoint.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from barriered.barrier.modes import Mode
from barriered.config import BarrieredConf
from barriered.control.stats import CheckpointStats
from barriered.files.fileio import write_json
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout

T0 = 1_790_000_000_000  # epoch ms of the first trigger


def snapshot_path(root: Path, **conf: Any) -> SnapshotLayout:
    """A snapshot path at ``root`` whose ``config.json`` records ``conf``."""
    layout = SnapshotLayout.at(str(root))
    settings = BarrieredConf(snapshot_path=str(root), **conf)
    write_json(layout.config_file, {"conf": settings.to_dict(), "channels": 3})
    return layout


def finish(
    layout: SnapshotLayout, checkpoint_id: int, reason: str | None = None, **fields: Any
) -> dict[str, Any]:
    """Append the row of checkpoint ``checkpoint_id``: completed, or aborted with
    ``reason``; returns the row as read back from the table."""
    trigger = T0 + 10_000 * checkpoint_id
    values: dict[str, Any] = {
        "start_delay_ms": 20 + checkpoint_id,
        "alignment_duration_ms": 150,
        "end_to_end_duration_ms": 400 + checkpoint_id,
        "state_bytes": 4096 * checkpoint_id,
        "state_rows": 10 * checkpoint_id,
        "inflight_rows": 3,
        "inflight_bytes": 120,
        "state_write_ms": 80,
        "num_acknowledged": 4,
        "num_expected": 4,
        "barrier_positions": {0: checkpoint_id * 10, 1: checkpoint_id * 12},
        **fields,
    }
    stats = CheckpointStats(
        checkpoint_id=checkpoint_id,
        kind="checkpoint",
        mode=Mode.UNALIGNED,
        mode_reason="test",
        status="completed" if reason is None else "aborted",
        trigger_timestamp_ms=trigger,
        failure_reason=reason,
        end_timestamp_ms=trigger + int(values["end_to_end_duration_ms"]),
        effective_mode=Mode.UNALIGNED,
        **values,
    )
    checkpoints_table.append(layout, stats.to_row())
    row = checkpoints_table.row_of(checkpoints_table.read_rows(layout), checkpoint_id)
    assert row is not None
    return row


def get(url: str) -> str:
    """The body of a GET of ``url``."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus endpoint: (name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(get(url + "metrics")):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` among ``found`` (:func:`samples`)."""
    return found[(name, tuple(sorted(labels.items())))]
