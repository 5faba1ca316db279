"""Typed errors of spark-barriered, all in one place.

Every error the package raises on purpose derives from :class:`BarrieredError`, so
callers can catch one type. Messages name the option, key, file or checkpoint at fault
and say what to do about it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager


class BarrieredError(Exception):
    """Base class of every error raised on purpose by spark-barriered."""

    #: The Spark error this one was raised in, when it reached the driver through Spark
    #: (see :func:`raised_in_spark`).
    spark_error: BaseException | None = None


class ConfigError(BarrieredError, ValueError):
    """A configuration key or source option is unknown, malformed or out of range."""


class KeyGroupError(BarrieredError, ValueError):
    """A key group that cannot be computed: an unsupported key type, a key value that does
    not parse as its column's type, or an invalid number of partitions."""


class BarrierProtocolError(BarrieredError, RuntimeError):
    """An event violates the barrier protocol (e.g. an event on a closed channel)."""


class CheckpointError(BarrieredError, RuntimeError):
    """A checkpoint could not be triggered, acknowledged or completed."""


class CheckpointFailureLimitExceeded(CheckpointError):
    """More consecutive checkpoint failures than ``tolerableCheckpointFailures`` allows."""


class CoordinatorLostError(CheckpointError):
    """Micro-batches run but the checkpoint coordinator (the session's listener) is gone."""


class SnapshotStoreError(BarrieredError, OSError):
    """The snapshot path is missing, unwritable, corrupt or belongs to another query."""


class SnapshotPathInUseError(SnapshotStoreError):
    """Another run of a query owns the snapshot path and is still alive (its lease holds)."""


class FencedError(SnapshotStoreError):
    """This run lost the snapshot path to a newer run (a takeover): it may commit nothing."""


class RestoreError(BarrieredError, RuntimeError):
    """A snapshot cannot be restored into this query (missing, incompatible, corrupt)."""


class KeyedStateError(RestoreError):
    """The keyed operator's live state in Spark's checkpoint cannot serve this query (it
    was written for other partitions or in another format), or a snapshot path's state
    table has a layout this version does not write: the message names the operator, what
    differs and what to do (restore into a new checkpoint location or snapshot path)."""


class UpstreamError(BarrieredError, RuntimeError):
    """An upstream cannot deliver the records a batch planned: deleted before they were
    read, a topic recreated or repartitioned under the stream, a broker out of reach (the
    message names the topic, partition and offsets)."""


class ProcessorError(BarrieredError, ValueError):
    """A keyed processor broke its contract: ``process_batch`` or ``process`` returned
    something other than what :mod:`barriered.statestore.vectorized` describes (no tuple,
    a missing or extra output column, a new state without a key column or state field, a
    value its declared type cannot hold, or one key twice). The message names the
    processor, its operator, the method and the contract; nothing of the batch is kept."""


class InjectedFault(BarrieredError, RuntimeError):
    """A crash injected on purpose by :mod:`barriered.testing.faults` (recovery tests)."""


class UnsupportedOperatorError(ConfigError):
    """The query holds state a barriered snapshot does not capture (Spark's own stateful
    operators): restoring a checkpoint would silently restart them from empty."""


class SinkError(SnapshotStoreError):
    """The barriered-delta sink cannot stage or commit output (the message names the
    table, the sink and the batch or checkpoint)."""


class SinkRewindError(SinkError, RestoreError):
    """A restore from checkpoint ``n`` cannot bring a sink's output table back to what
    ``n`` covers: someone other than this sink wrote the table after ``n`` (the message
    names the table, its versions and what to do). Nothing was written."""


class MirrorError(BarrieredError, RuntimeError):
    """One barriered source read more than once in a query: a mirroring instance was asked
    for a batch its leading instance did not plan (the instances would cut at different
    positions), or two separately loaded barriered sources share one query."""


class StateProcessorError(BarrieredError, ValueError):
    """A bootstrap or transform of snapshot state (:mod:`barriered.state_processor`) was
    refused: its input does not fit the operator or the source it writes state for (the
    message names the operator, the column or option and what to do). Nothing was
    written."""


class RescaleError(BarrieredError, ValueError):
    """A rescale was refused: a savepoint's new ``maxParallelism`` out of range or a key
    type whose key group cannot be computed, a source that is not a savepoint, a target
    that exists; or a running query's rescale to more partitions than its key groups, while
    another runs, or of a query not started by :func:`barriered.managed`. The message names
    the option or path at fault and what to do. Nothing was written or stopped."""


class WorkerPythonError(BarrieredError, RuntimeError):
    """The interpreter Spark starts its Python workers with (``PYSPARK_PYTHON``) cannot
    import barriered: the message names it and how to point Spark at the right one."""


class LocalServerError(BarrieredError, RuntimeError):
    """A local server (``barriered kafka-broker``'s Kafka broker) cannot start: its jars
    or Java are missing, or it exited or did not answer (the message says which, with
    the end of its log)."""


def error_named(name: str) -> type[BarrieredError]:
    """The error class of this module called ``name`` (:class:`BarrieredError` for a name
    it does not define): how an error's type crosses a process boundary as text."""
    kind = globals().get(name)
    if isinstance(kind, type) and issubclass(kind, BarrieredError):
        return kind
    return BarrieredError


#: A barriered error's last line in a Python traceback that Spark passes on.
_RAISED = re.compile(r"^barriered\.errors\.(\w+): (.+)$", re.MULTILINE)


def raised_in_spark(error: BaseException) -> BarrieredError | None:
    """The barriered error a Spark error carries, first, or None when it carries none.

    An error raised in a Python worker (the source's, the sinks', ``barriered.keyed``'s)
    reaches the driver as Spark's ``AnalysisException`` (``PYTHON_DATA_SOURCE_ERROR``)
    or ``StreamingQueryException``, with the worker's traceback inside. The error
    returned has the barriered type and its one-line message first; Spark's error follows
    it in the message (and is its ``spark_error``).

    Parameters
    ----------
    error : BaseException
        What a Spark call raised.

    Returns
    -------
    BarrieredError or None
        The last barriered error named in ``error``'s text.
    """
    if isinstance(error, BarrieredError):
        return None
    found = _RAISED.findall(str(error))
    if not found:
        return None
    name, message = found[-1]
    translated = error_named(name)(f"{message}\n\nSpark's error, {type(error).__name__}: {error}")
    translated.spark_error = error
    return translated


@contextmanager
def unwrapped() -> Iterator[None]:
    """Re-raise a Spark error that carries a barriered error as that error
    (:func:`raised_in_spark`); let every other error through as it is."""
    try:
        yield
    except Exception as exc:
        translated = raised_in_spark(exc)
        if translated is None:
            raise
        raise translated from None


class MonitoringError(BarrieredError, RuntimeError):
    """The monitoring endpoint or page cannot start (its port is taken, its address is not
    this machine's), or an optional library it needs is not installed."""
