"""The StreamingQueryListener that drives every barriered query's coordinator."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from barriered.control.offsets import SourceOffset, two_sources_refusal
from barriered.coordinator import deferred_registrations
from barriered.coordinator.driver import QueryCoordinator
from barriered.errors import (
    BarrieredError,
    ConfigError,
    MirrorError,
    RestoreError,
    UnsupportedOperatorError,
)
from barriered.files.fileio import read_json
from barriered.provider import CAPTURED_METRIC
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve
from barriered.statestore.stateful_operators import (
    KEYED_OPERATOR,
    refusal,
    undeclared,
    unrestored,
    unrestored_keyed,
)

log = logging.getLogger(__name__)


def _barriered_sources(progress: Any) -> list[tuple[Any, dict[str, Any]]]:
    """Every barriered source of a progress with its report, the planning ones first (a
    source read more than once in a query has one planning instance; the others report
    ``mirror``, see :mod:`barriered.datasource.mirror`)."""
    found = []
    for source in progress.sources:
        raw = source.latestOffset
        if not raw:
            continue
        try:
            report = json.loads(raw)
        except ValueError:
            continue
        if isinstance(report, dict) and isinstance(report.get("barriered"), dict):
            found.append((source, report["barriered"]))
    return sorted(found, key=lambda f: bool(f[1].get("mirror")))


def _json_or_none(raw: str | None) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _unrestored(
    restore: dict[str, Any], operator_count: int, keyed: frozenset[str] | None
) -> str | None:
    """The refusal of a restored query lacking an operator of its checkpoint: a Spark
    operator's store, or a keyed operator's state (when the run said which keyed
    operators it runs); None when it has them all."""
    manifest = restore.get("operators_manifest")
    stores = (read_json(str(manifest), default=None) or {}).get("stores", {}) if manifest else {}
    checkpoint = f"checkpoint {restore.get('checkpoint_id')} of {restore.get('from')!r}"
    refused = unrestored(stores, operator_count, checkpoint)
    if refused is not None or keyed is None:
        return refused
    origin = SnapshotLayout.configured(str(restore["from"]))
    try:
        point = resolve(origin, str(restore["checkpoint_id"]), None)
    except RestoreError as exc:  # checked when the stream was loaded; gone since
        log.warning("the keyed operators of %s are not known: %s", checkpoint, exc)
        return None
    holding = {str(f.partition_values.get("operator")) for f in point.state_files()}
    return unrestored_keyed(holding, keyed, checkpoint, origin.root)


def _refusal(
    progress: Any,
    qc: QueryCoordinator,
    offset: SourceOffset,
    keyed: frozenset[str] | None,
    reports: list[dict[str, Any]],
) -> BarrieredError | None:
    """Why a run's first progress refuses it, as the error the source fails it with
    (the first that applies), or None."""
    ops = progress.stateOperators or ()
    names = [op.operatorName for op in ops]
    captured = [
        op.operatorName
        for op in ops
        if CAPTURED_METRIC in (getattr(op, "customMetrics", None) or {})
    ]
    count = len(qc.operators()) if keyed is None else len(keyed)
    checks: tuple[tuple[type[BarrieredError], Callable[[], str | None]], ...] = (
        (UnsupportedOperatorError, lambda: refusal(names, count, captured)),
        (
            ConfigError,
            lambda: None if keyed is None else undeclared(keyed, names.count(KEYED_OPERATOR)),
        ),
        (
            RestoreError,
            lambda: None if not offset.restore else _unrestored(offset.restore, len(names), keyed),
        ),
        (MirrorError, lambda: two_sources_refusal(reports)),
    )
    for error, check in checks:
        message = check()
        if message is not None:
            return error(message)
    return None


class BarrieredListener(StreamingQueryListener):
    """Runs a :class:`QueryCoordinator` per query that reads a barriered source.

    Errors inside the listener never reach Spark's listener bus: they are logged, and
    the fatal "too many failed checkpoints" error is handed to the source, which fails
    the query with it. So is the refusal of a query whose first progress shows a state
    operator no snapshot captures (:mod:`barriered.statestore.stateful_operators`).
    """

    def __init__(self) -> None:
        self.coordinators: dict[str, QueryCoordinator] = {}
        #: Held around every call into a coordinator (also by ``barriered.savepoint``).
        self.lock = threading.Lock()
        #: Per run (``runId``: a restarted query keeps its id), set when the listener has
        #: handled the run's termination (see ``wait_ended``).
        self._ended: dict[str, threading.Event] = {}
        self._ended_lock = threading.Lock()

    def coordinator(self, query_id: str) -> QueryCoordinator | None:
        """The coordinator of a running or finished query (None if it never progressed)."""
        return self.coordinators.get(str(query_id))

    def onQueryStarted(self, event: Any) -> None:
        self._ended_event(event.runId)

    def knows(self, run_id: Any) -> bool:
        """Whether this listener saw run ``run_id`` of a query start (it runs on its
        session)."""
        return str(run_id) in self._ended

    def running(self) -> list[str]:
        """The runs this listener saw start and not yet end (their ``runId``)."""
        with self._ended_lock:
            return [run for run, ended in self._ended.items() if not ended.is_set()]

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        found = _barriered_sources(progress)
        if not found:
            return
        source, report = found[0]
        try:
            end = json.loads(source.endOffset)
            start = _json_or_none(source.startOffset)
            with self.lock:
                qc = self.coordinators.get(str(progress.id))
                epoch = report.get("epoch")
                if qc is None or (qc.layout.root, qc.epoch) != (report["snapshotPath"], epoch):
                    offset = SourceOffset.from_dict(end)
                    layout = SnapshotLayout.at(report["snapshotPath"])
                    stream = report.get("source")
                    keyed = (
                        None
                        if stream is None
                        else deferred_registrations.declared(layout.root, stream)
                    )
                    qc = QueryCoordinator(
                        layout,
                        next_id=offset.last_id + 1,
                        epoch=None if epoch is None else int(epoch),
                        restored=offset.restore,
                        keyed=keyed,
                    )
                    self.coordinators[str(progress.id)] = qc
                    qc.identify(str(progress.id), str(progress.runId))
                    refused = _refusal(progress, qc, offset, keyed, [r for _, r in found])
                    if refused is not None:
                        qc.fail(refused)  # before any checkpoint of this query completes
                    else:  # the run's keyed operators, registered now that nothing refuses it
                        deferred_registrations.start_run(layout.root, stream)
                        qc.record_interrupted(frozenset(s.checkpoint_id for s in offset.started))
                duration = int(progress.batchDuration or 0)
                qc.on_progress(int(progress.batchId), start, end, report, duration)
        except Exception:
            log.exception("barriered coordinator failed on batch %s", progress.batchId)

    def _between_batches(self, query_id: Any, tick: bool, when: str) -> None:
        """Collect late acknowledgements (and trigger when ``tick``) outside a batch."""
        qc = self.coordinators.get(str(query_id))
        if qc is None:
            return
        try:
            with self.lock:
                qc.between_batches(tick)
        except Exception:
            log.exception("barriered coordinator failed %s", when)

    def onQueryIdle(self, event: Any) -> None:
        self._between_batches(event.id, tick=True, when="while idle")

    def onQueryTerminated(self, event: Any) -> None:
        self._between_batches(event.id, tick=False, when="at query termination")
        qc = self.coordinators.get(str(event.id))
        if qc is not None:
            try:
                with self.lock:
                    failed = getattr(event, "exception", None) is not None
                    qc.ended(str(event.runId), failed)
            except Exception:
                log.exception("barriered coordinator failed to release the run's clients")
        self._ended_event(event.runId).set()

    def _ended_event(self, run_id: Any) -> threading.Event:
        with self._ended_lock:
            return self._ended.setdefault(str(run_id), threading.Event())

    def wait_ended(self, run_id: Any, timeout: float | None) -> bool:
        """Wait until this listener has handled the end of run ``run_id`` of a query.

        Spark delivers listener events asynchronously, so ``awaitTermination`` may
        return before the coordinator has seen the last batches; once this returns
        True, every checkpoint the run finished is in ``_checkpoints``. Runs, not
        queries: a query restarted on its checkpoint location keeps its id, and the end
        of its previous run says nothing about this one.

        Returns
        -------
        bool
            False when ``timeout`` seconds passed first.
        """
        return self._ended_event(run_id).wait(timeout)
