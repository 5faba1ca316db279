"""Refuse a barriered query whose plan holds state that no snapshot captures.

Spark's own stateful operators (aggregations, deduplication, stream-stream joins,
``applyInPandasWithState``, session windows, streaming ``limit``, another
``transformWithState``) keep their state in Spark's state store only, unless the session
runs the JVM provider of :mod:`barriered.provider` (``barriered.with_state_store``):
then every store of an operator reports the metric ``barrieredCapturedStores`` in the
query progress, and the provider captures it at every cut. A barriered
checkpoint would complete without it and a restore would silently restart them from
empty, so the coordinator refuses such a query on its first micro-batch, before any
checkpoint can complete (the query progress names every state operator of the plan:
``stateOperators[].operatorName``).

The keyed operator of :func:`barriered.keyed` is an ``applyInPandasWithState`` like any
other (it runs under any state store provider, unlike ``transformWithStateInPandas``,
which Spark allows only on its own RocksDB provider). Each one registers itself on the
snapshot path (``_coordinator/operators/<name>.json``) and the coordinator waits for all
of them at every checkpoint, so a query whose progress shows more
``applyInPandasWithState`` operators than the snapshot path has keyed operators runs
one that is not barriered.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from barriered.datasource.options import RESTORE_FROM

#: The progress name of ``applyInPandasWithState``, the one barriered.keyed() uses.
KEYED_OPERATOR = "applyInPandasWithState"

#: Progress names of Spark's stateful operators (Spark 4.3) and what users call them.
OPERATORS: dict[str, str] = {
    "stateStoreSave": "a streaming aggregation (groupBy().agg(), count, window)",
    "sessionWindowStateStoreSaveExec": "a session window aggregation (session_window)",
    "dedupe": "dropDuplicates()",
    "dedupeWithinWatermark": "dropDuplicatesWithinWatermark()",
    "symmetricHashJoin": "a stream-stream join",
    KEYED_OPERATOR: "applyInPandasWithState() not made by barriered.keyed()",
    "flatMapGroupsWithState": "flatMapGroupsWithState()",
    "transformWithStateInPySparkExec": "transformWithState() (Row-based)",
    "transformWithStateExec": "transformWithState() (Scala/Java)",
    "transformWithStateInPandasExec": "transformWithStateInPandas()",
    "globalLimit": "a streaming limit()",
}

#: The prefix of the trigger log's ``fatal`` message the source fails the query with.
MESSAGE_PREFIX = "state outside the snapshot: "
#: The prefix of the ``fatal`` message of a restore whose checkpoint holds state of an
#: operator the restored query does not run (the source fails it with a RestoreError).
RESTORE_PREFIX = "restored state without its operator: "


def refusal(
    operator_names: Sequence[str], keyed_operators: int, captured: Sequence[str] = ()
) -> str | None:
    """Why a query with these state operators cannot be barriered, or None if it can.

    Parameters
    ----------
    operator_names : sequence of str
        ``stateOperators[].operatorName`` of one query progress.
    keyed_operators : int
        How many barriered keyed operators the snapshot path has registered.
    captured : sequence of str
        ``operatorName`` of each state operator whose progress shows the JVM provider's
        metric ``barrieredCapturedStores``: its state is in every snapshot (see
        :mod:`barriered.provider`).

    Returns
    -------
    str or None
        The message (starting with :data:`MESSAGE_PREFIX`) naming each operator whose
        state no checkpoint would hold and what to do; None when there is none.
    """
    counts = Counter(operator_names)
    counts[KEYED_OPERATOR] -= min(counts[KEYED_OPERATOR], keyed_operators)
    counts.subtract(Counter(captured))
    foreign = [
        f"{OPERATORS.get(name, name)} ({name}{f' x{n}' if n > 1 else ''})"
        for name, n in sorted(counts.items())
        if n > 0
    ]
    if not foreign:
        return None
    return (
        f"{MESSAGE_PREFIX}the query runs {', '.join(foreign)}, whose state lives only in "
        "Spark's state store: barriered checkpoints would not hold it and a restore would "
        "silently restart it from empty. Keep state with barriered.keyed(df, *keys)"
        ".process(processor) instead (its state is in every snapshot), or run this "
        "query without the barriered source. Where custom jars are allowed (not on "
        "Databricks serverless or standard access mode), start the session with "
        "barriered.with_state_store(SparkSession.builder): its state store provider puts "
        "Spark's own operators in every snapshot"
    )


def unrestored(stores: Iterable[str], operator_count: int, checkpoint: str) -> str | None:
    """Why a restored query cannot run: the checkpoint holds a Spark operator's store
    whose operator the query does not have; None when every store has its operator.

    Parameters
    ----------
    stores : iterable of str
        The stores of the restored checkpoint (``<operator id>-<store name>``, from its
        restore manifest). ``barriered.keyed``'s operator has none (it restores itself).
    operator_count : int
        How many state operators the restored query runs (its first progress's
        ``stateOperators``): Spark numbers them ``0 .. operator_count - 1``.
    checkpoint : str
        The restored checkpoint, as named in the message.

    Returns
    -------
    str or None
        The message (starting with :data:`RESTORE_PREFIX`) naming the stores left out.
    """
    missing = sorted(s for s in stores if int(s.split("-", 1)[0]) >= operator_count)
    if not missing:
        return None
    return (
        f"{RESTORE_PREFIX}{checkpoint} holds the state of store(s) {', '.join(missing)}, "
        f"whose operator the restored query does not run (it runs {operator_count} "
        "stateful operator(s)): that state would be silently dropped. The query changed "
        "since the checkpoint: restore with the query that wrote it, or start without "
        f"{RESTORE_FROM.name}"
    )
