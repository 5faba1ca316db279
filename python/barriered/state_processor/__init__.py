"""The state processor: write snapshot state offline (Flink's State Processor API).

* :func:`bootstrap` writes a savepoint from batch DataFrames: the state of
  ``barriered.keyed`` operators (given per key, or computed by the processor from input
  rows) and the positions per channel where the restored stream starts reading;
* :func:`transform` reads one operator's state of a checkpoint or savepoint as a
  DataFrame, applies a function and writes a new savepoint, carrying everything else
  over unchanged;
* :func:`read_state` reads an operator's state of a checkpoint as a DataFrame;
* :func:`rescale` writes a savepoint again with another ``maxParallelism`` (every key in
  its new key group; no Spark needed).

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
from barriered.state_processor import rescale as _rescale
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


def rescale(snapshot: str, path: str, max_parallelism: int) -> Savepoint:
    """Write a savepoint again with another ``maxParallelism`` (number of key groups).

    ``maxParallelism`` is fixed for the life of a snapshot path and bounds the partitions
    its keyed state can be split into; this changes it offline. Each key's new key group
    is computed from the key (``pmod(hash(key), max_parallelism)``), for every
    ``barriered.keyed`` operator and every store of Spark's own operators the JVM provider
    captured; positions, in-flight records and the upstream's manifest are copied
    unchanged. Restore the result with ``.option("restoreFrom", path)`` and
    ``maxParallelism`` set to ``max_parallelism``, at any ``spark.sql.shuffle.partitions``
    up to it. The CLI: ``barriered savepoint rescale SAVEPOINT -o OUT --max-parallelism N``.

    Parameters
    ----------
    snapshot : str
        A savepoint folder; only read (unchanged byte for byte).
    path : str
        The new savepoint folder; it must not exist.
    max_parallelism : int
        The new number of key groups, 1 to 32768.

    Returns
    -------
    Savepoint
        The new folder and what it holds (the same checkpoint id).

    Raises
    ------
    RescaleError
        ``max_parallelism`` out of range, ``snapshot`` missing or not a savepoint, ``path``
        existing (or inside ``snapshot``), or a key column of a type whose Spark hash is
        not computed outside Spark when the new value does not divide the old one.
        Nothing is written.
    RestoreError
        When the savepoint's checkpoint or its files are missing or damaged.

    Examples
    --------
    >>> barriered.state_processor.rescale("/sp/128", "/sp/512", 512)  # doctest: +SKIP
    """
    return _rescale.rescale(snapshot, path, max_parallelism)


__all__ = [
    "BOOTSTRAP_ID",
    "KeyedState",
    "SparkState",
    "bootstrap",
    "read_state",
    "rescale",
    "transform",
]
