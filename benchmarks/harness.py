"""What every workload needs: session keys, starting and timing queries, reading progress.

Throughput is measured from Spark's own query progress, never from wall-clock guesses:
the records of a batch are what the barriered source delivered in it (the growth of the
channel positions between its start and end offsets, so barrier marker rows are not
counted), and the elapsed time of a window of batches runs from the first batch's start
(``timestamp``) to the last batch's end (``timestamp + batchDuration``), so the gaps
between batches (planning, listener work competing for the cores) are included.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from barriered.config import PREFIX
from barriered.control.offsets import SourceOffset
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout

Progress = dict[str, Any]

#: The tests folder, whose servers (``kafka_broker.py``, ``s3_server.py``) workloads start.
TESTS = Path(__file__).resolve().parents[1] / "tests"


@dataclass
class Context:
    """What a workload gets from the runner.

    Attributes
    ----------
    spark : SparkSession
        The one session of the suite.
    workdir : Path
        A fresh folder for this workload's snapshot paths, checkpoints and data.
    quick : bool
        Small sizes (a smoke run of a couple of minutes), not numbers to quote.
    emit : callable
        Prints a progress line.
    """

    spark: Any
    workdir: Path
    quick: bool
    emit: Callable[[str], None] = print
    notes: list[str] = field(default_factory=list)

    def path(self, *parts: str) -> str:
        """A path under :attr:`workdir`."""
        return str(self.workdir.joinpath(*parts))


def from_tests(name: str) -> ModuleType:
    """A module of the tests folder, which is not a package (e.g. ``"s3_server"``)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module(name)


@contextlib.contextmanager
def timed_coordinator() -> Iterator[dict[str, float]]:
    """Add up the time the driver spends in the checkpoint coordinator while inside.

    The coordinator runs in the driver's listener thread after every micro-batch
    (completions, Delta commits, the ``_checkpoints`` row, retention, triggers); it
    overlaps the next batch and competes with it for the cores.

    Yields
    ------
    dict
        ``seconds`` and ``calls``, updated as the coordinator runs.
    """
    from barriered.coordinator.driver import QueryCoordinator

    totals = {"seconds": 0.0, "calls": 0.0}
    names = ("on_progress", "between_batches")
    originals = {name: getattr(QueryCoordinator, name) for name in names}

    def timed(method: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                totals["seconds"] += time.perf_counter() - began
                totals["calls"] += 1

        return run

    for name, method in originals.items():
        setattr(QueryCoordinator, name, timed(method))
    try:
        yield totals
    finally:
        for name, method in originals.items():
            setattr(QueryCoordinator, name, method)


#: Source options of a native baseline: no coordinator runs, so its watchdog must wait.
NATIVE_OPTIONS = {"coordinatorTimeout": "1d"}


@contextlib.contextmanager
def without_coordinator(spark: Any) -> Iterator[None]:
    """Run a native baseline (Spark's own ``groupBy().count()`` on the barriered source,
    with :data:`NATIVE_OPTIONS`) while inside: the coordinator's listener is removed, since
    it refuses a query whose state no snapshot holds, and added back afterwards."""
    import barriered

    listener = barriered.install(spark)
    spark.streams.removeListener(listener)
    try:
        yield
    finally:
        spark.streams.addListener(listener)


def drain_listeners(spark: Any) -> None:
    """Wait until Spark's listener bus has delivered every event, so that the
    coordinator has handled the last batch of every query stopped before (e.g. before a
    store the coordinator writes to goes away)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()


def error_line(exc: Exception) -> str:
    """The Python error line of a (JVM-wrapped) exception, e.g. ``ConfigError: ...``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (errors[-1] if errors else f"{type(exc).__name__}: {lines[0]}")[:300]


def configure(spark: Any, keys: dict[str, str]) -> None:
    """Reset every ``spark.sql.streaming.barriered.*`` key, then set ``keys`` (short names
    such as ``checkpointInterval``, or whole keys as :data:`barriered.demo.PHASES` has them)."""
    for key in list(spark.conf.getAll):
        if key.startswith(PREFIX):
            spark.conf.unset(key)
    for key, value in keys.items():
        spark.conf.set(key if key.startswith(PREFIX) else PREFIX + key, value)


def barriered_stream(spark: Any, snapshot_path: str, options: dict[str, str]) -> Any:
    """``spark.readStream.format("barriered")`` with ``options`` on ``snapshot_path``."""
    return (
        spark.readStream.format("barriered")
        .options(**options)
        .option("snapshotPath", snapshot_path)
        .load()
    )


def start(
    df: Any,
    checkpoint_location: str,
    output_mode: str = "append",
    available_now: bool = False,
    sink: str = "noop",
    options: dict[str, str] | None = None,
) -> Any:
    """Start ``df`` into the no-op sink (only the processing is measured), or ``sink``
    with ``options``."""
    writer = (
        df.writeStream.format(sink)
        .options(**(options or {}))
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint_location)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def progress(query: Any) -> list[Progress]:
    """The query's progress reports (JSON dicts), oldest first."""
    return [json.loads(p.json) for p in query.recentProgress]


def _raise_failed(query: Any) -> None:
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"benchmark query failed: {error}")


