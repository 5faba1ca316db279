"""A checkpoint that was triggered and is not finished yet (Flink's ``PendingCheckpoint``).

It records what the source and the participants reported and decides when it is fully
acknowledged: the expected participants are captured at the trigger and may be extended
until the cut (in-flight writers are only known then); the cut **seals** the set. A
checkpoint is fully acknowledged once it is sealed and every expected participant acked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from barriered.barrier.modes import Mode
from barriered.control.model import (
    AckResult,
    AckStats,
    CheckpointKind,
    CheckpointStatus,
    CompletedCheckpoint,
)
from barriered.control.stats import CheckpointStats
from barriered.errors import CheckpointError

__all__ = ["PendingCheckpoint"]

logger = logging.getLogger(__name__)


class PendingCheckpoint:
    """Bookkeeping of one triggered, unfinished checkpoint.

    Parameters
    ----------
    checkpoint_id : int
    kind : {"checkpoint", "savepoint"}
    mode : Mode
    mode_reason : str
    trigger_ms : int
        Trigger time on the coordinator clock.
    expected : iterable of str
        Participants that must acknowledge (captured at the trigger).
    savepoint_target : str or None, default None
    trigger_batch_id : int or None, default None
    """

    def __init__(
        self,
        checkpoint_id: int,
        kind: CheckpointKind,
        mode: Mode,
        mode_reason: str,
        trigger_ms: int,
        expected: Iterable[str],
        *,
        savepoint_target: str | None = None,
        trigger_batch_id: int | None = None,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.kind: CheckpointKind = kind
        self.mode: Mode = mode
        self.mode_reason = mode_reason
        self.trigger_ms = trigger_ms
        self.savepoint_target = savepoint_target
        self.trigger_batch_id = trigger_batch_id
        self.expected: set[str] = set(expected)
        self.acks: dict[str, AckStats] = {}
        self.positions: dict[int, int] = {}
        self.positions_ms: int | None = None
        self.alignment_started_ms: int | None = None
        self.cut_ms: int | None = None
        self.cut_batch_id: int | None = None
        self.effective_mode: Mode | None = None
        self._state_bytes = 0
        self._state_rows = 0
        self._inflight_rows = 0
        self._inflight_bytes = 0
        self._write_ms = 0

    @property
    def sealed(self) -> bool:
        """Whether the cut was reported (the expected set can no longer grow)."""
        return self.cut_ms is not None

    @property
    def fully_acknowledged(self) -> bool:
        """Whether the cut is known and every expected participant acknowledged."""
        return self.sealed and len(self.acks) == len(self.expected)

    def age_ms(self, now_ms: int) -> int:
        """Time since the trigger."""
        return now_ms - self.trigger_ms

    def waiting_for(self) -> str:
        """What the checkpoint still waits for, in words: its cut, or the participants
        that have not acknowledged (grouped: a keyed operator's key groups, a store's
        partitions, in-flight writers by channel, sinks)."""
        if not self.sealed:
            return "its cut (the barriers of its channels were still aligning)"
        missing = sorted(self.expected - set(self.acks))
        return (
            f"{len(self.acks)}/{len(self.expected)} acknowledgements, missing "
            f"{describe_participants(missing)}"
        )

    def set_positions(self, positions: Mapping[int, int], at_ms: int) -> None:
        """Record the barrier positions ``B_n(c)`` (the end of the start delay)."""
        self.positions = {int(c): int(p) for c, p in positions.items()}
        if self.positions_ms is None:
            self.positions_ms = at_ms

    def alignment_started(self, at_ms: int) -> None:
        """Record when the first barrier was delivered (only the first call counts)."""
        if self.alignment_started_ms is None:
            self.alignment_started_ms = at_ms

    def expect(self, participants: Iterable[str]) -> None:
        """Add participants that must acknowledge.

        Raises
        ------
        barriered.errors.CheckpointError
            If the cut was already reported.
        """
        new = set(participants) - self.expected
        if not new:
            return
        if self.sealed:
            raise CheckpointError(
                f"checkpoint {self.checkpoint_id}: cannot expect {sorted(new)} after the cut "
                f"(batch {self.cut_batch_id}); report in-flight writers before on_cut"
            )
        self.expected |= new

    def cut(self, at_ms: int, batch_id: int | None, effective_mode: Mode | None) -> None:
        """Record the cut and seal the expected participants."""
        if self.cut_ms is None:
            self.cut_ms = at_ms
            self.cut_batch_id = batch_id
        if effective_mode is not None:
            self.effective_mode = effective_mode

    def acknowledge(self, participant: str, stats: AckStats) -> AckResult:
        """Count an acknowledgement; see :data:`~barriered.control.model.AckResult`."""
        if participant not in self.expected:
            return "unknown"
        if participant in self.acks:
            return "duplicate"
        self.acks[participant] = stats
        self._state_bytes += stats.state_bytes
        self._state_rows += stats.state_rows
        self._inflight_rows += stats.inflight_rows
        self._inflight_bytes += stats.inflight_bytes
        self._write_ms = max(self._write_ms, stats.write_ms)
        return "success"

    def to_stats(
        self,
        status: CheckpointStatus = "pending",
        *,
        failure_reason: str | None = None,
        end_ms: int | None = None,
        state_table_version: int | None = None,
    ) -> CheckpointStats:
        """Snapshot the statistics, with the given final status when finished."""
        return CheckpointStats(
            checkpoint_id=self.checkpoint_id,
            kind=self.kind,
            mode=self.mode,
            mode_reason=self.mode_reason,
            status=status,
            trigger_timestamp_ms=self.trigger_ms,
            failure_reason=failure_reason,
            end_timestamp_ms=end_ms,
            start_delay_ms=_duration(self.trigger_ms, self.positions_ms),
            alignment_duration_ms=_duration(self.alignment_started_ms, self.cut_ms),
            end_to_end_duration_ms=_duration(self.trigger_ms, end_ms),
            state_bytes=self._state_bytes,
            state_rows=self._state_rows,
            inflight_rows=self._inflight_rows,
            inflight_bytes=self._inflight_bytes,
            state_write_ms=self._write_ms,
            num_acknowledged=len(self.acks),
            num_expected=len(self.expected),
            trigger_batch_id=self.trigger_batch_id,
            cut_batch_id=self.cut_batch_id,
            barrier_positions=dict(self.positions),
            savepoint_target=self.savepoint_target,
            effective_mode=self.effective_mode,
            state_table_version=state_table_version,
        )

    def to_completed(self, completion_ms: int) -> CompletedCheckpoint:
        """Build the completed checkpoint handed to the committer."""
        acks = {p: self.acks[p] for p in sorted(self.acks)}
        return CompletedCheckpoint(
            checkpoint_id=self.checkpoint_id,
            kind=self.kind,
            mode=self.mode,
            effective_mode=self.effective_mode,
            savepoint_target=self.savepoint_target,
            positions=dict(self.positions),
            acks=acks,
            trigger_timestamp_ms=self.trigger_ms,
            completion_timestamp_ms=completion_ms,
            trigger_batch_id=self.trigger_batch_id,
            cut_batch_id=self.cut_batch_id,
            files=tuple(f for a in acks.values() for f in a.files),
        )


def describe_participants(names: Iterable[str]) -> str:
    """Participants in words: ``keyed operator 'totals' key groups 0-3, 6``, ``store
    '0-default' partitions 0-1``, ``in-flight writer of channel(s) 2``, ``sink 'out'``."""
    groups: dict[tuple[str, str], list[int]] = {}
    other: list[str] = []
    for name in names:
        kind, _, rest = name.partition("/")
        owner, _, number = rest.rpartition("/")
        if kind in ("state", "operator") and owner and number.isdigit():
            groups.setdefault((kind, owner), []).append(int(number))
        elif kind == "inflight" and rest.isdigit():
            groups.setdefault((kind, ""), []).append(int(rest))
        elif kind == "sink" and rest:
            other.append(f"sink {rest!r}")
        else:
            other.append(repr(name))
    parts = []
    for (kind, owner), numbers in sorted(groups.items()):
        listed = _ranges(sorted(numbers))
        if kind == "state":
            parts.append(f"keyed operator {owner!r} key group(s) {listed}")
        elif kind == "operator":
            parts.append(f"store {owner!r} partition(s) {listed}")
        else:
            parts.append(f"the in-flight writer of channel(s) {listed}")
    return "; ".join([*parts, *other]) or "nothing"


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` (sorted) as ``0-2, 5``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _duration(start: int | None, end: int | None) -> int | None:
    if start is None or end is None:
        return None
    if end < start:
        logger.debug("negative duration %d -> %d ms clamped to 0", start, end)
        return 0
    return end - start
