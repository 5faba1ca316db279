"""The control record: everything the coordinator tells the source, in one file.

The coordinator (in the driver process, fed by the query listener) is the record's one
writer: it keeps the record in memory and writes it whole, atomically, at most once per
batch it handles (and when it fails the query or a savepoint is requested), to
``_coordinator/control.json``. The source planner reads it before planning every
micro-batch. It holds

* ``requests``: the checkpoints the coordinator asks the source to start (savepoints;
  :class:`~barriered.control.triggers.TriggerRequest`), each under the id the
  coordinator allocated; the planner starts each id at most once (ids at or below the
  offset's ``last_id`` are stale) and reports what it did in the offset;
* ``cancelled``: the ids the coordinator expired or aborted;
* ``last_completed`` and ``completed_positions``: the latest completed checkpoint (the
  base of incremental snapshots) and its barrier positions per channel;
* ``release``: per channel, the position before which no retained checkpoint needs the
  upstream's records (the source releases them, see ``archiveTo``);
* ``heartbeat``: the last batch the coordinator handled and when, by which the source
  notices a lost coordinator;
* ``schedule``: the next periodic checkpoint (:class:`~barriered.control.schedule.Schedule`);
* ``fatal``: the error the source is to fail the query with (a listener cannot fail a
  query), typed by its class in :mod:`barriered.errors` (:class:`Fatal`);
* ``epoch``: the run whose coordinator wrote it. The schedule and the fatal error are
  that run's only: the planner of another run ignores them.

A snapshot path written by a version before this record keeps the same facts in
``_coordinator/triggers.json`` and ``_coordinator/schedule.json``; while no
``control.json`` exists they are read instead (their fatal message, a previous run's,
is not: the next run starts anew).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from barriered.control.schedule import Schedule
from barriered.control.triggers import TriggerRequest
from barriered.errors import BarrieredError, error_named
from barriered.files.fileio import read_json, write_json

__all__ = ["ControlFiles", "ControlRecord", "Fatal"]

log = logging.getLogger(__name__)

#: The format of ``control.json``.
FORMAT_VERSION = 1

#: How many recent requests/cancellations the record keeps.
_KEEP = 32


class ControlFiles(Protocol):
    """Where the control record lives (a :class:`~barriered.statestore.layout.SnapshotLayout`)."""

    @property
    def control_file(self) -> str: ...

    @property
    def legacy_control_files(self) -> tuple[str, str]: ...


@dataclass(frozen=True)
class Fatal:
    """An error the source fails the query with, on the coordinator's behalf.

    Attributes
    ----------
    error : str
        The name of its class in :mod:`barriered.errors`.
    message : str
        Its message.
    """

    error: str
    message: str

    @classmethod
    def of(cls, error: BarrieredError) -> Fatal:
        """The fatal form of ``error``."""
        return cls(type(error).__name__, str(error))

    def exception(self) -> BarrieredError:
        """The error to raise (:class:`~barriered.errors.BarrieredError` for a class name
        this version does not know)."""
        return error_named(self.error)(self.message)


def _ints(values: Iterable[Any] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(x) for x in values)


@dataclass(frozen=True)
class ControlRecord:
    """The content of ``_coordinator/control.json`` (see the module docstring)."""

    epoch: int | None = None
    requests: tuple[TriggerRequest, ...] = ()
    cancelled: frozenset[int] = field(default_factory=frozenset)
    last_completed: int | None = None
    #: The barrier positions of ``last_completed``, per channel.
    completed_positions: tuple[int, ...] | None = None
    release: tuple[int, ...] | None = None
    heartbeat: tuple[int, int] | None = None
    schedule: Schedule | None = None
    fatal: Fatal | None = None

    # -- the file ----------------------------------------------------------------------

    @classmethod
    def read(cls, files: ControlFiles) -> ControlRecord:
        """Read the record of a snapshot path; nothing written yet is an empty record.

        Raises
        ------
        SnapshotStoreError
            When the file is corrupt.
        """
        raw = read_json(files.control_file, default=None)
        if raw:
            return cls.from_dict(raw)
        triggers_file, schedule_file = files.legacy_control_files
        return cls._legacy(read_json(triggers_file, default=None) or {}, read_json(schedule_file))

    def write(self, uri: str) -> None:
        """Write the record to ``uri`` atomically, keeping only recent entries."""
        write_json(uri, self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        requests = sorted(self.requests, key=lambda r: r.checkpoint_id)[-_KEEP:]
        return {
            "v": FORMAT_VERSION,
            "epoch": self.epoch,
            "requests": [r.to_dict() for r in requests],
            "cancelled": sorted(self.cancelled)[-_KEEP:],
            "last_completed": self.last_completed,
            "completed_positions": _list(self.completed_positions),
            "release": _list(self.release),
            "heartbeat": _list(self.heartbeat),
            "schedule": None if self.schedule is None else self.schedule.to_dict(),
            "fatal": None if self.fatal is None else vars(self.fatal),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ControlRecord:
        """Parse the JSON form."""
        fatal, schedule = d.get("fatal"), d.get("schedule")
        return cls(
            epoch=None if d.get("epoch") is None else int(d["epoch"]),
            schedule=None if schedule is None else Schedule.from_dict(schedule),
            fatal=None if fatal is None else Fatal(str(fatal["error"]), str(fatal["message"])),
            **cls._carried(d),
        )

    @staticmethod
    def _carried(d: dict[str, Any]) -> dict[str, Any]:
        """The fields the record shares with the previous version's ``triggers.json``."""
        heartbeat = _ints(d.get("heartbeat"))
        return {
            "requests": tuple(TriggerRequest.from_dict(r) for r in d.get("requests", [])),
            "cancelled": frozenset(int(x) for x in d.get("cancelled", [])),
            "last_completed": d.get("last_completed"),
            "completed_positions": _ints(d.get("completed_positions")),
            "release": _ints(d.get("release")),
            "heartbeat": None if heartbeat is None else (heartbeat[0], heartbeat[1]),
        }

    @classmethod
    def _legacy(cls, triggers: dict[str, Any], schedule: dict[str, Any] | None) -> ControlRecord:
        """The record of a path the previous version wrote: its trigger log and its
        schedule (whose run is the record's epoch)."""
        epoch = None if not schedule or schedule.get("epoch") is None else int(schedule["epoch"])
        return cls(
            epoch=epoch,
            schedule=None if not schedule else Schedule.from_dict(schedule),
            **cls._carried(triggers),
        )

    # -- what the source reads ---------------------------------------------------------

    def schedule_of(self, epoch: int | None) -> Schedule | None:
        """The schedule if run ``epoch``'s coordinator published it, else None (a stale
        schedule of another run, which the planner must not act on)."""
        if self.schedule is None or self.epoch == epoch:
            return self.schedule
        log.debug("schedule of epoch %s, this run is epoch %s: ignored", self.epoch, epoch)
        return None

    def raise_fatal(self, epoch: int | None) -> None:
        """Fail the query with the coordinator's fatal error for run ``epoch``, if any.

        Raises
        ------
        BarrieredError
            Of the class the coordinator named.
        """
        if self.fatal is not None and self.epoch == epoch:
            raise self.fatal.exception()

    def ids(self) -> set[int]:
        """Every checkpoint id the record names: requested, cancelled, scheduled."""
        ids = {r.checkpoint_id for r in self.requests} | set(self.cancelled)
        if self.schedule is not None:
            ids.add(self.schedule.checkpoint_id)
        return ids

    # -- what the coordinator changes --------------------------------------------------

    def for_run(self, epoch: int | None) -> ControlRecord:
        """The record a new run's coordinator continues: this one's checkpoints, without
        the previous run's schedule and fatal error."""
        if epoch == self.epoch:
            return self
        return replace(self, epoch=epoch, schedule=None, fatal=None)

    def with_requests(self, requests: Sequence[TriggerRequest]) -> ControlRecord:
        """Return the record with ``requests`` added."""
        return replace(self, requests=(*self.requests, *requests))

    def with_cancelled(self, ids: Iterable[int]) -> ControlRecord:
        """Return the record with ``ids`` marked cancelled."""
        return replace(self, cancelled=self.cancelled | set(ids))

    def with_completed(
        self,
        checkpoint_id: int,
        release: Sequence[int] | None = None,
        positions: Sequence[int] | None = None,
    ) -> ControlRecord:
        """Return the record with ``checkpoint_id`` as the latest completed checkpoint,
        with its barrier ``positions``, and, if given, the positions before which the
        upstream may be released."""
        last = self.last_completed
        newest = last is None or checkpoint_id >= last
        return replace(
            self,
            last_completed=checkpoint_id if newest else last,
            release=self.release if release is None else tuple(release),
            completed_positions=(
                tuple(positions) if newest and positions is not None else self.completed_positions
            ),
        )

    def with_heartbeat(self, batch_id: int, now_ms: int) -> ControlRecord:
        """Return the record with the coordinator's sign of life: it handled ``batch_id``."""
        return replace(self, heartbeat=(batch_id, now_ms))

    def with_schedule(self, schedule: Schedule | None) -> ControlRecord:
        """Return the record with ``schedule`` as the next periodic checkpoint."""
        return replace(self, schedule=schedule)

    def with_fatal(self, error: BarrieredError) -> ControlRecord:
        """Return the record with ``error`` as the fatal error the source fails with."""
        return replace(self, fatal=Fatal.of(error))


def _list(values: tuple[int, ...] | None) -> list[int] | None:
    return None if values is None else list(values)