def run_for(query: Any, seconds: float, first_batch_timeout: float = 300.0) -> list[Progress]:
    """Let ``query`` run ``seconds`` after its first batch, stop it, return its progress."""
    deadline = time.time() + first_batch_timeout
    while query.isActive and not query.recentProgress and time.time() < deadline:
        time.sleep(0.2)
    end = time.time() + seconds
    while query.isActive and time.time() < end:
        time.sleep(0.2)
    _raise_failed(query)
    query.stop()
    time.sleep(1.0)  # let the listener finish the last batch
    return progress(query)


def run_until(
    query: Any, done: Callable[[list[Progress]], bool], timeout: float, poll: float = 0.3
) -> list[Progress]:
    """Wait until ``done(progress)`` holds (or ``timeout`` seconds); return the progress."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        _raise_failed(query)
        seen = progress(query)
        if done(seen):
            return seen
        time.sleep(poll)
    raise TimeoutError(f"benchmark query did not reach its goal in {timeout:.0f} s")


def source_field(p: Progress, name: str) -> Any:
    """A field of the barriered source's progress (offsets parsed from JSON), or None."""
    raw = p["sources"][0].get(name)
    return json.loads(raw) if isinstance(raw, str) else raw


def source_offsets(p: Progress) -> tuple[SourceOffset | None, SourceOffset]:
    """The barriered source's start and end offsets of one batch."""

    def parse(name: str) -> SourceOffset | None:
        raw = source_field(p, name)
        return None if raw is None else SourceOffset.from_dict(raw)

    end = parse("endOffset")
    assert end is not None
    return parse("startOffset"), end


def delivered(p: Progress) -> list[int]:
    """Records delivered per channel in one batch (marker rows excluded)."""
    begin, end = source_offsets(p)
    before = begin.positions if begin is not None else (0,) * len(end.positions)
    return [e - b for b, e in zip(before, end.positions, strict=True)]


def batch_window_ms(p: Progress) -> tuple[float, float]:
    """Start and end of a batch, epoch milliseconds."""
    begin = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
    return begin, begin + float(p["batchDuration"])


def throughput(batches: Sequence[Progress], skip_first: int = 1) -> dict[str, Any]:
    """Steady-state records/s of a run: every batch but the first ``skip_first``.

    Returns
    -------
    dict
        ``records``, ``seconds``, ``records_per_s``, ``batches``, ``batch_ms_p50``.
    """
    steady = [p for p in batches if p["batchId"] >= skip_first]
    if not steady:
        return {"records": 0, "seconds": 0.0, "records_per_s": None, "batches": 0}
    records = sum(sum(delivered(p)) for p in steady)
    seconds = (batch_window_ms(steady[-1])[1] - batch_window_ms(steady[0])[0]) / 1000
    return {
        "records": records,
        "seconds": round(seconds, 2),
        "records_per_s": round(records / seconds, 1) if seconds > 0 else None,
        "batches": len(steady),
        "batch_ms_p50": percentile([p["batchDuration"] for p in steady], 50),
    }


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank), or None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def ratio(numerator: float | None, denominator: float | None, digits: int = 3) -> float | None:
    """``numerator / denominator`` rounded, or None when either is missing or zero."""
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, digits)


def target(name: str, value: float | None, bound: float, at_least: bool) -> dict[str, Any]:
    """One target check: ``value >= bound`` (``at_least``) or ``value <= bound``.

    Returns
    -------
    dict
        ``{name: {"value", "bound", "met", "margin"}}``; ``margin`` is how far ``value``
        is on the good side of ``bound`` (negative: missed by that much).
    """
    margin = None if value is None else round((value - bound) * (1 if at_least else -1), 3)
    check = {"value": value, "bound": bound, "met": margin is not None and margin >= 0}
    return {name: {**check, "margin": margin}}


def checkpoint_rows(snapshot_path: str) -> list[dict[str, Any]]:
    """Every row of the ``_checkpoints`` table of ``snapshot_path``, by id."""
    return checkpoints_table.read_rows(SnapshotLayout.configured(snapshot_path))
