"""Staged batches: what the sink pre-committed, waiting for the checkpoint covering it.

The driver-side ``commit`` of every micro-batch writes one JSON file (atomically)
``<snapshotPath>/_sink/<sink>/e<epoch>/<batch>.json`` naming the data files the batch's
tasks wrote into the output table's folder, their sizes and rows, the output schema and
the sink's settings. Nothing is visible in the output table yet. Staged batches are named
by the epoch of the run that staged them (:mod:`barriered.statestore.ownership`): Spark
numbers the batches of a restored run from 0 again, and the batches a crashed run staged
after the restored cut must never be committed.

Both sinks stage this way: the ``barriered-delta`` sink's data files lie in the output
table's folder, the ``barriered-kafka`` sink's (its rows as Kafka records) under
``_sink/<sink>/data/`` (:mod:`barriered.sink.kafka`); ``settings.kind`` tells them apart.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from barriered.files.fileio import delete_file, join, list_names, read_json, write_json
from barriered.sink.kafka.options import KIND as KAFKA
from barriered.sink.kafka.options import KafkaSinkSettings
from barriered.sink.options import SinkSettings
from barriered.statestore.acks import DataFile
from barriered.statestore.layout import SnapshotLayout

DELTA = "delta"


def settings_from_dict(d: dict[str, Any]) -> SinkSettings | KafkaSinkSettings:
    """The settings of a staged batch (a delta sink's have no ``kind``)."""
    return KafkaSinkSettings.from_dict(d) if d.get("kind") == KAFKA else SinkSettings.from_dict(d)


def kind(settings: SinkSettings | KafkaSinkSettings) -> str:
    """``"kafka"`` or ``"delta"``: which sink staged with ``settings``."""
    return KAFKA if isinstance(settings, KafkaSinkSettings) else DELTA


@dataclass(frozen=True)
class StagedBatch:
    """The output of one micro-batch, written but not committed."""

    settings: SinkSettings | KafkaSinkSettings
    epoch: int
    batch_id: int
    schema: pa.Schema
    files: tuple[DataFile, ...] = ()
    #: When the batch was staged (ms since the epoch, the driver's clock).
    staged_ms: int = 0

    @property
    def rows(self) -> int:
        """Rows in the batch's files."""
        return sum(f.rows for f in self.files)

    @property
    def bytes(self) -> int:
        """Bytes of the batch's files."""
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "settings": self.settings.to_dict(),
            "epoch": self.epoch,
            "batch_id": self.batch_id,
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii"),
            "files": [vars(f) for f in self.files],
            "staged_ms": self.staged_ms,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StagedBatch:
        """Parse the JSON form."""
        return cls(
            settings=settings_from_dict(d["settings"]),
            epoch=int(d["epoch"]),
            batch_id=int(d["batch_id"]),
            schema=pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"]))),
            files=tuple(DataFile(**f) for f in d.get("files", [])),
            staged_ms=int(d.get("staged_ms", 0)),
        )

    def file(self, layout: SnapshotLayout) -> str:
        """Where this staged batch is recorded."""
        return layout.staged_file(self.settings.sink_id, self.epoch, self.batch_id)


def stage(layout: SnapshotLayout, batch: StagedBatch) -> None:
    """Record ``batch`` (atomically; a retried batch replaces its record whole)."""
    write_json(batch.file(layout), batch.to_dict())


def sink_ids(layout: SnapshotLayout, epoch: int | None = None) -> list[str]:
    """The sinks that staged batches on this snapshot path (in the run of ``epoch``)."""
    names = list_names(layout.sink_dir(), folders=True)
    if epoch is None:
        return names
    return [s for s in names if f"e{epoch}" in list_names(layout.sink_dir(s), folders=True)]


def epochs(layout: SnapshotLayout, sink_id: str) -> list[int]:
    """The epochs of the runs with batches of ``sink_id`` still staged."""
    names = list_names(layout.sink_dir(sink_id), folders=True)
    return sorted(int(n[1:]) for n in names if n.startswith("e") and n[1:].isdigit())


def staged_ids(layout: SnapshotLayout, sink_id: str, epoch: int) -> list[int]:
    """Batch ids staged by ``sink_id`` in the run of ``epoch``, ascending."""
    folder = join(layout.sink_dir(sink_id), f"e{epoch}")
    return sorted(int(n[:-5]) for n in list_names(folder) if n.endswith(".json"))


def read(layout: SnapshotLayout, sink_id: str, epoch: int, batch_id: int) -> StagedBatch | None:
    """The staged batch, or None when it is not (or no longer) recorded."""
    raw = read_json(layout.staged_file(sink_id, epoch, batch_id), default=None)
    return None if raw is None else StagedBatch.from_dict(raw)


def forget(layout: SnapshotLayout, batches: Sequence[StagedBatch], delete_data: bool) -> None:
    """Delete the records of committed (or orphaned) batches, and their data files when
    no table version reads them (mode update's staged rows, orphans)."""
    for batch in batches:
        if delete_data:
            for f in batch.files:
                delete_file(join(batch.settings.path, f.path))
        delete_file(batch.file(layout))
