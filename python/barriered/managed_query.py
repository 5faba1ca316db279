"""A managed query: rescaled to another number of shuffle partitions in one call.

Spark cannot change a stateful query's ``spark.sql.shuffle.partitions`` in place: a query
resumed from its checkpoint location keeps the partitions its offset log recorded. A
barriered query changes them by a restore of its snapshot into a new checkpoint location,
which needs the query's definition; :func:`managed` keeps it, as a function that starts
the query::

    def start(run):
        events = (spark.readStream.format("barriered").options(**source)
                  .options(**run.source_options).load())   # restoreFrom, when restored
        out = barriered.keyed(events, "user_id").process(RunningTotals())
        return (out.writeStream.format("barriered-delta").option("path", table)
                .option("checkpointLocation", run.checkpoint_location).start())

    handle = barriered.managed(start, "/checkpoints/totals")
    handle.rescale(8)       # savepoint, stop, restore at 8 partitions; one call

:meth:`ManagedQuery.rescale` takes an aligned savepoint at the next barrier (the
coordinator's savepoint, kind ``savepoint`` in ``_checkpoints``), stops the query once it
completed, and starts it again restored from it (``restoreFrom`` its checkpoint id, on the
same snapshot path) with the new partitions in a fresh checkpoint location
(``<checkpoint_location>/run-<k>``). On the same snapshot path every ``barriered-delta``
and ``barriered-kafka`` sink continues exactly once: the restored checkpoint is the path's
latest, so nothing is rewound, and what the old run staged after it is never committed.
Should a periodic checkpoint complete between the savepoint and the stop, the new run
restores that one (the latest); the history names both. Each rescale is a row of the
snapshot path's ``_rescales`` table (:mod:`barriered.statestore.rescales_table`;
``barriered rescales PATH``). A script's handle also rescales at the request of
``barriered rescale PATH --partitions N`` from another process (:mod:`barriered.managed_watch`,
:mod:`barriered.control.rescale_mailbox`). Refusals (:class:`~barriered.errors.RescaleError`: a
partition count below 1 or above ``maxParallelism``, the current one, a rescale while
another runs, a query whose source is not barriered, a savepoint that fails) stop nothing
and write nothing. If the new run cannot start, the old run is resumed on its own
checkpoint location and the error is raised.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from barriered import wall_time
from barriered.api import await_termination, query_coordinator
from barriered.config.source_options import RESTORE_FROM
from barriered.errors import ConfigError, RescaleError
from barriered.files.fileio import exists, join, list_names, read_json
from barriered.managed_watch import watch
from barriered.statestore import rescales_table
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve

log = logging.getLogger(__name__)

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
#: The folder of each run under the handle's checkpoint location.
RUN_PREFIX = "run-"
#: The handle of every query a handle started, by query id (for :func:`rescale`).
_HANDLES: dict[str, ManagedQuery] = {}


@dataclass(frozen=True)
class Run:
    """What the start function gets: where this run of the query keeps Spark's
    checkpoint and what its barriered source restores.

    Attributes
    ----------
    checkpoint_location : str
        The run's Spark ``checkpointLocation`` (pass it to ``writeStream``).
    restore_from : str or None
        The source's ``restoreFrom`` (None: not restored, or resumed from
        ``checkpoint_location``).
    partitions : int or None
        The shuffle partitions the run was started with (None: the session's).
    """

    checkpoint_location: str
    restore_from: str | None = None
    partitions: int | None = None

    @property
    def source_options(self) -> dict[str, str]:
        """Options for the barriered source (``.options(**run.source_options)``)."""
        return {} if self.restore_from is None else {RESTORE_FROM.name: self.restore_from}


def _end_ms(progress: Any) -> int:
    """When a micro-batch's progress says it ended (epoch ms)."""
    started = datetime.datetime.fromisoformat(str(progress.timestamp).replace("Z", "+00:00"))
    took = int(dict(progress.durationMs).get("triggerExecution", 0))
    return int(started.timestamp() * 1000) + took


def _activate(spark: Any) -> None:
    """Make ``spark`` the active session of this thread in the JVM (a classic session):
    Spark looks a format up in the thread's active session, and the barriered source and
    sinks are registered per session, so a rescale called from another thread than the one
    that started the query would not find them."""
    session = getattr(spark, "_jsparkSession", None)
    if session is not None:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session)


