"""The source offset: the planner's whole state, written by Spark to its offset log.

Spark persists every end offset before it runs the batch, so the offset doubles as the
*barrier log*: it holds the delivered position of every channel, the checkpoint being
aligned (its barrier positions ``B_n(c)`` and which channels already delivered their
barrier), and the events of the batch it ends (barrier positions fixed, cut, abort).
The planner rebuilds everything it needs from the start offset alone, so a restarted
driver plans exactly as before. The format is documented in datasource/README.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from barriered.barrier import AbortReason, Mode

FORMAT_VERSION = 1


@dataclass(frozen=True)
class _Identified:
    """What every checkpoint entry of the offset starts with: its id (JSON key ``id``),
    kind, mode and barrier positions (one per channel)."""

    checkpoint_id: int
    kind: str
    mode: Mode
    barrier: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode(self.mode))  # a mode name is accepted too

    def _head(self) -> dict[str, Any]:
        return {
            "id": self.checkpoint_id,
            "kind": self.kind,
            "mode": self.mode.value,
            "barrier": list(self.barrier),
        }

    @staticmethod
    def _parse_head(d: dict[str, Any]) -> dict[str, Any]:
        return {
            "checkpoint_id": int(d["id"]),
            "kind": str(d["kind"]),
            "mode": Mode(d["mode"]),
            "barrier": tuple(int(x) for x in d["barrier"]),
        }


@dataclass(frozen=True)
class StartedCheckpoint(_Identified):
    """A checkpoint whose barrier positions the planner fixed in this batch (``started``).

    The coordinator adopts it from the offset (JSON key ``id`` for ``checkpoint_id``).
    """

    at_ms: int
    requested_ms: int = 0
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            **self._head(),
            "at_ms": self.at_ms,
            "requested_ms": self.requested_ms,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StartedCheckpoint:
        """Parse the JSON form."""
        return cls(
            **cls._parse_head(d),
            at_ms=int(d["at_ms"]),
            requested_ms=int(d.get("requested_ms", 0)),
            reason=str(d.get("reason", "")),
        )


@dataclass(frozen=True)
class AbortedCheckpoint:
    """A checkpoint the planner aborted in this batch (``aborted``; JSON ``id``)."""

    checkpoint_id: int
    reason: AbortReason

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {"id": self.checkpoint_id, "reason": self.reason.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AbortedCheckpoint:
        """Parse the JSON form."""
        return cls(checkpoint_id=int(d["id"]), reason=AbortReason(d["reason"]))


@dataclass(frozen=True)
class ActiveCheckpoint(_Identified):
    """A checkpoint whose barriers are fixed but whose cut has not happened yet.

    With ``arrived`` (the channels whose barrier arrived, in arrival order),
    ``first_barrier_ms`` (the handler's clock at the first of them, from which the
    alignment timeout counts) and ``older`` (older at-least-once checkpoints still
    pending in the handler, R10: their barriers were withdrawn, they end silently when
    this one is taken) it is the state of the source's barrier handler, from which a
    restarted planner rebuilds it. Offsets written before ``first_barrier_ms`` existed
    read it as ``started_ms``; before ``older`` existed, as none.
    """

    arrived: tuple[int, ...]
    started_ms: int
    reason: str = ""
    first_barrier_ms: int | None = None
    older: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            **self._head(),
            "arrived": list(self.arrived),
            "started_ms": self.started_ms,
            "reason": self.reason,
            "first_barrier_ms": self.first_barrier_ms,
            "older": list(self.older),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ActiveCheckpoint:
        """Parse the JSON form."""
        arrived = tuple(int(x) for x in d["arrived"])
        first = d.get("first_barrier_ms", d["started_ms"] if arrived else None)
        return cls(
            **cls._parse_head(d),
            arrived=arrived,
            started_ms=int(d["started_ms"]),
            reason=str(d.get("reason", "")),
            first_barrier_ms=None if first is None else int(first),
            older=tuple(int(x) for x in d.get("older", ())),
        )


@dataclass(frozen=True)
class Cut(_Identified):
    """The checkpoint whose snapshot is taken at the end of this batch (JSON ``id``)."""

    inflight: tuple[tuple[int, int, int], ...]
    base: int | None
    at_ms: int

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            **self._head(),
            "inflight": [list(x) for x in self.inflight],
            "base": self.base,
            "at_ms": self.at_ms,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cut:
        """Parse the JSON form."""
        return cls(
            **cls._parse_head(d),
            inflight=tuple((int(a), int(b), int(c)) for a, b, c in d["inflight"]),
            base=None if d.get("base") is None else int(d["base"]),
            at_ms=int(d["at_ms"]),
        )


@dataclass(frozen=True)
class Replay:
    """In-flight records of a restored checkpoint, replayed before the upstream's.

    Channel ``c``'s records ``[start, end)`` of a range are read from ``files`` (the
    restored checkpoint's ``inflight`` table) instead of the upstream, so a restore
    does not depend on the upstream still holding them.
    """

    table: str
    checkpoint_id: int
    ranges: tuple[tuple[int, int, int], ...]
    files: tuple[tuple[int, str], ...]

    def done(self, positions: tuple[int, ...] | list[int]) -> bool:
        """Return True once every channel delivered past its replayed range."""
        return all(positions[c] >= end for c, _, end in self.ranges)

    def files_of(self, channel: int) -> tuple[str, ...]:
        """The data files holding ``channel``'s replayed records."""
        return tuple(path for c, path in self.files if c == channel)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {
            "table": self.table,
            "checkpoint_id": self.checkpoint_id,
            "ranges": [list(r) for r in self.ranges],
            "files": [list(f) for f in self.files],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Replay:
        """Parse the JSON form."""
        return cls(
            table=str(d["table"]),
            checkpoint_id=int(d["checkpoint_id"]),
            ranges=tuple((int(c), int(a), int(b)) for c, a, b in d["ranges"]),
            files=tuple((int(c), str(p)) for c, p in d["files"]),
        )


@dataclass(frozen=True)
class SourceOffset:
    """The end offset of a micro-batch of the "barriered" source.

    Attributes
    ----------
    positions : tuple[int, ...]
        Delivered position ``D(c)`` of every channel after the batch.
    last_id : int
        Highest checkpoint id the source started or saw aborted.
    last_cut : tuple[int, ...] or None
        Barrier positions of the latest cut, None if it had in-flight records or came in
        a batch with records (Spark's next batch may still evict state and emit). An
        availableNow run ending there needs no final checkpoint.
    active : ActiveCheckpoint or None
        The checkpoint still aligning after this batch.
    cut : Cut or None
        The checkpoint cut at the end of this batch (markers are in this batch).
    started : tuple of StartedCheckpoint
        Checkpoints whose barrier positions were fixed while planning this batch.
    aborted : tuple of AbortedCheckpoint
        Checkpoints aborted while planning this batch.
    restore : dict or None
        In every offset of a restored query: what it was restored from (``from``, the
        snapshot path or savepoint folder, and ``checkpoint_id``); with Spark operators'
        stores, the JVM provider's ``operators_manifest`` and the cut batch's
        ``watermark_ms``.
    replay : Replay or None
        After a restore, until delivered: in-flight records read from the snapshot.
    """

    positions: tuple[int, ...]
    last_id: int = 0
    last_cut: tuple[int, ...] | None = None
    active: ActiveCheckpoint | None = None
    cut: Cut | None = None
    started: tuple[StartedCheckpoint, ...] = field(default_factory=tuple)
    aborted: tuple[AbortedCheckpoint, ...] = field(default_factory=tuple)
    restore: dict[str, Any] | None = None
    replay: Replay | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form that Spark stores in its offset log."""
        return {
            "v": FORMAT_VERSION,
            "positions": list(self.positions),
            "last_id": self.last_id,
            "last_cut": None if self.last_cut is None else list(self.last_cut),
            "active": None if self.active is None else self.active.to_dict(),
            "cut": None if self.cut is None else self.cut.to_dict(),
            "started": [s.to_dict() for s in self.started],
            "aborted": [a.to_dict() for a in self.aborted],
            "restore": self.restore,
            "replay": None if self.replay is None else self.replay.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceOffset:
        """Parse an offset written by :meth:`to_dict`."""
        return cls(
            positions=tuple(int(x) for x in d["positions"]),
            last_id=int(d.get("last_id", 0)),
            last_cut=None if d.get("last_cut") is None else tuple(d["last_cut"]),
            active=None if d.get("active") is None else ActiveCheckpoint.from_dict(d["active"]),
            cut=None if d.get("cut") is None else Cut.from_dict(d["cut"]),
            started=tuple(StartedCheckpoint.from_dict(s) for s in d.get("started", ())),
            aborted=tuple(AbortedCheckpoint.from_dict(a) for a in d.get("aborted", ())),
            restore=d.get("restore"),
            replay=None if d.get("replay") is None else Replay.from_dict(d["replay"]),
        )

    def grown(self, starts: Sequence[int]) -> SourceOffset:
        """Return this offset with the channels ``len(positions)`` and up of ``starts``
        added at their start positions (an upstream that :attr:`grows`): nothing of them
        is delivered, nor in the last cut. Only between checkpoints (none aligning)."""
        tail = tuple(starts[len(self.positions) :])
        if not tail:
            return self
        assert self.active is None, "channels join between checkpoints"
        last_cut = None if self.last_cut is None else (*self.last_cut, *tail)
        return replace(self, positions=(*self.positions, *tail), last_cut=last_cut)

    def carried(self) -> SourceOffset:
        """Return the state carried into the next batch (per-batch events dropped)."""
        return replace(self, cut=None, started=(), aborted=())


#: The start of the message of :func:`two_sources_refusal`.
TWO_SOURCES_PREFIX = "two barriered sources in one query: "


def two_sources_refusal(reports: list[dict[str, Any]]) -> str | None:
    """Why a query whose progress shows these barriered reports cannot be barriered, or
    None. Mirroring instances' reports (``mirror``) are the leader's own source and do not
    count; two planning barriered sources (other snapshot paths, or other options) each
    cut on their own, so no checkpoint holds one consistent cut of the query.

    Parameters
    ----------
    reports : list of dict
        The ``barriered`` part of every source's ``latestOffset`` report of one progress.
    """
    planning = [r for r in reports if not r.get("mirror")]
    if len(planning) < 2:
        return None
    named = " and ".join(
        f"snapshotPath {r.get('snapshotPath')!r} (epoch {r.get('epoch')})" for r in planning
    )
    return (
        f"{TWO_SOURCES_PREFIX}the query reads {named}: each plans its own checkpoints, so no "
        "checkpoint would hold one consistent cut of the query. Read one barriered source "
        "(load it once, with one snapshotPath) and use that DataFrame on every side, "
        "filtering it per side"
    )
