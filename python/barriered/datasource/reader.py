"""The stream reader of the "barriered" source (Python Data Source API, Spark >= 4.2).

Driver side (one long-lived Python worker): ``initialOffset``, ``latestOffset`` (the
planner), ``partitions``, ``reportLatestOffset``, ``commit``. Executor side (a pickled
copy): ``read``. Nothing the driver side keeps in memory is needed for correctness:
the planner works from the start offset and the coordinator's control record
(:mod:`barriered.control.record`) alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from barriered import crash_points, wall_time
from barriered.config.source_options import RESTORE_FROM
from barriered.control.columns import data_batch, marker_batch
from barriered.control.offsets import SourceOffset
from barriered.control.record import ControlRecord
from barriered.datasource import available_now, mirror, replay
from barriered.datasource.options import SourceSettings
from barriered.datasource.partitions import (
    InflightPartition,
    MarkerPartition,
    RangePartition,
    WithMarkers,
)
from barriered.datasource.planner import PlanInput, Planner
from barriered.datasource.upstreams.base import Upstream
from barriered.datasource.watchdog import CoordinatorWatchdog
from barriered.errors import (
    MirrorError,
    RestoreError,
    SnapshotPathInUseError,
)
from barriered.files.fileio import delete_file, exists
from barriered.statestore import operators, ownership
from barriered.statestore.inflight import capture
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import RestorePoint, highest_checkpoint_id

log = logging.getLogger(__name__)


class BarrieredStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads an upstream's channels and injects checkpoint barriers."""

    def __init__(
        self,
        settings: SourceSettings,
        upstream: Upstream,
        layout: SnapshotLayout,
        restore: RestorePoint | None = None,
        start_run: Callable[[Upstream], Upstream] | None = None,
        source_id: str | None = None,
    ):
        self.settings = settings
        self.upstream = upstream
        self.layout = layout
        self.restore = restore
        #: What the run writes once it owns the path (manifest, configuration); returns
        #: the upstream to read from (see ``barriered.datasource.source._start_run``).
        self._start_run = start_run
        #: This run's epoch on the snapshot path, taken by :meth:`_own`.
        self.epoch: int | None = None
        self._lease: ownership.Lease | None = None
        #: This loaded source's id (shared by every instance of it in one query).
        self.source_id = source_id or mirror.new_source_id()
        #: Set when this instance plans (it took the epoch) or mirrors a sibling that does.
        self._leader: mirror.Leader | None = None
        self._follower: mirror.Follower | None = None
        self._released: tuple[int, ...] | None = None
        #: The latest completed checkpoint handed to the upstream (:meth:`_plan`).
        self._completed: int | None = None
        self.user_schema = upstream.schema()
        self.channels = upstream.channel_count()
        settings.admission(self.channels)  # refuses a factor of a channel that is not there
        #: An availableNow run's end positions, fixed at its first planning call.
        self._target: list[int] | None = None
        self._available_now = False
        #: The checkpoints this run started (an availableNow run waits for its last),
        #: its planning calls, and the coordinator's heartbeat when it started.
        self._started: set[int] = set()
        self._plans = 0
        self._heartbeat_at_start: tuple[int, int] | None = None
        self._report: dict[str, Any] | None = None
        self._planner = Planner()
        #: The restore manifest this run wrote, until one of its batches committed.
        self._uncommitted_manifest: str | None = None
        self._manifest_checked = False
        self._watchdog = CoordinatorWatchdog(
            layout.root,
            settings.conf.coordinator_timeout_ms,
            ControlRecord.read(layout).heartbeat,
            wall_time.now_ms(),
        )

    # -- driver side ---------------------------------------------------------------------

    def _own(self) -> None:
        """Start the run on the snapshot path, once, in the worker that plans batches.

        Takes the path's next epoch (refused with SnapshotPathInUseError, before anything
        is written, while another run owns it; restoreFrom takes it over), then starts the
        run: the upstream's manifest, the resolved configuration. A second instance of
        this source in the same query run (a self-join) instead mirrors the first
        (:mod:`barriered.datasource.mirror`).
        """
        if self._lease is not None or self._follower is not None:
            return
        layout, conf = self.layout, self.settings.conf
        identity = mirror.RunIdentity.current(self.source_id)
        live = ownership.current_owner(layout)
        if live is not None and live.alive(wall_time.now_ms(), conf.lease_timeout_ms):
            self._follower = mirror.Follower.join(layout, live.epoch, identity)
            if self._follower is not None:
                self.epoch = live.epoch
                return
        try:
            owner = ownership.acquire(layout, conf.lease_timeout_ms, self.settings.restore_from)
        except SnapshotPathInUseError as in_use:
            why = None if live is None else mirror.separately_loaded(layout, live.epoch, identity)
            if why is not None:
                raise MirrorError(why) from in_use
            raise
        self.epoch = owner.epoch
        self._lease = ownership.Lease(layout, owner.epoch, ownership.SOURCE, conf.lease_timeout_ms)
        if self._start_run is not None:
            self.upstream = self._start_run(self.upstream)
        self._heartbeat_at_start = ControlRecord.read(layout).heartbeat
        operators.remove_stale_manifests(layout, owner.epoch)
        self._leader = mirror.Leader(layout, owner.epoch, identity)

    def initialOffset(self) -> dict[str, Any]:
        self._own()
        if self._follower is not None:
            return self._follower.initial()
        offset = self._initial_offset()
        assert self._leader is not None
        self._leader.decided_initial(offset)
        return offset

    def _initial_offset(self) -> dict[str, Any]:
        point = self.restore
        if point is None:
            return SourceOffset(positions=tuple(self.upstream.start_positions())).to_dict()
        start = point.start_positions
        # The restored checkpoint is a cut of this path only when restored on its own
        # path: restored into a new one (a savepoint, another path), the path holds no
        # checkpoint yet, so an availableNow run with nothing new to read still takes its
        # final one instead of ending with an empty snapshot path (issue 36).
        own_cut = not point.inflight and point.origin.root == self.layout.root
        return (
            SourceOffset(
                positions=start,
                last_id=max(point.checkpoint_id, highest_checkpoint_id(self.layout)),
                last_cut=start if own_cut else None,
                restore=self._restore_entry(point),
                replay=replay.of(point),
            )
            .grown(self.upstream.start_positions())  # channels that joined after the cut
            .to_dict()
        )

    def _restore_entry(self, point: RestorePoint) -> dict[str, Any]:
        """What every offset of a restored query says it was restored from; with Spark
        operators' stores in the checkpoint, also the manifest the JVM provider loads and
        the cut batch's watermark, at which the provider's session extension starts the
        restored query's stateful operators."""
        entry: dict[str, Any] = {"from": point.origin.root, "checkpoint_id": point.checkpoint_id}
        manifest = operators.write_restore_manifest(
            point.origin, point.checkpoint_id, point.metadata, self.layout, self.epoch
        )
        if manifest is not None:
            entry["operators_manifest"] = manifest
            entry["watermark_ms"] = operators.cut_watermark_ms(point.metadata)
            self._uncommitted_manifest = manifest
        return entry

    def _manifest_for(self, begin: SourceOffset) -> None:
        """Write the restore manifest a batch's start offset names if it is missing: the
        restored query is restarted after a first run that removed it (see :meth:`stop`)."""
        restored = begin.restore or {}
        path = restored.get("operators_manifest")
        point = self.restore
        if path is None or point is None or self._manifest_checked:
            return
        self._manifest_checked = True  # once per run: the first batch it plans
        if exists(str(path)):
            return
        if int(restored["checkpoint_id"]) != point.checkpoint_id:
            return  # the JVM provider names the missing file
        log.info("restore manifest %s written again for checkpoint %d", path, point.checkpoint_id)
        operators.write_restore_manifest(
            point.origin, point.checkpoint_id, point.metadata, self.layout, None, str(path)
        )
        self._uncommitted_manifest = str(path)

    def getDefaultReadLimit(self) -> ReadLimit:
        per_channel = self.settings.max_rows_per_channel
        if per_channel is None:
            return ReadAllAvailable()
        return ReadMaxRows(per_channel * self.channels)

    def prepareForTriggerAvailableNow(self) -> None:
        # The end positions are fixed at the run's first planning call, once the run
        # owns the snapshot path (every refusal passed): listing the upstream here would
        # record new files in a manifest before then, in the restore point's own when a
        # savepoint is restored (issue 36).
        self.upstream.check_available_now()
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if self._lease is None and self._follower is None:  # this run's first planning call
            self._check_resumed_restore(SourceOffset.from_dict(start))
        self._own()
        if self._follower is not None:
            mirrored = self._follower.latest(start)
            self._report = {
                "barriered": {
                    "snapshotPath": self.layout.root,
                    "epoch": self.epoch,
                    "source": self.source_id,
                    "mirror": True,
                    "delivered": list(SourceOffset.from_dict(mirrored).positions),
                }
            }
            return mirrored
        offset = self._plan(start, limit)
        assert self._leader is not None
        self._leader.decided(start, offset)
        return offset

    def _check_resumed_restore(self, begin: SourceOffset) -> None:
        """Refuse ``restoreFrom`` when Spark resumes the query from offsets of its own
        checkpoint location that do not start from this restore point: Spark would resume
        there and ``restoreFrom`` would be ignored. (A restored query restarted on its
        checkpoint location resumes: its offsets carry the same restore point.) Runs
        before the run takes the snapshot path, so nothing is written.

        Raises
        ------
        RestoreError
            Naming the restore point, what the offsets continue and what to do.
        """
        point = self.restore
        if point is None:
            return
        entry = begin.restore or {}
        same = (
            entry.get("from") == point.origin.root
            and entry.get("checkpoint_id") is not None
            and int(entry["checkpoint_id"]) == point.checkpoint_id
        )
        if same:
            return
        resumed = (
            f"a run restored from checkpoint {entry.get('checkpoint_id')} of {entry.get('from')!r}"
            if entry
            else "a run that was not restored"
        )
        raise RestoreError(
            f"option {RESTORE_FROM.name!r}={self.settings.restore_from!r} names "
            f"{point.describe()}, "
            "but the query's checkpointLocation already holds offsets (of "
            f"{resumed}, delivered up to {list(begin.positions)}): Spark resumes a query "
            "from its checkpointLocation and would ignore restoreFrom. Nothing was written. "
            "To restore, start the query with a new, empty checkpointLocation; to resume "
            "where the query stopped, remove restoreFrom"
        )

    def _plan(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The leader's planning of the next batch from ``start``."""
        begin = SourceOffset.from_dict(start)
        assert self._lease is not None
        self._lease.renew()  # fails a fenced run (a newer run took the path over)
        self.upstream.discover()
        listed = self.upstream.available()
        if self._available_now and self._target is None:
            self._target = list(listed)
            log.info("availableNow run: ends at positions %s", self._target)
        begin, available = self._grow(begin, listed)
        if self._target is not None and len(self._target) < len(available):
            # an availableNow run reads a channel that joined up to where it was then
            self._target = [*self._target, *available[len(self._target) :]]
        if isinstance(limit, ReadAllAvailable):
            admission: list[int | None] = [None] * self.channels
        else:
            admission = self.settings.admission(self.channels)
        control = ControlRecord.read(self.layout)
        control.raise_fatal(self.epoch)
        self._watchdog.check(control.heartbeat, wall_time.now_ms())
        if control.last_completed != self._completed and control.completed_positions:
            # planned at every trigger, idle or not: the upstream hears of it at once
            self.upstream.completed(control.completed_positions)
            self._completed = control.last_completed
        if begin.active is not None:
            crash_points.hit(self.layout, crash_points.ALIGNING, begin.active.checkpoint_id)
        if (
            self._target is not None
            and not self._started
            and begin.last_cut is not None
            and begin.last_cut != control.completed_positions
        ):
            # A resumed availableNow run whose latest cut did not complete (the run that
            # took it failed): its final checkpoint is taken again, not skipped.
            begin = replace(begin, last_cut=None)
        conf = self.settings.conf
        inp = PlanInput(
            available=available,
            admission=admission,
            target=self._target,
            requests=control.requests,
            cancelled=control.cancelled,
            last_completed=control.last_completed,
            now_ms=wall_time.now_ms(),
            buffer_per_channel=conf.buffer_per_channel,
            aligned_timeout_ms=conf.aligned_checkpoint_timeout_ms,
            schedule=control.schedule_of(self.epoch),
        )
        end = self._planner.plan(begin, inp)
        if self._planner.awaits_final_id:  # the coordinator's allocator names it
            schedule = available_now.await_schedule(
                self.layout, self.epoch, begin.last_id, conf.coordinator_timeout_ms
            )
            end = self._planner.plan(begin, replace(inp, schedule=schedule))
        self._started.update(s.checkpoint_id for s in end.started)
        self._plans += 1
        if end is begin and self._target is not None and begin.active is None:
            self._await_coordinator(begin)
        self._report = {
            "barriered": {
                "snapshotPath": self.layout.root,
                "epoch": self.epoch,
                "source": self.source_id,
                "available": list(available),
                "delivered": list(end.positions),
                "active": None if end.active is None else end.active.checkpoint_id,
            }
        }
        if end is begin:
            return start
        offset = end.to_dict()
        if end.cut is not None:
            # For the JVM state store provider, which reads the cut from Spark's offset log.
            offset["cut"].update(
                snapshot_path=self.layout.root,
                epoch=self.epoch,
                max_parallelism=conf.max_parallelism,
                change_detection=conf.provider_change_detection,
            )
        return offset

    def _await_coordinator(self, begin: SourceOffset) -> None:
        """The end of an availableNow run (nothing more to plan): wait until the last
        checkpoint it started is finished (:func:`available_now.await_checkpoint`); a run
        that started none waits, from its second planning call on (Spark reports a
        trigger's progress after its planning call), until the coordinator saw it
        (:func:`available_now.await_first_progress`)."""
        if not all(p >= t for p, t in zip(begin.positions, self._target or (), strict=False)):
            return
        conf = self.settings.conf
        if self._started:
            available_now.await_checkpoint(
                self.layout, self.epoch, max(self._started), conf.checkpoint_timeout_ms
            )
        elif self._plans > 1:
            available_now.await_first_progress(
                self.layout, self.epoch, self._heartbeat_at_start, conf.coordinator_timeout_ms
            )

    def _grow(self, begin: SourceOffset, available: list[int]) -> tuple[SourceOffset, list[int]]:
        """Add the channels an upstream that grows gained (new Kafka partitions) to the
        batch's start, from their start positions; while a checkpoint aligns they wait,
        so that every checkpoint has one set of channels from its trigger to its cut."""
        known = len(begin.positions)
        if len(available) <= known:
            return begin, available
        if begin.active is not None:
            return begin, available[:known]
        grown = begin.grown(self.upstream.start_positions())
        self.channels = len(grown.positions)
        log.info("channels %d..%d join the stream", known, self.channels - 1)
        return grown, available[: self.channels]

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._report

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, stop = SourceOffset.from_dict(start), SourceOffset.from_dict(end)
        if self._lease is None and self._follower is None:  # a batch Spark runs again
            self._check_resumed_restore(begin)
        if len(begin.positions) < len(stop.positions):  # channels joined in this batch
            begin = begin.grown(self.upstream.start_positions())
        self._manifest_for(begin)
        parts: list[InputPartition] = []
        step = self.settings.rows_per_partition
        replayed = {c: (a, b) for c, a, b in begin.replay.ranges} if begin.replay else {}
        for c in range(len(stop.positions)):
            lo, hi = begin.positions[c], stop.positions[c]
            if c in replayed and lo < replayed[c][1]:
                assert begin.replay is not None
                stop_replay = min(hi, replayed[c][1])
                parts.append(replay.ReplayPartition(c, lo, stop_replay, begin.replay.files_of(c)))
                lo = stop_replay
            for a in range(lo, hi, step):
                parts.append(RangePartition(c, a, min(a + step, hi)))
        cut = stop.cut
        if cut is not None:
            # A mirroring instance emits its marker rows (its side's operators see the
            # cut) but captures nothing: the leader alone has effects.
            meta = {
                "kind": cut.kind,
                "mode": cut.mode.value,
                "base": cut.base,
                "path": self.layout.root,
                "epoch": self.epoch,
            }
            markers = MarkerPartition(
                cut.checkpoint_id, self.settings.conf.max_parallelism, tuple(meta.items())
            )
            if parts:
                parts[0] = WithMarkers(parts[0], markers)
            else:
                parts.append(markers)
            for channel, a, b in () if self._follower is not None else cut.inflight:
                parts.append(
                    InflightPartition(
                        cut.checkpoint_id,
                        channel,
                        a,
                        b,
                        self.settings.conf.inflight_capture,
                        self.epoch,
                    )
                )
        return parts

    def commit(self, end: dict[str, Any]) -> None:
        """Release upstream data no retained checkpoint needs (``archiveTo``)."""
        self._watchdog.batch_committed()
        self._uncommitted_manifest = None
        if self._follower is not None:
            return
        release = ControlRecord.read(self.layout).release
        if release is None or release == self._released:
            return
        if self.epoch is not None:
            ownership.check(self.layout, self.epoch, f"releasing upstream data before {release}")
        for channel, before in enumerate(release):
            self.upstream.release(channel, before)
        self._released = release

    def stop(self) -> None:
        """Release the snapshot path: the next run may take it at once.

        A restored run that committed no batch removes the restore manifest it wrote.
        (Spark calls this when the query stops, not when it fails: a manifest of a
        query refused on its first batch is removed by the next run on the path.)
        """
        if self._uncommitted_manifest is not None:
            delete_file(self._uncommitted_manifest)
            log.info("restore manifest %s removed: no batch committed", self._uncommitted_manifest)
            self._uncommitted_manifest = None
        if self._lease is not None:
            self._lease.release()

    # -- executor side -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, WithMarkers):
            yield from self.read(partition.records)
            yield from self.read(partition.markers)
        elif isinstance(partition, RangePartition):
            table = self.upstream.read(partition.channel, partition.start, partition.end)
            positions = self.upstream.positions(table, partition.start)
            yield from data_batch(table, partition.channel, positions).to_batches()
        elif isinstance(partition, replay.ReplayPartition):
            dense = self.upstream.position_column is None
            table, positions = replay.read(partition, self.user_schema, dense)
            yield from data_batch(table, partition.channel, positions).to_batches()
        elif isinstance(partition, MarkerPartition):
            table = marker_batch(
                self.user_schema,
                partition.checkpoint_id,
                partition.key_groups,
                dict(partition.meta),
            )
            yield from table.to_batches()
        elif isinstance(partition, InflightPartition):
            capture(
                self.layout,
                self.upstream,
                partition.checkpoint_id,
                partition.channel,
                partition.start,
                partition.end,
                partition.capture,
                partition.epoch,
            )
