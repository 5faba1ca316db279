"""In-flight capture: the records a barrier overtook, persisted with their checkpoint.

For an unaligned cut the planner knows each lagging channel's backlog ``[D(c), B_n(c))``.
In the cut batch one extra Spark task per such channel writes it to the ``inflight``
table (``inflight.capture = value``: the records themselves, partitioned by checkpoint
id) or only its range (``reference``: the upstream is replayable, nothing is copied),
then acknowledges as participant ``inflight/<channel>``.
"""

from __future__ import annotations

import logging
from typing import Protocol

import pyarrow as pa

from barriered import crash_points
from barriered.control.columns import data_batch
from barriered.statestore.acks import (
    Ack,
    DataFile,
    inflight_participant,
    write_ack,
    write_data_file,
)
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)


class Records(Protocol):
    """What a capture needs of the source's upstream (its ``Upstream`` has it): a
    channel's records in a position range, their positions, the schema."""

    def schema(self) -> pa.Schema: ...

    def positions(self, rows: pa.Table, start: int) -> pa.Array: ...

    def read(self, channel: int, start: int, end: int) -> pa.Table: ...


def capture(
    layout: SnapshotLayout,
    upstream: Records,
    checkpoint_id: int,
    channel: int,
    start: int,
    end: int,
    mode: str,
    epoch: int | None = None,
) -> Ack:
    """Persist the in-flight range of one channel and acknowledge it.

    Parameters
    ----------
    mode : str
        ``"value"`` copies the records, ``"reference"`` records only the range.
    epoch : int, optional
        The epoch of the run (its acknowledgement carries it).
    """
    files: tuple[DataFile, ...] = ()
    captured = end - start  # by reference: the range (fewer records where positions have gaps)
    if mode == "value" and end > start:
        rows = upstream.read(channel, start, end)
        table = data_batch(rows, channel, upstream.positions(rows, start))
        table = table.select([*upstream.schema().names, "_channel", "_seq"])
        captured = table.num_rows
        files = (
            write_data_file(
                layout.inflight_table,
                {"checkpoint_id": str(checkpoint_id)},
                f"ch{channel}",
                table,
            ),
        )
    participant = inflight_participant(channel)
    detail = {"participant": participant, "files": [f.path for f in files]}
    crash_points.hit(layout, crash_points.INFLIGHT_CAPTURE, checkpoint_id, detail=detail)
    ack = Ack(
        checkpoint_id,
        participant,
        changed=True,
        files=files,
        rows=captured,
        bytes=sum(f.size for f in files),
        extra={"channel": channel, "start": start, "end": end, "capture": mode},
        epoch=epoch,
    )
    write_ack(layout, ack)
    log.info(
        "checkpoint %d: in-flight channel %d [%d, %d) captured (%s, %d bytes)",
        checkpoint_id,
        channel,
        start,
        end,
        mode,
        ack.bytes,
    )
    return ack
