"""The scaling policy of a managed query (``spark.sql.streaming.barriered.autoscale.*``).

Pure Python: it decides, it does not rescale (:class:`barriered.managed_query.ManagedQuery`
does, on its watch thread). At each completed checkpoint it is given the source's
*backlog*: the records the upstream holds that the source has not delivered yet, summed
over its channels (``available - delivered`` of the source's progress report: Kafka lag,
records of files not yet read). When the backlog was above ``autoscale.scaleUpBacklog``
at ``autoscale.checkpoints`` completed checkpoints in a row, it asks for twice the
partitions (at most ``autoscale.maxPartitions``, 0 meaning ``maxParallelism``); below
``autoscale.scaleDownBacklog`` as often, for half (at least ``autoscale.minPartitions``).
No decision within ``autoscale.coolDown`` of the end of the last rescale, and the count
starts again after each one. Off by default (``autoscale.enabled``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from barriered.config import BarrieredConf

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    """A rescale the policy asks for: the partitions and why (a sentence with the numbers)."""

    partitions: int
    reason: str


def backlog_of(latest_offset: str | None) -> int | None:
    """The backlog in a barriered source's ``latestOffset`` progress report (the JSON of
    ``sources[].latestOffset``), None when the report is not a barriered one."""
    if not latest_offset:
        return None
    try:
        report = json.loads(latest_offset).get("barriered") or {}
    except (ValueError, AttributeError):
        return None
    available, delivered = report.get("available"), report.get("delivered")
    if available is None or delivered is None:
        return None
    return sum(max(int(a) - int(d), 0) for a, d in zip(available, delivered, strict=False))


@dataclass
class AutoscalePolicy:
    """Decides rescales from the backlog at completed checkpoints.

    Parameters
    ----------
    conf : BarrieredConf
        The query's configuration (its ``autoscale_*`` fields and ``max_parallelism``).
    """

    conf: BarrieredConf
    _above: int = 0
    _below: int = 0
    _seen: int = 0
    _cool_until_ms: int = 0
    _history: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def from_record(cls, conf: Mapping[str, Any]) -> AutoscalePolicy:
        """The policy of a snapshot path's recorded configuration (``config.json``)."""
        wanted = {k: v for k, v in conf.items() if k.startswith("autoscale_")}
        if "max_parallelism" in conf:
            wanted["max_parallelism"] = conf["max_parallelism"]
        return cls(BarrieredConf(**wanted))

    @property
    def enabled(self) -> bool:
        """Whether ``autoscale.enabled`` is set."""
        return self.conf.autoscale_enabled

    def rescaled(self, now_ms: int) -> None:
        """A rescale ended at ``now_ms``: the cool-down starts, the counts start again."""
        self._above = self._below = 0
        self._cool_until_ms = now_ms + self.conf.autoscale_cool_down_ms

    def observe(
        self, checkpoint_id: int, backlog: int, partitions: int, now_ms: int
    ) -> Decision | None:
        """Account the backlog measured at completed checkpoint ``checkpoint_id`` (each
        checkpoint counts once) of a query at ``partitions``; return a rescale to make."""
        if checkpoint_id <= self._seen:
            return None
        self._seen = checkpoint_id
        c = self.conf
        self._above = self._above + 1 if backlog > c.autoscale_scale_up_backlog else 0
        self._below = self._below + 1 if backlog < c.autoscale_scale_down_backlog else 0
        self._history = [*self._history[-(c.autoscale_checkpoints - 1) :], (checkpoint_id, backlog)]
        if now_ms < self._cool_until_ms:
            return None
        high = c.autoscale_max_partitions or c.max_parallelism
        high = min(high, c.max_parallelism)
        seen = ", ".join(f"{b} at checkpoint {i}" for i, b in self._history)
        if self._above >= c.autoscale_checkpoints and partitions < high:
            target = min(high, partitions * 2)
            bound = f"above autoscale.scaleUpBacklog={c.autoscale_scale_up_backlog}"
        elif self._below >= c.autoscale_checkpoints and partitions > c.autoscale_min_partitions:
            target = max(c.autoscale_min_partitions, partitions // 2)
            bound = f"below autoscale.scaleDownBacklog={c.autoscale_scale_down_backlog}"
        else:
            return None
        reason = (
            f"autoscale: backlog {bound} at {c.autoscale_checkpoints} checkpoints in a row "
            f"({seen}): {partitions} -> {target} partitions"
        )
        log.info("%s", reason)
        return Decision(target, reason)
