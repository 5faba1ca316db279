"""A pure-Python stand-in for a running query: drives a real QueryCoordinator (no Spark)
through many checkpoints with real data files, acknowledgements and Delta commits."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from barriered.barrier import AbortReason
from barriered.config import BarrieredConf
from barriered.control.offsets import AbortedCheckpoint, Cut, SourceOffset, StartedCheckpoint
from barriered.coordinator.driver import QueryCoordinator
from barriered.files.fileio import write_json
from barriered.statestore.acks import (
    Ack,
    DataFile,
    inflight_participant,
    state_participant,
    write_ack,
    write_data_file,
)
from barriered.statestore.layout import SnapshotLayout
from snapshots import registration, state_file, state_rows

OPERATOR = "totals"
KEY_GROUPS = 4
CHANNELS = 2
INFLIGHT_SCHEMA = pa.schema(
    [("user_id", pa.string()), ("_channel", pa.int32()), ("_seq", pa.int64())]
)


@dataclass
class Usage:
    """Files and bytes under a folder."""

    files: int
    bytes: int


def usage(root: str) -> Usage:
    """Count the files and bytes under ``root``."""
    files = size = 0
    for folder, _, names in os.walk(root):
        for name in names:
            files += 1
            size += os.path.getsize(os.path.join(folder, name))
    return Usage(files, size)


class SoakQuery:
    """A query on ``root``: every checkpoint changes two key groups; every third one is
    unaligned (in-flight records of channel 0); every seventh is aborted after its
    participants wrote their files."""

    def __init__(self, root: Path, **conf: Any) -> None:
        self.layout = SnapshotLayout.at(str(root))
        settings = BarrieredConf(
            snapshot_path=self.layout.root, checkpoint_interval_ms=3_600_000, **conf
        )
        write_json(
            self.layout.config_file,
            {"conf": settings.to_dict(), "channels": CHANNELS, "upstream": {"upstream": "rate"}},
        )
        write_json(
            self.layout.operator_file(OPERATOR),
            registration(OPERATOR, KEY_GROUPS),
        )
        self.coordinator = QueryCoordinator(self.layout)
        self.checkpoint_id = 0
        self.batch = 0
        self.totals = [0] * KEY_GROUPS
        self.completed: list[int] = []
        #: Per completed checkpoint: the total of each key group it holds.
        self.totals_at: dict[int, dict[int, int]] = {}
        #: Per key group, the files reported for checkpoints that were aborted: reported
        #: again until a checkpoint completes (as a keyed partition does).
        self.pending: dict[int, list[DataFile]] = {}

    def _state_ack(self, cid: int, key_group: int, changed: bool) -> Ack:
        participant = state_participant(OPERATOR, key_group)
        files = list(self.pending.get(key_group, []))
        if changed:  # the key group's whole state, replacing its older rows
            self.totals[key_group] += cid
            rows = state_rows([f"u{key_group}"], [self.totals[key_group]], cid, key_group)
            files.append(state_file(self.layout, rows, cid, [key_group], OPERATOR))
        self.pending[key_group] = files
        if not files:
            return Ack(cid, participant, changed=False)
        size = sum(f.size for f in files)
        return Ack(cid, participant, changed=True, files=tuple(files), rows=1, bytes=size)

    def _inflight_ack(self, cid: int, start: int, end: int) -> Ack:
        table = pa.table(
            {
                "user_id": [f"u{s}" for s in range(start, end)],
                "_channel": [0] * (end - start),
                "_seq": list(range(start, end)),
            },
            schema=INFLIGHT_SCHEMA,
        )
        f = write_data_file(self.layout.inflight_table, {"checkpoint_id": str(cid)}, "ch0", table)
        extra = {"channel": 0, "start": start, "end": end, "capture": "value"}
        return Ack(cid, inflight_participant(0), True, (f,), end - start, f.size, extra)

    def checkpoint(self) -> int:
        """Run one checkpoint through the coordinator; return its id."""
        self.checkpoint_id += 1
        cid = self.checkpoint_id
        self.batch += 1
        now = int(time.time() * 1000)
        barrier = (cid * 10, cid * 10)
        unaligned = cid % 3 == 0
        inflight = ((0, barrier[0] - 4, barrier[0]),) if unaligned else ()
        aborted = cid % 7 == 0  # its state changes stay: the next checkpoint holds them
        changed = {cid % KEY_GROUPS, (cid * 3 + 1) % KEY_GROUPS}
        for kg in range(KEY_GROUPS):
            write_ack(self.layout, self._state_ack(cid, kg, kg in changed))
        for _, start, end in inflight:
            write_ack(self.layout, self._inflight_ack(cid, start, end))
        mode = "unaligned" if unaligned else "aligned"
        started = StartedCheckpoint(cid, "checkpoint", mode, barrier, now, reason="soak")
        if aborted:
            offset = SourceOffset(
                positions=barrier,
                last_id=cid,
                started=(started,),
                aborted=(AbortedCheckpoint(cid, AbortReason.CANCELLED),),
            )
        else:
            cut = Cut(cid, "checkpoint", mode, barrier, inflight, base=None, at_ms=now)
            offset = SourceOffset(positions=barrier, last_id=cid, started=(started,), cut=cut)
        self.coordinator.on_progress(self.batch, None, offset.to_dict(), None, 0)
        status = self.coordinator.status(cid)
        assert status is not None
        assert status[0] == ("aborted" if aborted else "completed"), status
        if not aborted:
            self.completed.append(cid)
            self.totals_at[cid] = dict(enumerate(self.totals))
            self.pending.clear()
        return cid
