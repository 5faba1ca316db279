"""Finished checkpoints as OpenTelemetry spans, and the figures as OpenTelemetry metrics.

Only ``opentelemetry-api`` is used (``pip install spark-barriered[otel]``), through the
providers the application configured (the API's global ones unless others are given);
without an SDK they are no-ops, without the API :func:`available` is False and
:class:`OtelReporter` raises :class:`~barriered.errors.MonitoringError`.

Like Flink's ``Checkpoint`` span (FLIP-384), one span per finished checkpoint with its
trigger and end times from the ``_checkpoints`` row, and a child span per phase the row
has a duration for (:mod:`barriered.monitoring.phases`); attributes carry the ids, mode,
status and sizes. A failed checkpoint's span has status ERROR and its reason. Like
Flink's ``JobInitialization`` span, one ``restore`` span per restored run.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from barriered.errors import MonitoringError
from barriered.monitoring.figures import REASONS, Figures
from barriered.monitoring.phases import bounds, phases

__all__ = ["SCOPE", "OtelReporter", "available", "span_attributes"]

log = logging.getLogger(__name__)

#: The instrumentation scope of the spans and metrics.
SCOPE = "barriered.checkpoints"

#: ``_checkpoints`` columns carried as span attributes (``barriered.<column>``).
ATTRIBUTE_COLUMNS = (
    "checkpoint_id",
    "kind",
    "mode",
    "effective_mode",
    "status",
    "failure_reason",
    "trigger_timestamp_ms",
    "end_timestamp_ms",
    "end_to_end_duration_ms",
    "start_delay_ms",
    "alignment_duration_ms",
    "state_write_ms",
    "state_bytes",
    "state_rows",
    "inflight_rows",
    "inflight_bytes",
    "num_acknowledged",
    "num_expected",
    "trigger_batch_id",
    "cut_batch_id",
    "barrier_batch_id",
    "state_table_version",
    "inflight_table_version",
    "sink_table_version",
    "sink_rows",
    "sink_bytes",
    "snapshot_path",
)


def available() -> bool:
    """Whether ``opentelemetry-api`` is installed."""
    return importlib.util.find_spec("opentelemetry") is not None and (
        importlib.util.find_spec("opentelemetry.trace") is not None
    )


def span_attributes(row: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes of a checkpoint's span: ``barriered.<column>`` of every
    :data:`ATTRIBUTE_COLUMNS` the row has a value for."""
    out: dict[str, Any] = {}
    for column in ATTRIBUTE_COLUMNS:
        value = row.get(column)
        if value is None or (isinstance(value, float) and value != value):
            continue
        out[f"barriered.{column}"] = value if isinstance(value, (bool, str, float)) else int(value)
    return out


def _ns(ms: int) -> int:
    return int(ms) * 1_000_000


