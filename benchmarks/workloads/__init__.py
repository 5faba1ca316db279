"""The workloads of the suite, by name, in the order the runner runs them.

Each module has ``run(ctx) -> dict`` (the ``params``, ``results`` and ``targets`` of one
JSON record) and ``markdown(record) -> str`` (its section of RESULTS.md); it may have
``artifacts(record, folder)`` (files drawn from the record, such as a plot).
"""

from __future__ import annotations

from types import ModuleType

from benchmarks.workloads import (
    backpressure,
    kafka,
    kafka_sink,
    live_state,
    overhead,
    provider,
    rescale,
    restore,
    s3,
    saturated,
    sink,
    snapshot,
    state_processor,
)

WORKLOADS: dict[str, ModuleType] = {
    "overhead": overhead,
    "backpressure": backpressure,
    "saturated": saturated,
    "live_state": live_state,
    "snapshot": snapshot,
    "restore": restore,
    "provider": provider,
    "rescale": rescale,
    "sink": sink,
    "kafka": kafka,
    "state_processor": state_processor,
    "kafka_sink": kafka_sink,
    "s3": s3,
}
