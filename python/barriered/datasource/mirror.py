"""One barriered source read more than once in one query: the first instance plans, the
others mirror it.

A stream-stream join (or any query that uses one loaded barriered stream on two sides)
makes Spark run one instance of the source per side, each with its own Python reader
process, all on one snapshot path. One consistent cut needs one plan, so:

* The *leader* is the instance that takes the snapshot path's epoch (Spark asks its
  sources for offsets in a fixed order every trigger, so the same one each time). It
  writes every planning decision (start offset, end offset) to
  ``_coordinator/mirror/<epoch>-plan.json`` and alone has effects: the run's start, the
  lease, in-flight capture, the release of upstream data.
* A *follower* is a later instance of the same query run. It recognises the live owner
  as its sibling by the :class:`RunIdentity` in the plan file, registers
  (``<epoch>-follower-<pid>.json``) and answers every offset request with the leader's
  decision for the same start offset. A request the leader did not plan fails with
  :class:`~barriered.errors.MirrorError`: the instances never diverge silently.

Siblings are recognised only during the leader's first trigger: Spark asks every source
of a query in the same trigger, one after the other, so a genuine sibling registers before
the leader plans its second batch. There the leader *seals* the group (and stops writing
decisions when nobody follows); an instance that comes later is another query and is
refused as today (:class:`~barriered.errors.SnapshotPathInUseError`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from barriered.errors import MirrorError
from barriered.files.fileio import join, list_names, read_json, write_json
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)

PLAN = "plan"
FOLLOWER = "follower-"


def new_source_id() -> str:
    """A fresh id for one loaded source (kept in the pickled data source, so every
    instance Spark makes of that one ``load()`` carries the same id)."""
    return uuid.uuid4().hex


def _process_start(pid: int) -> str:
    """A process's start time from ``/proc`` (clock ticks since boot), or "" elsewhere:
    with the pid it names one process even after pids are reused."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


