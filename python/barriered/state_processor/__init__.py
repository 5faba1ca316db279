"""The state processor: write snapshot state offline (Flink's State Processor API).

* :func:`bootstrap` writes a savepoint from batch DataFrames: the state of
  ``barriered.keyed`` operators (given per key, or computed by the processor from input
  rows) and the positions per channel where the restored stream starts reading;
* :func:`transform` reads one operator's state of a checkpoint or savepoint as a
  DataFrame, applies a function and writes a new savepoint, carrying everything else
  over unchanged;
* :func:`read_state` reads an operator's state of a checkpoint as a DataFrame.

Both write a savepoint folder in the layout :func:`barriered.savepoint` writes: start a
streaming query from it with ``.option("restoreFrom", folder)`` on a new
``snapshotPath`` (any ``spark.sql.shuffle.partitions``). Schema changes a restore makes
itself (a field added with a default, removed, widened) need no transform:
:mod:`barriered.statestore.evolution`. Works on classic and Spark Connect sessions for
``barriered.keyed``; under the JVM provider :func:`bootstrap` also writes the stores of a
query's grouped aggregations and ``dropDuplicates`` (:class:`SparkState`, classic sessions
only: Connect and serverless have no provider), and :func:`transform` carries stores over
unchanged. The CLI: ``barriered savepoint bootstrap|transform``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from barriered.state_processor import bootstrap as _bootstrap
from barriered.state_processor import transform as _transform
from barriered.state_processor.bootstrap import BOOTSTRAP_ID, KeyedState
from barriered.state_processor.stores import SparkState
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve
from barriered.statestore.savepoints import Savepoint


def bootstrap(
    spark: SparkSession,
    path: str,
    source: Mapping[str, str],
    states: Sequence[KeyedState | SparkState],
    positions: Sequence[int] | None = None,
) -> Savepoint:
    """Write a savepoint from batch data, for a streaming query to start from.

    Parameters
    ----------
    spark : SparkSession
        A session on which :func:`barriered.install` was called (its
        ``spark.sql.streaming.barriered.*`` keys count, as for the stream).
    path : str
        The savepoint folder; it must not exist yet (or be empty).
    source : mapping of str to str
        The options of the streaming query's barriered source (``upstream``, ``path``,
        ``channels``, ``maxParallelism``, ...): they fix the configuration, the channels
        and the upstream manifest the savepoint records. ``snapshotPath`` is ignored;
        ``restoreFrom`` is refused.
    states : sequence of KeyedState or SparkState
        The keyed operators' state, each from a DataFrame; and (JVM provider, classic
        session) at most one :class:`SparkState`: the stores of a streaming query's own
        grouped aggregations and ``dropDuplicates``, computed from batch rows by the
        query's own plan.
    positions : sequence of int, optional
        Per channel, the position where the restored query starts reading: the
        bootstrapped state covers the records before it. Default: everything the
        upstream holds now (for ``files``/``delta``: the files it lists now, recorded
        in the savepoint's manifest; records that arrive later are read by the stream).

    Returns
    -------
    Savepoint
        The folder (``restoreFrom``) and what it holds (checkpoint id 1).

    Raises
    ------
    StateProcessorError
        A key column or state field missing from a DataFrame, a key column whose type
        differs from the upstream's, a key given twice, operator names that repeat,
        positions outside the upstream, or ``restoreFrom`` in ``source``; for a
        :class:`SparkState`: a Spark Connect session or one without the provider, a query
        with a stateful operator it cannot write (named) or with none, or batch rows that
        miss a column of the stream's records or have it with another type.
    ConfigError
        An unknown or bad source option, or a state field of a type keyed state cannot
        hold.
    SnapshotStoreError
        When ``path`` is not empty.

    Notes
    -----
    Every refusal happens before anything is written; if writing fails (a Spark job
    fails), what was written is removed.
    """
    return _bootstrap.bootstrap(spark, path, source, states, positions)


def transform(
    spark: SparkSession,
    snapshot: str,
    path: str,
    operator: str,
    function: Callable[[DataFrame], DataFrame],
    checkpoint: int | None = None,
) -> Savepoint:
    """Write a savepoint of a checkpoint with one keyed operator's state transformed.

    Parameters
    ----------
    spark : SparkSession
        The session that reads the state and runs ``function``.
    snapshot : str
        A snapshot path or a savepoint folder (only read, never changed).
    path : str
        The new savepoint folder; it must not exist yet (or be empty).
    operator : str
        The keyed operator (``process(..., name=)``, default: the processor's class name
        in snake_case).
    function : callable
        ``DataFrame -> DataFrame``: gets the operator's state (its key columns and state
        fields, one row per key) and returns the new state: rows filtered, values
        changed, fields added (``withColumn``), dropped or cast. The key columns must
        keep their names and types; the state fields become the operator's new
        ``state_schema`` (the restoring processor declares it).
    checkpoint : int, optional
        A completed checkpoint of ``snapshot`` (default: the latest; a savepoint's own).

    Returns
    -------
    Savepoint
        The new folder, holding the same checkpoint id, positions and in-flight records.

    Raises
    ------
    StateProcessorError
        No such operator, a key column missing or of another type, or a function that
        does not return a DataFrame.
    RestoreError
        No such completed checkpoint, or its files are missing.
    SnapshotStoreError
        When ``path`` is not empty.
    """
    return _transform.transform(spark, snapshot, path, operator, function, checkpoint)


def read_state(
    spark: SparkSession, snapshot: str, operator: str, checkpoint: int | None = None
) -> DataFrame:
    """Return one keyed operator's state of a checkpoint: key columns and state fields.

    Parameters
    ----------
    spark : SparkSession
        The session.
    snapshot : str
        A snapshot path or a savepoint folder.
    operator : str
        The keyed operator.
    checkpoint : int, optional
        A completed checkpoint (default: the latest).

    Raises
    ------
    StateProcessorError
        When there is no such operator.
    RestoreError
        When there is no such completed checkpoint.
    """
    point = resolve(
        SnapshotLayout.existing(snapshot), "latest" if checkpoint is None else str(checkpoint), None
    )
    return _transform.read_state(spark, point, operator)


__all__ = ["BOOTSTRAP_ID", "KeyedState", "SparkState", "bootstrap", "read_state", "transform"]