def _last_with_records(query: Any) -> int | None:
    """When the query's last micro-batch that read records ended (None: none recently)."""
    for progress in reversed(query.recentProgress):
        if int(progress.numInputRows) > 0:
            return _end_ms(progress)
    return None


@dataclass
class ManagedQuery:
    """A barriered streaming query that can be rescaled and restarted (see
    :func:`managed`)."""

    start_query: Callable[[Run], Any]
    checkpoint_location: str
    spark: Any = None
    run: Run | None = None
    query: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopped: threading.Event = field(default_factory=threading.Event, repr=False)
    _watcher: threading.Thread | None = field(default=None, repr=False)

    # -- runs -----------------------------------------------------------------------------

    def _runs(self) -> list[int]:
        names = list_names(self.checkpoint_location, folders=True)
        return sorted(int(n[len(RUN_PREFIX) :]) for n in names if n[len(RUN_PREFIX) :].isdigit())

    def _location(self, number: int) -> str:
        return join(self.checkpoint_location, f"{RUN_PREFIX}{number}")

    def _launch(self, run: Run) -> Any:
        """Start ``run`` (with its partitions set on the session for the start only)."""
        spark = self.spark
        kept = None
        if spark is not None:
            _activate(spark)
        if run.partitions is not None:
            if spark is None:
                raise RescaleError(
                    "barriered.managed: no Spark session to set spark.sql.shuffle.partitions "
                    "on; pass spark=..."
                )
            kept = spark.conf.get(SHUFFLE_PARTITIONS)
            spark.conf.set(SHUFFLE_PARTITIONS, str(run.partitions))
        try:
            query = self.start_query(run)
        finally:
            if kept is not None:
                spark.conf.set(SHUFFLE_PARTITIONS, kept)
        if query is None or not hasattr(query, "runId"):
            raise RescaleError(
                f"barriered.managed: the start function returned {query!r}, not the "
                "StreamingQuery it started"
            )
        self.spark = self.spark or getattr(query, "sparkSession", None)
        self.run, self.query = run, query
        _HANDLES[str(query.id)] = self
        log.info("managed query %s started: %s", query.id, run)
        return query

    def start(self, partitions: int | None = None) -> Any:
        """Start the newest run under the checkpoint folder (Spark resumes it with the
        partitions it recorded: ``partitions`` is ignored), or the first (at
        ``partitions``)."""
        runs = self._runs()
        if runs:
            return self._launch(Run(self._location(runs[-1]), None, None))
        return self._launch(Run(self._location(0), None, partitions))

    def restart(self) -> Any:
        """Start the query again on its current checkpoint location (after a failure or a
        stop): Spark resumes it where it was, with the partitions it recorded."""
        if self.query is not None and self.query.isActive:
            raise RescaleError(f"query {self.query.id} is running; stop it before a restart")
        assert self.run is not None
        return self._launch(Run(self.run.checkpoint_location, None, self.run.partitions))

    @property
    def rescaling(self) -> bool:
        """Whether a rescale of this query is under way."""
        return self._lock.locked()

    def stop(self) -> None:
        """Stop the query and wait for its coordinator to finish with it (its last
        checkpoint recorded, retention done), then the watch."""
        self._stopped.set()
        if self.query is not None:
            self.query.stop()
            try:
                await_termination(self.query, timeout=60)
            except Exception as exc:  # a failed run's error is the query's, not stop()'s
                log.debug("managed query %s stopped: %s", self.query.id, exc)
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=60)

    # -- the watch ----------------------------------------------------------------------

    def watch(self, every: float = 1.0) -> None:
        """Start the thread that answers ``barriered rescale`` and applies the snapshot
        path's ``autoscale.*`` policy (:mod:`barriered.managed_watch`)."""
        if self._watcher is None:
            self._watcher = threading.Thread(
                target=watch,
                args=(self, self._stopped, every),
                name="barriered-managed",
                daemon=True,
            )
            self._watcher.start()

    def history(self) -> list[dict[str, Any]]:
        """The rescales recorded on the query's snapshot path (``_rescales``)."""
        return rescales_table.read_rows(self._layout())

    def _layout(self) -> SnapshotLayout:
        return query_coordinator(self.query, timeout=30.0)[1].layout

    # -- rescale --------------------------------------------------------------------------

    def rescale(
        self, partitions: int, timeout: float = 300.0, reason: str | None = None
    ) -> dict[str, Any]:
        """Take a savepoint, stop, and start again at ``partitions`` shuffle partitions.

        Parameters
        ----------
        partitions : int
            The new ``spark.sql.shuffle.partitions``: 1 to the snapshot path's
            ``maxParallelism``.
        timeout : float, default 300
            Seconds to wait for the savepoint, for the old run to end and for the new
            run's first micro-batch.
        reason : str, optional
            Why, for the history (the autoscaling policy's sentence).

        Returns
        -------
        dict
            The rescale's row of ``_rescales`` (partitions, savepoint and restored
            checkpoint ids, checkpoint locations, ``pause_ms``).

        Raises
        ------
        RescaleError
            A partition count out of range or unchanged, another rescale of this query
            running, a query that is not active or not barriered, or a savepoint that was
            aborted or did not complete in time: nothing was stopped or written. Or the
            new run could not start (the old run was resumed; the error says why).
        """
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise RescaleError(
                f"rescale: partitions must be a whole number >= 1, got {partitions!r}; "
                "nothing was stopped"
            )
        if not self._lock.acquire(blocking=False):
            raise RescaleError(
                f"rescale to {partitions} partitions refused: a rescale of query "
                f"{self.query.id} is running; wait for it (nothing was stopped)"
            )
        try:
            return self._rescale(partitions, timeout, reason)
        finally:
            self._lock.release()

    def _coordinated(self) -> tuple[Any, Any]:
        query = self.query
        if query is None or not query.isActive:
            raise RescaleError(
                "rescale refused: the query is not running (restart() it first); nothing "
                "was stopped"
            )
        try:
            return query_coordinator(query, timeout=30.0)
        except ConfigError as exc:
            raise RescaleError(
                f"rescale refused: {exc}. Only a query reading a barriered source is "
                "rescaled (its state restores at another partition count); nothing was stopped"
            ) from None

    def _rescale(self, partitions: int, timeout: float, reason: str | None) -> dict[str, Any]:
        listener, qc = self._coordinated()
        layout: SnapshotLayout = qc.layout
        conf = dict((read_json(layout.config_file, default={}) or {}).get("conf") or {})
        max_parallelism = int(conf.get("max_parallelism") or 128)
        if partitions > max_parallelism:
            raise RescaleError(
                f"rescale to {partitions} partitions refused: the snapshot path "
                f"{layout.root!r} has maxParallelism {max_parallelism} key groups, the most "
                "partitions its keyed state can be split into. Rescale its savepoint first "
                "(barriered savepoint rescale --max-parallelism N); nothing was stopped"
            )
        before = self.partitions_of(layout)
        if before == partitions:
            raise RescaleError(
                f"rescale refused: query {self.query.id} runs at {partitions} partitions "
                "already; nothing was stopped"
            )
        started = wall_time.now_ms()
        old_query, old_run = self.query, self.run
        assert old_run is not None
        savepoint_id = self._savepoint(listener, qc, partitions, timeout)
        old_query.stop()
        await_termination(old_query, timeout)
        last_end = _last_with_records(old_query)
        restored = resolve(layout, "latest", None).checkpoint_id
        number = max(self._runs(), default=0) + 1
        run = Run(self._location(number), str(restored), partitions)
        try:
            new_query = self._launch(run)
        except Exception as exc:
            log.warning("rescale: the new run did not start (%s); resuming the old run", exc)
            self._launch(Run(old_run.checkpoint_location, None, old_run.partitions))
            raise RescaleError(
                f"rescale to {partitions} partitions: the new run did not start ({exc}); "
                f"the old run was resumed from {old_run.checkpoint_location!r}"
            ) from exc
        first = self._first_batch(new_query, timeout)
        row = rescales_table.append(
            layout,
            {
                "status": "completed",
                "reason": reason,
                "started_ms": started,
                "ended_ms": wall_time.now_ms(),
                "from_partitions": before,
                "to_partitions": partitions,
                "max_parallelism": max_parallelism,
                "savepoint_id": savepoint_id,
                "restored_checkpoint_id": restored,
                "from_checkpoint_location": old_run.checkpoint_location,
                "to_checkpoint_location": run.checkpoint_location,
                "query_id": str(new_query.id),
                "from_run_id": str(old_query.runId),
                "to_run_id": str(new_query.runId),
                "pause_ms": None if first is None or last_end is None else first - last_end,
            },
        )
        log.info("rescale %d of %s: %s", row["rescale_id"], layout.root, row)
        return row

    def partitions_of(self, layout: SnapshotLayout) -> int | None:
        """The partitions the query runs at: those the handle started its run with, else
        (a resumed run: Spark keeps the ones its checkpoint recorded) its keyed operators'
        recorded ones, else the session's. A rescaled run's operators record theirs only
        once its first batch ran, so the run's own come first."""
        if self.run is not None and self.run.partitions is not None:
            return self.run.partitions
        recorded = {
            int(r["partitions"]) for r in layout.registrations().values() if "partitions" in r
        }
        if len(recorded) == 1:
            return recorded.pop()
        raw = None if self.spark is None else self.spark.conf.get(SHUFFLE_PARTITIONS)
        return None if raw is None else int(raw)

    def _savepoint(self, listener: Any, qc: Any, partitions: int, timeout: float) -> int:
        """Trigger a savepoint and wait for it to complete; return its id.

        Raises
        ------
        RescaleError
            When it is aborted, the query stops or it does not complete in time (the
            query keeps running).
        """
        with listener.lock:
            savepoint_id = int(qc.request_savepoint(f"(rescale to {partitions} partitions)"))
        deadline = time.monotonic() + timeout
        while True:
            with listener.lock:
                status, reason = qc.status(savepoint_id) or ("pending", None)
            if status == "completed":
                return savepoint_id
            problem = None
            if status == "aborted":
                problem = f"savepoint {savepoint_id} was aborted: {reason}"
            elif not self.query.isActive:
                problem = f"the query stopped before savepoint {savepoint_id} completed"
            elif time.monotonic() > deadline:
                problem = f"savepoint {savepoint_id} did not complete within {timeout:.0f} s"
            if problem is not None:
                raise RescaleError(
                    f"rescale to {partitions} partitions refused: {problem}; the query runs on "
                    "as it was"
                )
            time.sleep(0.05)

    @staticmethod
    def _first_batch(query: Any, timeout: float) -> int | None:
        """When the new run's first micro-batch that read records ended (None: none in
        ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and query.isActive:
            for progress in query.recentProgress:
                if int(progress.numInputRows) > 0:
                    return _end_ms(progress)
            time.sleep(0.1)
        return None


def managed(
    start: Callable[[Run], Any],
    checkpoint_location: str,
    spark: Any = None,
    partitions: int | None = None,
) -> ManagedQuery:
    """Start a barriered query through a handle that can rescale and restart it.

    Parameters
    ----------
    start : callable
        ``start(run) -> StreamingQuery``: defines and starts the query with
        ``run.checkpoint_location`` as its ``checkpointLocation`` and
        ``run.source_options`` on its barriered source (``restoreFrom``, when the run is
        restored). Called again by every rescale and restart.
    checkpoint_location : str
        A folder for the runs' checkpoint locations (``run-0``, ``run-1``, ...): the
        newest existing run is resumed.
    spark : SparkSession, optional
        The session ``start`` uses (default: the started query's); its
        ``spark.sql.shuffle.partitions`` is set while a rescaled run starts.
    partitions : int, optional
        The shuffle partitions of a first run (default: the session's).

    Returns
    -------
    ManagedQuery
        The handle: ``query``, ``rescale(n)``, ``restart()``, ``stop()``, ``history()``.
        With ``spark.sql.streaming.barriered.autoscale.enabled`` it rescales by itself
        (:meth:`ManagedQuery.watch`, :mod:`barriered.autoscale`).
    """
    handle = ManagedQuery(start, checkpoint_location, spark)
    if not exists(checkpoint_location):
        log.info("managed query: new checkpoint folder %s", checkpoint_location)
    handle.start(partitions)
    handle.watch()
    return handle


def rescale(query: Any, partitions: int, timeout: float = 300.0) -> dict[str, Any]:
    """Rescale a query started by :func:`managed` (its handle, or the query itself).

    Raises
    ------
    RescaleError
        When the query was not started by :func:`managed` (Spark cannot restart a query
        with other partitions without its definition), or as
        :meth:`ManagedQuery.rescale`.
    """
    handle = query if isinstance(query, ManagedQuery) else _HANDLES.get(str(query.id))
    if handle is None:
        raise RescaleError(
            f"query {query.id} was not started by barriered.managed(start, ...): a rescale "
            "restarts the query from its definition, which Spark does not keep; start it "
            "through barriered.managed. Nothing was stopped"
        )
    return handle.rescale(partitions, timeout)
