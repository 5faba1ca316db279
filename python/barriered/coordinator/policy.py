"""The aligned-vs-unaligned policy: which mode a new checkpoint is taken in, and why.

Flink leaves the choice to a fixed configuration (unaligned on/off plus an alignment
timeout). Here the coordinator decides per checkpoint from measured signals, and records
the reason with the numbers in ``_checkpoints``. The rules, first match wins:

1. **Savepoint** -> ``"aligned"``. A savepoint is a portable, self-contained snapshot: no
   in-flight data, consistent even in at-least-once queries.
2. **At-least-once** (``exactly_once=False``) -> ``"at_least_once"``.
3. **Unaligned disabled** -> ``"aligned"``.
4. **Alignment timeout 0** -> ``"unaligned"`` (aligned-with-timeout would switch at the
   first barrier anyway).
5. **Predicted alignment reaches the timeout** -> ``"unaligned"`` at once, so the fast
   channels are never blocked for an alignment that is going to time out. The prediction
   uses the per-channel backlog ``b(c)`` (rows available upstream, not yet delivered;
   capped at ``buffer_per_channel_rows``, since ``B_n(c)`` is at most that far ahead of
   the delivered position) and delivery rate ``r(c)``: channel ``c`` delivers its barrier
   after ``t(c) = b(c) / r(c)`` (``0`` without backlog, unbounded with backlog but no
   delivery). With a known batch duration ``d`` this is rounded up to whole micro-batches,
   ``max(1, ceil(t(c) / d)) * d``, because barriers only reach Spark at batch boundaries.
   Alignment runs from the first barrier to the last one and the timeout counts from the
   first barrier (conformance rule R9), so the predicted alignment is the spread
   ``max_c t(c) - min_c t(c)``; when some channel is caught up this is just the slowest
   channel's ``t(c)``. The reason names the slowest channel, its backlog and rate.
6. **Recent alignments reached the timeout** -> ``"unaligned"``: the median (p50) of the
   alignment durations measured over the last ``alignment_history_size`` completed
   checkpoints (only those that tried to align; at least ``alignment_min_samples`` of
   them) reached the timeout, i.e. alignments keep timing out. Checkpoints taken
   unaligned do not add samples, so after a few of them the sample runs dry and rule 7
   probes alignment again.
7. Otherwise -> ``"aligned_with_timeout"``: align, fall back to unaligned if the
   alignment reaches ``aligned_timeout_ms``.

"Reaches" is ``>=``, like the barrier handler's switch (``now - s >= T``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from barriered.barrier.modes import Mode
from barriered.control.model import CHECKPOINT, SAVEPOINT, CheckpointKind
from barriered.coordinator.settings import SETTING_KEYS, CoordinatorSettings
from barriered.errors import CheckpointError

__all__ = ["AlignmentPrediction", "ChannelSignals", "ModeDecision", "decide_mode", "predict"]


@dataclass(frozen=True)
class ChannelSignals:
    """What the source's progress metrics say about its channels.

    Parameters
    ----------
    backlog_rows : mapping of int to int
        Per channel: rows available upstream but not yet delivered to Spark.
    throughput_rows_per_s : mapping of int to float
        Per channel: delivery rate while the channel is not blocked (e.g. a moving average
        over recent batches). A channel missing here has rate 0.
    batch_duration_ms : int or None, default None
        Typical micro-batch duration; alignment predictions are rounded up to it.
    blocked : frozenset of int, default frozenset()
        Channels blocked by an alignment while the rate was measured: for them a zero
        rate says nothing, so they are left out instead of predicted to never deliver.

    Raises
    ------
    barriered.errors.CheckpointError
        If a backlog, rate or duration is negative.
    """

    backlog_rows: Mapping[int, int]
    throughput_rows_per_s: Mapping[int, float]
    batch_duration_ms: int | None = None
    blocked: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        backlog = {int(c): int(b) for c, b in self.backlog_rows.items()}
        rates = {int(c): float(r) for c, r in self.throughput_rows_per_s.items()}
        for c, b in backlog.items():
            if b < 0:
                raise CheckpointError(f"ChannelSignals: channel {c} has negative backlog {b}")
        for c, r in rates.items():
            if r < 0 or math.isnan(r):
                raise CheckpointError(f"ChannelSignals: channel {c} has invalid rate {r}")
        if self.batch_duration_ms is not None and self.batch_duration_ms < 0:
            raise CheckpointError(
                f"ChannelSignals: negative batch duration {self.batch_duration_ms} ms"
            )
        object.__setattr__(self, "backlog_rows", backlog)
        object.__setattr__(self, "throughput_rows_per_s", rates)
        object.__setattr__(self, "blocked", frozenset(self.blocked))

    @classmethod
    def from_batch(
        cls,
        backlog_rows: Mapping[int, int],
        delivered_rows: Mapping[int, int],
        batch_duration_ms: int,
        blocked: frozenset[int] = frozenset(),
    ) -> ChannelSignals:
        """Build signals from one micro-batch: rows delivered per channel and its duration.

        Parameters
        ----------
        backlog_rows : mapping of int to int
            Per channel backlog after the batch.
        delivered_rows : mapping of int to int
            Per channel rows delivered in the batch.
        batch_duration_ms : int
            Duration of the batch (> 0).
        blocked : frozenset of int, default frozenset()
            Channels blocked during the batch.

        Returns
        -------
        ChannelSignals
            With ``throughput = delivered * 1000 / batch_duration_ms`` rows/s.
        """
        if batch_duration_ms <= 0:
            raise CheckpointError(
                f"ChannelSignals: batch duration must be > 0, got {batch_duration_ms}"
            )
        rates = {c: n * 1000.0 / batch_duration_ms for c, n in delivered_rows.items()}
        return cls(backlog_rows, rates, batch_duration_ms, blocked)


@dataclass(frozen=True)
class AlignmentPrediction:
    """How long the alignment of a checkpoint triggered now is expected to take.

    Attributes
    ----------
    alignment_ms : float
        Predicted first-to-last barrier spread (``inf`` if a channel never delivers).
    slowest_channel : int
        Channel whose barrier arrives last.
    slowest_backlog_rows : int
        Its (capped) backlog.
    slowest_rate_rows_per_s : float
        Its delivery rate.
    slowest_ms : float
        When its barrier arrives, after the trigger.
    first_barrier_ms : float
        When the first barrier arrives, after the trigger.
    """

    alignment_ms: float
    slowest_channel: int
    slowest_backlog_rows: int
    slowest_rate_rows_per_s: float
    slowest_ms: float
    first_barrier_ms: float


@dataclass(frozen=True)
class ModeDecision:
    """The mode chosen for a checkpoint and why.

    Attributes
    ----------
    mode : str
        ``"aligned"``, ``"unaligned"``, ``"aligned_with_timeout"`` or ``"at_least_once"``.
    reason : str
        A sentence with the numbers that led to the choice.
    prediction : AlignmentPrediction or None
        The backlog-based prediction, when it was computed.
    recent_p50_ms : float or None
        Median of the recent alignments, when there were enough samples.
    """

    mode: Mode
    reason: str
    prediction: AlignmentPrediction | None = None
    recent_p50_ms: float | None = None


def predict(
    signals: ChannelSignals, buffer_per_channel_rows: int | None = None
) -> AlignmentPrediction | None:
    """Predict the alignment of a checkpoint triggered now (rule 5 of the module docstring).

    Parameters
    ----------
    signals : ChannelSignals
    buffer_per_channel_rows : int or None, default None
        Cap on the backlog behind a barrier.

    Returns
    -------
    AlignmentPrediction or None
        ``None`` when no channel gives evidence (no channels, or only blocked ones
        without a rate).
    """
    batch = signals.batch_duration_ms or None
    times: dict[int, tuple[float, int, float]] = {}
    for c in sorted(set(signals.backlog_rows) | set(signals.throughput_rows_per_s)):
        backlog = signals.backlog_rows.get(c, 0)
        if buffer_per_channel_rows is not None:
            backlog = min(backlog, buffer_per_channel_rows)
        rate = signals.throughput_rows_per_s.get(c, 0.0)
        if backlog == 0:
            t = 0.0
        elif rate > 0:
            t = backlog * 1000.0 / rate
        elif c in signals.blocked:
            continue
        else:
            t = math.inf
        if batch is not None and not math.isinf(t):
            t = float(max(1, math.ceil(t / batch - 1e-9)) * batch)
        times[c] = (t, backlog, rate)
    if not times:
        return None
    slowest = max(times, key=lambda c: (times[c][0], -c))
    first = min(t for t, _, _ in times.values())
    t_slow, backlog_slow, rate_slow = times[slowest]
    spread = math.inf if math.isinf(t_slow) else t_slow - first
    return AlignmentPrediction(spread, slowest, backlog_slow, rate_slow, t_slow, first)


def decide_mode(
    settings: CoordinatorSettings,
    signals: ChannelSignals | None,
    recent: Sequence[int] = (),
    *,
    kind: CheckpointKind = CHECKPOINT,
) -> ModeDecision:
    """Choose the barrier handler mode of a new checkpoint.

    The rules, first match wins (details in the module docstring):

    1. savepoint -> ``"aligned"``;
    2. ``exactly_once`` false -> ``"at_least_once"``;
    3. ``unaligned_enabled`` false -> ``"aligned"``;
    4. ``aligned_timeout_ms == 0`` -> ``"unaligned"``;
    5. predicted alignment (spread of the channels' barrier arrival times
       ``backlog / rate``, rounded up to micro-batches) ``>= aligned_timeout_ms`` ->
       ``"unaligned"``, the reason naming the slowest channel, its backlog and rate;
    6. median of ``recent`` (with at least ``alignment_min_samples`` values)
       ``>= aligned_timeout_ms`` -> ``"unaligned"``;
    7. else ``"aligned_with_timeout"``.

    Parameters
    ----------
    settings : CoordinatorSettings
    signals : ChannelSignals or None
        Latest channel signals; ``None`` if none were reported yet.
    recent : sequence of int, default ()
        Alignment durations (ms) of recent completed checkpoints that tried to align.
    kind : {"checkpoint", "savepoint"}, default "checkpoint"

    Returns
    -------
    ModeDecision
        The mode and a human-readable reason with the numbers.
    """
    if kind == SAVEPOINT:
        return ModeDecision(Mode.ALIGNED, "savepoints are always aligned (no in-flight data)")
    if not settings.exactly_once:
        return ModeDecision(
            Mode.AT_LEAST_ONCE,
            f"at-least-once mode ({SETTING_KEYS['exactly_once']}=atLeastOnce): barriers never "
            "block and no in-flight data is captured",
        )
    if not settings.unaligned_enabled:
        return ModeDecision(
            Mode.ALIGNED,
            f"unaligned checkpoints are disabled ({SETTING_KEYS['unaligned_enabled']}=false)",
        )
    timeout = settings.aligned_timeout_ms
    if timeout == 0:
        return ModeDecision(
            Mode.UNALIGNED,
            "unaligned checkpoints are enabled with alignedCheckpointTimeout=0: barriers "
            "overtake the backlog at once",
        )
    if not settings.adaptive:
        return ModeDecision(
            Mode.ALIGNED_WITH_TIMEOUT,
            f"adaptive policy off ({SETTING_KEYS['adaptive']}=false): start aligned, switch "
            f"to unaligned after alignedCheckpointTimeout={timeout} ms",
        )
    prediction = None if signals is None else predict(signals, settings.buffer_per_channel_rows)
    p50 = (
        float(statistics.median(recent)) if len(recent) >= settings.alignment_min_samples else None
    )
    if prediction is not None and prediction.alignment_ms >= timeout:
        return ModeDecision(
            Mode.UNALIGNED,
            f"predicted alignment {_ms(prediction.alignment_ms)} reaches "
            f"alignedCheckpointTimeout={timeout} ms: {_slowest(prediction)}; "
            "barriers overtake the backlog at once (unaligned)",
            prediction,
            p50,
        )
    if p50 is not None and p50 >= timeout:
        predicted = (
            "no channel prediction"
            if prediction is None
            else f"backlog predicts {_ms(prediction.alignment_ms)}"
        )
        return ModeDecision(
            Mode.UNALIGNED,
            f"median of the last {len(recent)} alignments is {_ms(p50)}, reaching "
            f"alignedCheckpointTimeout={timeout} ms ({predicted}): alignments keep timing "
            "out, barriers overtake the backlog at once (unaligned)",
            prediction,
            p50,
        )
    if prediction is None:
        evidence = "no channel signals yet"
    else:
        evidence = f"predicted alignment {_ms(prediction.alignment_ms)} ({_slowest(prediction)})"
    if p50 is not None:
        evidence += f", median of the last {len(recent)} alignments {_ms(p50)}"
    return ModeDecision(
        Mode.ALIGNED_WITH_TIMEOUT,
        f"{evidence}; below alignedCheckpointTimeout={timeout} ms: aligning, switching to "
        "unaligned if the alignment reaches the timeout",
        prediction,
        p50,
    )


def _ms(value: float) -> str:
    return "unbounded" if math.isinf(value) else f"{round(value)} ms"


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.2f}"


def _slowest(p: AlignmentPrediction) -> str:
    c = p.slowest_channel
    if p.slowest_backlog_rows == 0:
        return f"no channel has a backlog (slowest channel {c})"
    if math.isinf(p.slowest_ms):
        return (
            f"slowest channel {c} has {p.slowest_backlog_rows} rows of backlog and delivers nothing"
        )
    return (
        f"slowest channel {c} has {p.slowest_backlog_rows} rows of backlog at "
        f"{_rate(p.slowest_rate_rows_per_s)} rows/s, its barrier arrives after "
        f"{_ms(p.slowest_ms)}, the first after {_ms(p.first_barrier_ms)}"
    )
