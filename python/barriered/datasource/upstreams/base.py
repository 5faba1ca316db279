"""The upstream protocol: what the "barriered" source needs from a data producer.

An upstream is split into *channels* (a file group, a table partition, a generator
lane, a Kafka topic-partition). Each channel is an ordered sequence of records addressed
by a *position* that only grows: the 0-based index of a record within its channel, or,
for an upstream with a :attr:`Upstream.position_column` (Kafka's offsets), a number
with gaps that the record carries. The source planner, on
the driver, asks :meth:`Upstream.available` how far each channel reaches right now; the
readers, on executors, ask :meth:`Upstream.read` for a range of positions. Reads must be
deterministic: the same range always returns the same records, so a checkpoint can be
restored by re-reading from its barrier positions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import pyarrow as pa


class Upstream(ABC):
    """A replayable, multi-channel record producer.

    Instances are created on the driver from the source options and pickled to the
    executors, so they must hold only picklable configuration (open handles are created
    lazily inside the methods).
    """

    #: Name used in ``.option("upstream", NAME)``.
    name: str = ""
    #: The user column holding each record's position, for an upstream whose positions
    #: have gaps (a read of ``[start, end)`` may return fewer rows); None: positions are
    #: dense, the records of ``[start, end)`` are ``end - start`` rows in order.
    position_column: str | None = None
    #: Whether channels may be added while the stream runs (new Kafka partitions): the
    #: source then reads them from their :meth:`start_positions` once no checkpoint is
    #: aligning, and a checkpoint of fewer channels restores into more. Never removed.
    grows: bool = False

    @abstractmethod
    def schema(self) -> pa.Schema:
        """Return the Arrow schema of the user columns (without ``_channel``/``_seq``)."""

    @abstractmethod
    def channel_count(self) -> int:
        """Return the number of channels (fixed for the life of a snapshot path, unless
        the upstream :attr:`grows`)."""

    def start_positions(self) -> list[int]:
        """Return, per channel, the position a new stream starts at (default 0)."""
        return [0] * self.channel_count()

    def positions(self, rows: pa.Table, start: int) -> pa.Array:
        """Return the positions of ``rows``, the result of ``read(channel, start, ...)``."""
        if self.position_column is not None:
            return rows[self.position_column].combine_chunks().cast(pa.int64())
        return pa.array(range(start, start + rows.num_rows), pa.int64())

    @abstractmethod
    def available(self) -> list[int]:
        """Return, per channel, the end (exclusive) of the positions that exist now.

        Called on the driver before every micro-batch: it must be cheap, and it must never
        return a smaller value for a channel than an earlier call did (nor fewer channels;
        more only if the upstream :attr:`grows`).
        """

    @abstractmethod
    def read(self, channel: int, start: int, end: int) -> pa.Table:
        """Return the records of ``channel`` at positions ``[start, end)`` in order.

        Runs on executors. The table has exactly :meth:`schema`, and ``end - start`` rows
        unless the upstream has a :attr:`position_column` (then the records whose
        position lies in the range).
        """

    def is_finite(self) -> bool:
        """Return True when the channels will never grow past :meth:`available`."""
        return False

    def check_available_now(self) -> None:  # noqa: B027 - optional hook
        """Refuse a ``trigger(availableNow=True)`` run this upstream cannot serve with a
        :class:`~barriered.errors.ConfigError` saying what to do. The default serves it:
        the run reads what is available when it starts."""

    def discover(self) -> None:  # noqa: B027 - optional hook
        """Add the channels an upstream that :attr:`grows` gained, and record them.

        Called by the source before planning each micro-batch, once its run owns the
        snapshot path; :meth:`available` then covers them. The default adds none.
        """

    def persist(self) -> None:  # noqa: B027 - optional hook
        """Write what the upstream keeps for the life of the stream (e.g. a manifest).

        Called once when the query starts, after every check passed; loading a stream
        (``schema()``) never writes. The default keeps nothing.
        """

    def completed(self, positions: Sequence[int]) -> None:  # noqa: B027 - optional hook
        """Called on the driver when the source plans (at every trigger, idle or not)
        after a checkpoint completed, with its barrier positions (e.g. to show progress
        to the upstream's own monitoring). Never used for recovery. The default does
        nothing."""

    def release(self, channel: int, before: int) -> None:  # noqa: B027 - optional hook
        """Let the upstream drop or archive what lies before ``before`` on ``channel``.

        Called after a checkpoint whose barrier position on ``channel`` is ``before``
        completed and is the oldest retained one. The default keeps everything.
        """

    def describe(self) -> Mapping[str, object]:
        """Return a small JSON-able description for logs and the ``_checkpoints`` table."""
        return {"upstream": self.name, "channels": self.channel_count()}
