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
which Spark allows only on its own RocksDB provider). Each one is declared on the stream
it reads and registered on the snapshot path (``_coordinator/operators/<name>.json``)
when the run starts, and the coordinator waits for all of them at every checkpoint, so a
query whose progress shows more ``applyInPandasWithState`` operators than its stream
declared keyed operators runs one that is not barriered, and one that shows fewer would
wait for a declared operator that does not run (:func:`undeclared`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from barriered.config.source_options import RESTORE_FROM

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

#: The start of the message of a query refused for state outside the snapshot.
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


#: The prefix of the ``fatal`` message of a query that runs fewer keyed operators than
#: were declared on its stream (the source fails it with a ConfigError).
UNDECLARED_PREFIX = "keyed operators outside the query: "


def undeclared(declared: Iterable[str], in_plan: int) -> str | None:
    """Why a query cannot checkpoint: keyed operators were declared on the stream it reads
    (``barriered.keyed(...).process()``) that its plan does not run, so every checkpoint
    would wait for their key groups; None when the plan runs at least as many
    ``applyInPandasWithState`` operators as were declared.

    Parameters
    ----------
    declared : iterable of str
        The keyed operators declared on the query's loaded stream.
    in_plan : int
        How many ``applyInPandasWithState`` operators its first progress names.
    """
    names = sorted(declared)
    if len(names) <= in_plan:
        return None
    return (
        f"{UNDECLARED_PREFIX}barriered.keyed(...).process() declared keyed operator(s) "
        f"{names} on the stream this query reads, but the query runs {in_plan} keyed "
        "operator(s): its checkpoints would wait for the others forever. Declarations "
        "belong to the loaded stream: load it again (spark.readStream...load()) for each "
        "query, and declare on it only the operators that query runs"
    )


def unrestored_keyed(
    holding: Iterable[str], running: Iterable[str], checkpoint: str, origin: str
) -> str | None:
    """Why a restored query cannot run: the checkpoint holds the state of a keyed operator
    the query does not run (its state would ride along, unchanged, in every later
    checkpoint); None when it runs every one.

    Parameters
    ----------
    holding : iterable of str
        The keyed operators with state in the restored checkpoint.
    running : iterable of str
        The keyed operators the restored query runs (declared on its stream).
    checkpoint : str
        The restored checkpoint, as named in the message.
    origin : str
        Its snapshot path or savepoint folder.
    """
    running = set(running)
    missing = sorted(set(holding) - running)
    if not missing:
        return None
    first = missing[0]
    return (
        f"{RESTORE_PREFIX}{checkpoint} holds the state of keyed operator(s) {missing}, which "
        f"the restored query does not run (it runs {sorted(running) or 'none'}): that state "
        "would be neither restored nor dropped, but carried unchanged into every later "
        "checkpoint. Run the operator in the restored query "
        f"(barriered.keyed(...).process(processor, name={first!r})), or restore a "
        "savepoint without its state: barriered savepoint transform "
        f"{origin!r} -o NEW --operator {first} --where false, then restoreFrom NEW"
    )
