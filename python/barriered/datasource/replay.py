"""Replay of a restored checkpoint's in-flight records stored by value.

An unaligned checkpoint saved the records its barrier overtook (``inflight.capture =
value``) in the ``inflight`` table; a query restored from it reads those ranges from
there, before the upstream's records, so a restore does not depend on the upstream still
holding them. Ranges captured by reference have no files: they are re-read from the
upstream.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import InputPartition

from barriered.control.columns import CHANNEL, SEQ
from barriered.control.offsets import Replay
from barriered.errors import RestoreError
from barriered.files.fileio import filesystem, join
from barriered.statestore.restore_point import RestorePoint


@dataclass(frozen=True)
class ReplayPartition(InputPartition):
    """Records ``[start, end)`` of one channel, read from a restored checkpoint's
    ``inflight`` files instead of the upstream."""

    channel: int
    start: int
    end: int
    files: tuple[str, ...]


def of(point: RestorePoint) -> Replay | None:
    """The in-flight records of ``point`` stored by value, to replay before the upstream.

    Ranges captured by reference have no files: they are re-read from the upstream.
    """
    files = point.inflight_files()
    by_channel: dict[int, list[str]] = {}
    for f in files:
        name = f.path.rsplit("/", 1)[-1]
        channel = int(name.split("-", 1)[0].removeprefix("ch"))
        by_channel.setdefault(channel, []).append(f.path)
    ranges = tuple((c, a, b) for c, a, b in point.inflight if c in by_channel)
    if not ranges:
        return None
    return Replay(
        table=point.origin.inflight_table,
        checkpoint_id=point.checkpoint_id,
        ranges=ranges,
        files=tuple(
            (c, join(point.origin.inflight_table, path))
            for c in sorted(by_channel)
            for path in by_channel[c]
        ),
    )


def read(partition: ReplayPartition, schema: pa.Schema, dense: bool) -> tuple[pa.Table, pa.Array]:
    """Read records ``[start, end)`` of a channel from in-flight files, in ``_seq`` order,
    with their positions. With ``dense`` positions the range must be whole; an upstream
    whose positions have gaps (Kafka offsets) holds up to ``end - start`` records there,
    each once."""
    pieces = []
    for path in partition.files:
        fs, local = filesystem(path)
        with fs.open_input_file(local) as f:
            pieces.append(pq.read_table(f))
    table = pa.concat_tables(pieces) if pieces else schema.empty_table()
    if pieces:
        keep = pc.and_(
            pc.equal(table[CHANNEL], partition.channel),
            pc.and_(
                pc.greater_equal(table[SEQ], partition.start), pc.less(table[SEQ], partition.end)
            ),
        )
        table = table.filter(keep).sort_by(SEQ)
    width = partition.end - partition.start
    seqs = table[SEQ].combine_chunks() if table.num_rows else pa.array([], pa.int64())
    whole = table.num_rows == width if dense else len(pc.unique(seqs)) == table.num_rows
    if not whole or table.num_rows > width:
        raise RestoreError(
            f"in-flight files {list(partition.files)} hold {table.num_rows} records of channel "
            f"{partition.channel} in [{partition.start}, {partition.end}), expected "
            f"{width if dense else f'at most {width}, each once'}; the restored checkpoint's "
            "in-flight data is incomplete"
        )
    return table.select(schema.names).cast(schema), seqs.cast(pa.int64())
