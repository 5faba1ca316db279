"""The outputs of the rescale tests (a running query rescaled by its managed handle):
the ``barriered-delta`` and ``barriered-kafka`` sinks of ``RecordNumbers``' ``(user, n)``
rows, which hold every record exactly once only as ``(user, 1) .. (user, N)``."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import barriered
from barriered.examples import RecordNumbers
from barriered.managed_query import Run
from kafka_sink_runs import FORMAT, as_records, published
from runs import output_rows


class DeltaOutput:
    """The ``barriered-delta`` sink: a Delta table of ``(user_id, n)`` rows."""

    def __init__(self, tmp: Path) -> None:
        self.table = tmp / "out"

    def writer(self, out: Any) -> Any:
        return out.writeStream.format("barriered-delta").option("path", str(self.table))

    def started(self) -> bool:
        return (self.table / "_delta_log").exists()

    def rows(self) -> list[tuple[str, int]]:
        return output_rows(str(self.table)) if self.started() else []


class KafkaOutput:
    """The ``barriered-kafka`` sink: key = user, value = n, read ``read_committed``."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.topic = f"out-{uuid.uuid4().hex[:8]}"
        broker.create_topic(self.topic, 2)

    def writer(self, out: Any) -> Any:
        return (
            as_records(out)
            .writeStream.format(FORMAT)
            .options(**{"kafka.bootstrap.servers": self.broker.bootstrap, "topic": self.topic})
        )

    def started(self) -> bool:
        return bool(self.rows())

    def rows(self) -> list[tuple[str, int]]:
        return published(self.broker, self.topic, "append")


def wait_for(what: str, ready: Any, timeout: float = 180.0) -> Any:
    """Wait until ``ready()`` returns something true; return it."""
    deadline = time.monotonic() + timeout
    while not (found := ready()):
        assert time.monotonic() < deadline, f"not {what} in {timeout} s"
        time.sleep(0.2)
    return found


def numbered(counts: Counter[str]) -> list[tuple[str, int]]:
    """Every record once: ``(user, n)`` for n = 1..count."""
    return sorted((u, n) for u, c in counts.items() for n in range(1, c + 1))


def numbering(events: Callable[[Run], Any], snap: Path, output: Any) -> Callable[[Run], Any]:
    """The start function of a managed query that numbers the records ``events(run)``
    reads (``RecordNumbers``) into ``output`` on snapshot path ``snap``."""

    def start(run: Run) -> Any:
        out = barriered.keyed(events(run), "user_id").process(RecordNumbers())
        return (
            output.writer(out)
            .option("snapshotPath", str(snap))
            .option("checkpointLocation", run.checkpoint_location)
            .start()
        )

    return start
