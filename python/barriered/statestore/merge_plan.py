"""What a cut merges: which of a partition's table files, and in which key-group ranges.

A cut writes the partition's changes as one new file of the ``state`` table. Past
``keyed.maxRuns`` table files it also merges the newest of them into that file
(:func:`to_absorb`, tiered: files of similar size merge, a large file waits until the
changes over it are a fair share of it), and it merges one range of key groups at a time
(:func:`merge_ranges`), so that a merge holds about one chunk's rows, not the state.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from barriered.statestore.live_manifest import Run
from barriered.statestore.state_files import CHUNK_ROWS, file_info

#: A cut merges an older table file only while it holds at most this many times the rows
#: merged so far (:func:`to_absorb`).
MERGE_RATIO = 4


def file_rows(run: Run) -> int:
    """The rows of a run's file (its footer)."""
    return int(file_info(run.uri, run.key_group).starts[-1])


def to_absorb(table_runs: Sequence[Run], changed_rows: int, max_runs: int) -> list[Run]:
    """The newest table files a cut merges with its ``changed_rows`` changes once the
    partition has ``max_runs`` of them: enough to leave at most half as many, then each
    next older one that holds at most :data:`MERGE_RATIO` times the rows merged so far.

    Files of similar size merge; a large file stays until the changes over it reach
    1 / :data:`MERGE_RATIO` of its rows, so a cut's merge costs about what changed since
    the last merge, not the state. All of them: a whole-state compaction (always, when
    one is a restored file of another table, which is only ever replaced whole).
    """
    if len(table_runs) < max_runs:
        return []
    keep_at_most = max(1, max_runs // 2)
    merged = changed_rows
    out: list[Run] = []
    for i, run in enumerate(table_runs):
        if run.rel is None:
            return list(table_runs)
        kept = len(table_runs) - i + 1  # this one, the older ones and the new file
        if kept <= keep_at_most and file_rows(run) > MERGE_RATIO * merged:
            break
        out.append(run)
        merged += file_rows(run)
    return out


def merge_ranges(
    mine: range, changed_groups: np.ndarray, runs: Sequence[Run]
) -> list[tuple[int, int]]:
    """Key groups ``mine`` in consecutive ranges of about
    :data:`~barriered.statestore.state_files.CHUNK_ROWS` entries of the changes (their key
    groups ``changed_groups``) and ``runs`` (a run's chunk counted evenly over its key
    groups)."""
    if not len(mine):
        return []
    counts = np.zeros(len(mine), np.float64)
    groups = changed_groups - mine.start
    counts += np.bincount(groups[(groups >= 0) & (groups < len(mine))], minlength=len(mine))
    for run in runs:
        info = file_info(run.uri, run.key_group)
        for chunk in info.chunks:
            low, high = max(chunk.low, mine.start), min(chunk.high, mine[-1])
            if low <= high:
                n = info.starts[chunk.end] - info.starts[chunk.first]
                counts[low - mine.start : high - mine.start + 1] += n / (chunk.high - chunk.low + 1)
    ranges, first, total = [], 0, 0.0
    for i, n in enumerate(counts):
        if i > first and total + n > CHUNK_ROWS:
            ranges.append((mine.start + first, mine.start + i - 1))
            first, total = i, 0.0
        total += n
    ranges.append((mine.start + first, mine[-1]))
    return ranges
