"""The checkpoint figures as Prometheus metrics (a ``prometheus_client`` collector).

:class:`CheckpointCollector` turns the :class:`~barriered.monitoring.figures.Figures` of
every snapshot path it is given into metric families when scraped, nothing in between:
names follow Prometheus' conventions (``barriered_`` prefix, base units, ``_total`` on
counters) and Flink's checkpoint metrics where one exists (``docs/monitoring.md`` maps
each to Flink's). The one label is ``snapshot_path`` (one per query), plus ``reason`` on
the failure counter and ``mode``/``kind`` on the ``_info`` metric, bounded sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from barriered.monitoring.figures import DURATION_BUCKETS_S, REASONS, Figures

__all__ = ["LAST_COMPLETED_GAUGES", "RESTORE_GAUGES", "CheckpointCollector", "registry_of"]

LABEL = "snapshot_path"

#: The gauges of the latest completed checkpoint: (name, help, column, scale); the value
#: is the row's column times the scale (ms -> s).
LAST_COMPLETED_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("barriered_last_checkpoint_id", "Id of the last completed checkpoint.", "checkpoint_id", 1),
    (
        "barriered_last_checkpoint_duration_seconds",
        "End-to-end duration of the last completed checkpoint: trigger to commit.",
        "end_to_end_duration_ms",
        1e-3,
    ),
    (
        "barriered_last_checkpoint_start_delay_seconds",
        "Trigger to barrier positions fixed by the source, last completed checkpoint.",
        "start_delay_ms",
        1e-3,
    ),
    (
        "barriered_last_checkpoint_alignment_seconds",
        "First barrier delivered to the cut, last completed checkpoint.",
        "alignment_duration_ms",
        1e-3,
    ),
    (
        "barriered_last_checkpoint_state_write_seconds",
        "The longest time a task wrote its keyed state, last completed checkpoint.",
        "state_write_ms",
        1e-3,
    ),
    (
        "barriered_last_checkpoint_size_bytes",
        "Keyed state bytes the last completed checkpoint wrote.",
        "state_bytes",
        1,
    ),
    (
        "barriered_last_checkpoint_state_rows",
        "Keyed state rows the last completed checkpoint wrote.",
        "state_rows",
        1,
    ),
    (
        "barriered_last_checkpoint_inflight_bytes",
        "In-flight bytes the last completed checkpoint persisted (unaligned).",
        "inflight_bytes",
        1,
    ),
    (
        "barriered_last_checkpoint_inflight_rows",
        "In-flight rows the last completed checkpoint persisted (unaligned).",
        "inflight_rows",
        1,
    ),
    (
        "barriered_last_checkpoint_sink_bytes",
        "Bytes the last completed checkpoint published to its barriered sink.",
        "sink_bytes",
        1,
    ),
    (
        "barriered_last_checkpoint_acknowledgements",
        "Acknowledgements the last completed checkpoint received.",
        "num_acknowledged",
        1,
    ),
    (
        "barriered_last_checkpoint_completed_timestamp_seconds",
        "When the last completed checkpoint completed (Unix time).",
        "end_timestamp_ms",
        1e-3,
    ),
)


#: The gauges of the run's restore, when this process saw it (the driver's): (name, help,
#: key of :func:`barriered.monitoring.hub.restore_record`, scale).
RESTORE_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    (
        "barriered_last_restore_duration_seconds",
        "The run taking the snapshot path to the end of its first micro-batch (state loaded).",
        "duration_ms",
        1e-3,
    ),
    (
        "barriered_last_restore_timestamp_seconds",
        "When the restored run's first micro-batch ended (Unix time).",
        "ready_ms",
        1e-3,
    ),
    (
        "barriered_last_restore_state_bytes",
        "Keyed state bytes of the checkpoint the run was restored from.",
        "state_bytes",
        1,
    ),
)


class CheckpointCollector(Collector):
    """A collector of the checkpoint metrics of some snapshot paths.

    Parameters
    ----------
    source : callable
        Returns the current :class:`Figures` of every snapshot path to report; called at
        each scrape.
    """

    def __init__(self, source: Callable[[], Iterable[Figures]]) -> None:
        self._source = source

    def describe(self) -> list[Metric]:
        """Nothing: the registry collects once when the collector is registered."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The metric families of every snapshot path's figures."""
        all_figures = list(self._source())
        completed = CounterMetricFamily(
            "barriered_checkpoints_completed",
            "Completed checkpoints and savepoints.",
            labels=[LABEL],
        )
        failed = CounterMetricFamily(
            "barriered_checkpoints_failed",
            "Failed (aborted) checkpoints by reason: "
            + ", ".join(label for label, _ in REASONS)
            + ", other.",
            labels=[LABEL, "reason"],
        )
        total = CounterMetricFamily(
            "barriered_checkpoints", "Finished checkpoints: completed and failed.", labels=[LABEL]
        )
        durations = HistogramMetricFamily(
            "barriered_checkpoint_duration_seconds",
            "End-to-end duration of the completed checkpoints.",
            labels=[LABEL],
        )
        info = GaugeMetricFamily(
            "barriered_last_checkpoint_info",
            "The last completed checkpoint's kind and mode (value 1).",
            labels=[LABEL, "kind", "mode", "effective_mode"],
        )
        last_failed = GaugeMetricFamily(
            "barriered_last_failed_checkpoint_id",
            "Id of the last failed checkpoint.",
            labels=[LABEL],
        )
        last_failed_time = GaugeMetricFamily(
            "barriered_last_checkpoint_failure_timestamp_seconds",
            "When the last failed checkpoint was aborted (Unix time).",
            labels=[LABEL],
        )
        restored = GaugeMetricFamily(
            "barriered_restored_checkpoint_id",
            "Id of the checkpoint the run was restored from.",
            labels=[LABEL],
        )
        restore_gauges = [
            (GaugeMetricFamily(name, doc, labels=[LABEL]), key, scale)
            for name, doc, key, scale in RESTORE_GAUGES
        ]
        gauges = [
            (GaugeMetricFamily(name, doc, labels=[LABEL]), column, scale)
            for name, doc, column, scale in LAST_COMPLETED_GAUGES
        ]
        for figures in all_figures:
            path = [figures.snapshot_path]
            completed.add_metric(path, figures.completed)
            total.add_metric(path, figures.total)
            for label in [*(label for label, _ in REASONS), "other"]:
                failed.add_metric([*path, label], figures.failed_by_reason.get(label, 0))
            durations.add_metric(
                path,
                [
                    *(
                        (_le(b), n)
                        for b, n in zip(DURATION_BUCKETS_S, figures.duration_buckets, strict=True)
                    ),
                    ("+Inf", figures.completed),
                ],
                figures.duration_sum_s,
            )
            latest = figures.latest_completed
            if latest is not None:
                for family, column, scale in gauges:
                    value = _number(latest, column)
                    if value is not None:
                        family.add_metric(path, value * scale)
                info.add_metric(
                    [
                        *path,
                        str(latest.get("kind") or ""),
                        str(latest.get("mode") or ""),
                        str(latest.get("effective_mode") or ""),
                    ],
                    1,
                )
            bad = figures.latest_failed
            if bad is not None:
                last_failed.add_metric(path, int(bad["checkpoint_id"]))
                ended = _number(bad, "end_timestamp_ms")
                if ended is not None:
                    last_failed_time.add_metric(path, ended / 1000.0)
            source = _number(figures.restored or {}, "checkpoint_id")
            if source is not None:
                restored.add_metric(path, source)
            for family, key, scale in restore_gauges:
                value = _number(figures.restored or {}, key)
                if value is not None:
                    family.add_metric(path, value * scale)
        yield from (completed, failed, total, durations, info, last_failed, last_failed_time)
        yield restored
        yield from (family for family, _, _ in restore_gauges)
        yield from (family for family, _, _ in gauges)


def registry_of(source: Callable[[], Iterable[Figures]]) -> CollectorRegistry:
    """A registry of its own holding one :class:`CheckpointCollector` of ``source``
    (nothing of the process' default registry is exposed)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CheckpointCollector(source))
    return registry


def _le(bound: float) -> str:
    return repr(float(bound))


def _number(row: Mapping[str, Any], column: str) -> float | None:
    value = row.get(column)
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return None if number != number else number
