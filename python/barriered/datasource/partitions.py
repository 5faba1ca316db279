"""The input partitions a micro-batch of the "barriered" source is read in: a channel's
records, a cut's marker rows (alone, or after a partition of records), and the capture
of a channel's in-flight records (``replay.ReplayPartition``: records of a restore)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """Records ``[start, end)`` of one channel."""

    channel: int
    start: int
    end: int


@dataclass(frozen=True)
class MarkerPartition(InputPartition):
    """The marker rows of a cut: one per key group."""

    checkpoint_id: int
    key_groups: int
    meta: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class WithMarkers(InputPartition):
    """A partition of records followed by a cut's marker rows: the markers ride in a
    task the batch runs anyway (one more task is one more wave of them on few cores)."""

    records: InputPartition
    markers: MarkerPartition


@dataclass(frozen=True)
class InflightPartition(InputPartition):
    """Capture of one channel's in-flight range; yields no rows."""

    checkpoint_id: int
    channel: int
    start: int
    end: int
    capture: str
    epoch: int | None
