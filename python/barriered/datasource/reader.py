"""The stream reader of the "barriered" source (Python Data Source API, Spark >= 4.2).

Driver side (one long-lived Python worker): ``initialOffset``, ``latestOffset`` (the
planner), ``partitions``, ``reportLatestOffset``, ``commit``. Executor side (a pickled
copy): ``read``. Nothing the driver side keeps in memory is needed for correctness:
the planner works from the start offset and the trigger log alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from barriered.datasource.columns import data_batch, marker_batch
from barriered.datasource.offsets import SourceOffset
from barriered.datasource.options import SourceSettings
from barriered.datasource.planner import PlanInput, plan
from barriered.datasource.triggers import TriggerLog
from barriered.datasource.upstreams.base import Upstream
from barriered.errors import CheckpointFailureLimitExceeded
from barriered.statestore.inflight import capture
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)


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
class InflightPartition(InputPartition):
    """Capture of one channel's in-flight range; yields no rows."""

    checkpoint_id: int
    channel: int
    start: int
    end: int
    capture: str


class BarrieredStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads an upstream's channels and injects checkpoint barriers."""

    def __init__(self, settings: SourceSettings, upstream: Upstream, layout: SnapshotLayout):
        self.settings = settings
        self.upstream = upstream
        self.layout = layout
        self.user_schema = upstream.schema()
        self.channels = upstream.channel_count()
        self._target: list[int] | None = None
        self._report: dict[str, Any] | None = None

    # -- driver side ---------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return SourceOffset(positions=(0,) * self.channels).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        per_channel = self.settings.max_rows_per_channel
        if per_channel is None:
            return ReadAllAvailable()
        return ReadMaxRows(per_channel * self.channels)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = list(self.upstream.available())
        log.info("availableNow run: ends at positions %s", self._target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = SourceOffset.from_dict(start)
        available = self.upstream.available()
        if isinstance(limit, ReadAllAvailable) or self.settings.max_rows_per_channel is None:
            admission: list[int | None] = [None] * self.channels
        else:
            admission = [self.settings.max_rows_per_channel] * self.channels
        triggers = TriggerLog.read(self.layout.triggers_file)
        if triggers.fatal:
            raise CheckpointFailureLimitExceeded(triggers.fatal)
        conf = self.settings.conf
        end = plan(
            begin,
            PlanInput(
                available=available,
                admission=admission,
                target=self._target,
                requests=triggers.requests,
                cancelled=triggers.cancelled,
                last_completed=triggers.last_completed,
                now_ms=int(time.time() * 1000),
                buffer_per_channel=conf.buffer_per_channel,
                aligned_timeout_ms=conf.aligned_checkpoint_timeout_ms,
            ),
        )
        self._report = {
            "barriered": {
                "snapshotPath": self.layout.root,
                "available": list(available),
                "delivered": list(end.positions),
                "active": None if end.active is None else end.active.id,
            }
        }
        return start if end is begin else end.to_dict()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._report

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, stop = SourceOffset.from_dict(start), SourceOffset.from_dict(end)
        parts: list[InputPartition] = []
        step = self.settings.rows_per_partition
        for c in range(self.channels):
            for a in range(begin.positions[c], stop.positions[c], step):
                parts.append(RangePartition(c, a, min(a + step, stop.positions[c])))
        cut = stop.cut
        if cut is not None:
            meta = {
                "kind": cut.kind,
                "mode": cut.mode,
                "base": cut.base,
                "path": self.layout.root,
            }
            parts.append(
                MarkerPartition(cut.id, self.settings.conf.max_parallelism, tuple(meta.items()))
            )
            for channel, a, b in cut.inflight:
                parts.append(
                    InflightPartition(cut.id, channel, a, b, self.settings.conf.inflight_capture)
                )
        return parts

    def commit(self, end: dict[str, Any]) -> None:
        pass

    # -- executor side -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            table = self.upstream.read(partition.channel, partition.start, partition.end)
            yield from data_batch(table, partition.channel, partition.start).to_batches()
        elif isinstance(partition, MarkerPartition):
            table = marker_batch(
                self.user_schema,
                partition.checkpoint_id,
                partition.key_groups,
                dict(partition.meta),
            )
            yield from table.to_batches()
        elif isinstance(partition, InflightPartition):
            capture(
                self.layout,
                self.upstream,
                partition.checkpoint_id,
                partition.channel,
                partition.start,
                partition.end,
                partition.capture,
            )