class OtelReporter:
    """Reports finished checkpoints as spans and, given ``figures``, the checkpoint
    metrics as observable instruments.

    Parameters
    ----------
    tracer_provider, meter_provider : optional
        The providers to use (default: the API's global ones, set by the application).
    figures : callable, optional
        Returns the :class:`Figures` of every snapshot path; the observable instruments
        read it at each collection. None: no metrics.

    Raises
    ------
    MonitoringError
        When ``opentelemetry-api`` is not installed.
    """

    def __init__(
        self,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        figures: Callable[[], Iterable[Figures]] | None = None,
    ) -> None:
        if not available():
            raise MonitoringError(
                "OpenTelemetry reporting needs opentelemetry-api: pip install "
                "'spark-barriered[otel]' (and configure an SDK in the application)"
            )
        from opentelemetry import metrics, trace

        self._trace = trace
        self._tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        self._figures = figures
        if figures is not None:
            meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
            self._instruments(meter)

    def checkpoint(self, row: Mapping[str, Any]) -> None:
        """Emit the span of one finished checkpoint (with its phases) from its row."""
        from opentelemetry.trace import Status, StatusCode

        start, end = bounds(row)
        parent = self._tracer.start_span(
            f"checkpoint {int(row['checkpoint_id'])}",
            start_time=_ns(start),
            attributes=span_attributes(row),
        )
        if row.get("status") != "completed":
            parent.set_status(Status(StatusCode.ERROR, str(row.get("failure_reason") or "")))
        context = self._trace.set_span_in_context(parent)
        for phase in phases(row):
            child = self._tracer.start_span(
                phase.name,
                context=context,
                start_time=_ns(phase.start_ms),
                attributes={
                    "barriered.checkpoint_id": int(row["checkpoint_id"]),
                    "barriered.phase": phase.name,
                    "barriered.duration_ms": phase.duration_ms,
                },
            )
            child.end(end_time=_ns(phase.end_ms))
        parent.end(end_time=_ns(end))

    def restore(self, record: Mapping[str, Any]) -> None:
        """Emit the span of one restore (Flink's ``JobInitialization``) from its record
        (:func:`barriered.monitoring.hub.restore_record`): from the run taking the snapshot
        path to the end of its first micro-batch, which loaded the state."""
        attributes = {
            f"barriered.restore.{key}": value if isinstance(value, str) else int(value)
            for key, value in record.items()
            if value is not None and key != "snapshot_path"
        }
        if record.get("snapshot_path") is not None:
            attributes["barriered.snapshot_path"] = str(record["snapshot_path"])
        if record.get("checkpoint_id") is not None:
            attributes["barriered.checkpoint_id"] = int(record["checkpoint_id"])
        span = self._tracer.start_span(
            "restore", start_time=_ns(int(record["started_ms"])), attributes=attributes
        )
        span.end(end_time=_ns(int(record["ready_ms"])))

    # -- metrics ---------------------------------------------------------------------------

    def _instruments(self, meter: Any) -> None:
        meter.create_observable_counter(
            "barriered.checkpoints.completed",
            callbacks=[self._completed],
            unit="{checkpoint}",
            description="Completed checkpoints and savepoints.",
        )
        meter.create_observable_counter(
            "barriered.checkpoints.failed",
            callbacks=[self._failed],
            unit="{checkpoint}",
            description="Failed (aborted) checkpoints, by reason.",
        )
        for name, column, unit, scale, doc in _LAST:
            meter.create_observable_gauge(
                name,
                callbacks=[self._last(column, scale)],
                unit=unit,
                description=doc,
            )

    def _all(self) -> list[Figures]:
        return [] if self._figures is None else list(self._figures())

    def _completed(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for f in self._all():
            yield Observation(f.completed, {"barriered.snapshot_path": f.snapshot_path})

    def _failed(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for f in self._all():
            for label in [*(label for label, _ in REASONS), "other"]:
                yield Observation(
                    f.failed_by_reason.get(label, 0),
                    {"barriered.snapshot_path": f.snapshot_path, "barriered.reason": label},
                )

    def _last(self, column: str, scale: float) -> Callable[[Any], Iterator[Any]]:
        def observe(options: Any) -> Iterator[Any]:
            from opentelemetry.metrics import Observation

            for f in self._all():
                value = (f.latest_completed or {}).get(column)
                if value is not None:
                    yield Observation(
                        float(value) * scale, {"barriered.snapshot_path": f.snapshot_path}
                    )

        return observe


#: The gauges of the last completed checkpoint: (name, column, unit, scale, description).
_LAST: tuple[tuple[str, str, str, float, str], ...] = (
    ("barriered.checkpoint.last.id", "checkpoint_id", "1", 1, "Last completed checkpoint id."),
    (
        "barriered.checkpoint.last.duration",
        "end_to_end_duration_ms",
        "s",
        1e-3,
        "End-to-end duration of the last completed checkpoint.",
    ),
    (
        "barriered.checkpoint.last.start_delay",
        "start_delay_ms",
        "s",
        1e-3,
        "Trigger to barrier positions fixed, last completed checkpoint.",
    ),
    (
        "barriered.checkpoint.last.alignment",
        "alignment_duration_ms",
        "s",
        1e-3,
        "Alignment of the last completed checkpoint.",
    ),
    (
        "barriered.checkpoint.last.size",
        "state_bytes",
        "By",
        1,
        "Keyed state bytes the last completed checkpoint wrote.",
    ),
    (
        "barriered.checkpoint.last.inflight.size",
        "inflight_bytes",
        "By",
        1,
        "In-flight bytes the last completed checkpoint persisted.",
    ),
)