@dataclass(frozen=True)
class RunIdentity:
    """What two reader processes of one query run share and another query does not: the
    loaded source (its id) and the driver JVM that started both (the readers' parent
    process, on this host)."""

    source: str
    host: str
    jvm: str

    @classmethod
    def current(cls, source_id: str) -> RunIdentity:
        """This reader process's identity for the source loaded as ``source_id``."""
        parent = os.getppid()
        return cls(source_id, socket.gethostname(), f"{parent}:{_process_start(parent)}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunIdentity:
        return cls(str(d["source"]), str(d["host"]), str(d["jvm"]))


def _canonical(offset: dict[str, Any] | None) -> str:
    return json.dumps(offset, sort_keys=True)


class Leader:
    """The planning instance: publishes its decisions for its followers."""

    def __init__(self, layout: SnapshotLayout, epoch: int, identity: RunIdentity) -> None:
        self.layout = layout
        self.epoch = epoch
        self.identity = identity
        self.initial: dict[str, Any] | None = None
        self.planned = 0
        self.sealed = False
        self.followers: list[str] = []
        self._write(None, None)

    def _write(self, start: dict[str, Any] | None, end: dict[str, Any] | None) -> None:
        write_json(
            self.layout.mirror_file(self.epoch, PLAN),
            {
                "identity": asdict(self.identity),
                "planned": self.planned,
                "sealed": self.sealed,
                "followers": self.followers,
                "initial": self.initial,
                "start": start,
                "end": end,
            },
        )

    def decided_initial(self, offset: dict[str, Any]) -> None:
        """Publish the initial offset (a follower starts from the same one)."""
        self.initial = offset
        self._write(None, None)

    def decided(self, start: dict[str, Any], end: dict[str, Any]) -> None:
        """Publish one planning decision. At the second one the group is sealed; from then
        on nothing is written when no instance follows."""
        self.planned += 1
        sealing = self.planned == 2
        if sealing:
            folder = join(self.layout.root, "_coordinator", "mirror")
            prefix = f"{self.epoch}-{FOLLOWER}"
            self.followers = sorted(
                n.removesuffix(".json") for n in list_names(folder) if n.startswith(prefix)
            )
            self.sealed = True
            log.info(
                "barriered source of epoch %d on %s is read by %d mirroring instance(s)",
                self.epoch,
                self.layout.root,
                len(self.followers),
            )
        if self.sealed and not self.followers and not sealing:
            return
        self._write(start, end)


def _unsealed_leader(
    layout: SnapshotLayout, epoch: int, identity: RunIdentity
) -> RunIdentity | None:
    """The leader of ``epoch`` when it runs in this driver and is in its first trigger."""
    plan = read_json(layout.mirror_file(epoch, PLAN), default=None)
    if plan is None or plan.get("sealed"):
        return None
    leader = RunIdentity.from_dict(plan["identity"])
    return leader if (leader.host, leader.jvm) == (identity.host, identity.jvm) else None


def separately_loaded(layout: SnapshotLayout, epoch: int, identity: RunIdentity) -> str | None:
    """Why a source that found the path in use is refused, when the run of ``epoch`` is
    most likely another barriered source of the same query, loaded separately (same
    driver, still in its first trigger, another source id); None otherwise.

    It is not a sibling to follow: a new query in this driver after a failed one (whose
    source Spark did not stop) looks the same, and a restore must take the path over.
    """
    leader = _unsealed_leader(layout, epoch, identity)
    if leader is None or leader.source == identity.source:
        return None
    return (
        f"this query reads snapshot path {layout.root!r} through two barriered "
        f"sources loaded separately (source ids {leader.source} and "
        f"{identity.source}, epoch {epoch}): they would plan their own batches and "
        "cut at different positions. Load the barriered stream once "
        "(events = spark.readStream.format('barriered')...load()) and use that one "
        "DataFrame on every side (filter it per side). The query stops before its "
        "first batch"
    )


class Follower:
    """A mirroring instance: answers offset requests with the leader's decisions."""

    def __init__(self, layout: SnapshotLayout, epoch: int) -> None:
        self.layout = layout
        self.epoch = epoch

    @classmethod
    def join(cls, layout: SnapshotLayout, epoch: int, identity: RunIdentity) -> Follower | None:
        """Follow the live run of ``epoch`` if it is this instance's sibling.

        Returns
        -------
        Follower or None
            None when the run of ``epoch`` is not a sibling (another query, another
            loaded source, or a group that is sealed): the caller takes the path as any
            run would (a restore takes it over; otherwise it is in use, see
            :func:`separately_loaded`).
        """
        leader = _unsealed_leader(layout, epoch, identity)
        if leader is None or leader.source != identity.source:
            return None
        write_json(
            layout.mirror_file(epoch, f"{FOLLOWER}{os.getpid()}"), {"identity": asdict(identity)}
        )
        log.info("barriered source instance mirrors epoch %d on %s", epoch, layout.root)
        return cls(layout, epoch)

    def _plan(self) -> dict[str, Any]:
        plan = read_json(self.layout.mirror_file(self.epoch, PLAN), default=None)
        if plan is None:
            raise MirrorError(
                f"the leading instance of epoch {self.epoch} on {self.layout.root!r} left no "
                "plan: restart the query"
            )
        return dict(plan)

    def initial(self) -> dict[str, Any]:
        """The leader's initial offset."""
        initial = self._plan().get("initial")
        if initial is None:
            raise MirrorError(
                f"a mirroring instance of the barriered source on {self.layout.root!r} "
                f"(epoch {self.epoch}) was asked for its initial offset before the leading "
                "instance chose one; Spark asked the query's sources out of order. Restart "
                "the query; if it recurs, read the barriered stream once per query"
            )
        return dict(initial)

    def latest(self, start: dict[str, Any]) -> dict[str, Any]:
        """The leader's end offset for ``start``.

        Raises
        ------
        MirrorError
            When the leader's latest decision starts elsewhere: the instances would read
            different batches.
        """
        plan = self._plan()
        if plan.get("end") is None or _canonical(plan.get("start")) != _canonical(start):
            raise MirrorError(
                f"a mirroring instance of the barriered source on {self.layout.root!r} "
                f"(epoch {self.epoch}) was asked to plan from {_canonical(start)}, but the "
                f"leading instance's latest decision (#{plan.get('planned')}) starts at "
                f"{_canonical(plan.get('start'))}: the two would read different batches "
                "and cut at different positions. The query stops here; restart it (it "
                "resumes from its last committed batch)"
            )
        return dict(plan["end"])
