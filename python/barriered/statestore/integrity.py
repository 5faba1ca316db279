"""Whether a snapshot path still holds the checkpoints its history lists.

Two tables tell what completed: ``_checkpoints`` lists it for people, and the ``state``
table's log holds the restore points (a checkpoint is restorable while the state commit
that carries its id is in the log). They disagree only when something was lost or
damaged: a deleted or garbled log file, a ``_delta_log`` folder gone. :func:`check`
compares them and says, by file name, what is missing, and which checkpoint a restore
would use. ``barriered checkpoints`` shows it as warnings; ``restoreFrom=latest`` and
``barriered restore-plan`` refuse to fall back to an older checkpoint silently when a
newer completed one is listed (an explicit id restores the older one). Nothing here
writes anything.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from barriered.config.source_options import RESTORE_FROM
from barriered.errors import SnapshotStoreError
from barriered.files.fileio import exists, join
from barriered.statestore import checkpoints_table
from barriered.statestore.delta_tables import log_file_problem, open_table
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unrestorable:
    """A checkpoint ``_checkpoints`` lists as completed that cannot be restored."""

    checkpoint_id: int
    reason: str  # what is missing or damaged, naming the file


@dataclass(frozen=True)
class PathIntegrity:
    """What a snapshot path lists as completed against what it can restore.

    Attributes
    ----------
    root : str
        The snapshot path.
    listed : tuple of int
        Completed checkpoints in ``_checkpoints``, oldest first (empty when unreadable).
    committed : mapping
        Checkpoint id -> (state table version, commit metadata) of every restorable one.
    unrestorable : tuple of Unrestorable
        Listed checkpoints newer than the newest restorable one, with what is missing.
    history_problem : str or None
        Why ``_checkpoints`` cannot be read (None: it can).
    state_problem : str or None
        Why the ``state`` table's log cannot be read (None: it can, or there is none).
    rows : sequence of dict
        The ``_checkpoints`` rows.
    """

    root: str
    listed: tuple[int, ...]
    committed: Mapping[int, tuple[int, dict[str, Any]]]
    unrestorable: tuple[Unrestorable, ...] = ()
    history_problem: str | None = None
    state_problem: str | None = None
    rows: Sequence[dict[str, Any]] = field(default=(), compare=False, repr=False)

    @property
    def restorable(self) -> list[int]:
        """Ids a restore can use, oldest first."""
        return sorted(self.committed)

    @property
    def restore_id(self) -> int | None:
        """The checkpoint ``restoreFrom=latest`` restores (None: none can be restored)."""
        return max(self.committed, default=None)

    def refusal(self) -> str | None:
        """Why ``restoreFrom=latest`` must not be used (None: it can)."""
        if not self.unrestorable:
            return None
        newest = self.unrestorable[-1]
        what = (
            f"the latest completed checkpoint {newest.checkpoint_id} under {self.root!r} "
            f"cannot be restored: {newest.reason}"
        )
        if self.restore_id is None:
            return (
                f"{what}. No listed checkpoint can be restored; nothing was changed. Put the "
                "missing or damaged file back (from a backup) and retry"
            )
        older = ", ".join(str(u.checkpoint_id) for u in self.unrestorable[:-1])
        also = f" (also unrestorable: {older})" if older else ""
        return (
            f"{what}{also}. Nothing was changed. The newest checkpoint that can be restored "
            f"is {self.restore_id}; restoring it loses what the later ones recorded, so it is "
            f"not chosen silently: pass its id explicitly (.option({RESTORE_FROM.name!r}, "
            f"'{self.restore_id}'), barriered restore-plan {self.root} --from "
            f"{self.restore_id}), or put the missing file back"
        )

    def warnings(self) -> list[str]:
        """Lines for ``barriered checkpoints``: listed but unrestorable checkpoints (those
        with the same cause on one line) and what a restore would use."""
        by_reason: dict[str, list[int]] = {}
        for u in self.unrestorable:
            by_reason.setdefault(u.reason, []).append(u.checkpoint_id)
        lines = [
            f"checkpoint{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} "
            f"{'are' if len(ids) > 1 else 'is'} listed as completed but cannot be restored: "
            f"{reason}"
            for reason, ids in by_reason.items()
        ]
        if lines and self.restore_id is not None:
            lines.append(
                f"a restore from 'latest' is refused; checkpoint {self.restore_id} is the "
                f"newest that can be restored (restoreFrom={self.restore_id}, "
                f"barriered restore-plan {self.root} --from {self.restore_id})"
            )
        elif lines:
            lines.append(
                "no listed checkpoint can be restored: put the missing or damaged files back"
            )
        return lines

    def reason(self, checkpoint_id: int) -> str | None:
        """Why a checkpoint listed as completed is not restorable (None: it is, or it is
        not listed as completed)."""
        if checkpoint_id in self.committed or checkpoint_id not in self.listed:
            return None
        known = {u.checkpoint_id: u.reason for u in self.unrestorable}
        if checkpoint_id in known:
            return known[checkpoint_id]
        row = checkpoints_table.row_of(self.rows, checkpoint_id)
        assert row is not None  # listed
        return _why(SnapshotLayout.at(self.root), row, self)


def committed_checkpoints(layout: SnapshotLayout) -> dict[int, tuple[int, dict[str, Any]]]:
    """Checkpoint id -> (state table version, commit metadata) of every commit retained
    in the ``state`` table's history."""
    table = open_table(layout.state_table, storage_options=layout.storage_options)
    if table is None:
        return {}
    out: dict[int, tuple[int, dict[str, Any]]] = {}
    for entry in table.history():
        cid = entry.get("barriered.checkpoint_id")
        if cid is not None:
            out[int(cid)] = (int(entry["version"]), dict(entry))
    return out


def check(layout: SnapshotLayout) -> PathIntegrity:
    """Compare what ``_checkpoints`` lists as completed with what the state table holds.

    Damage to either table is reported, not raised: see :class:`PathIntegrity`.
    """
    rows: list[dict[str, Any]] = []
    history_problem = state_problem = None
    try:
        rows = checkpoints_table.read_rows(layout)
    except SnapshotStoreError as exc:
        history_problem = str(exc)
    committed: dict[int, tuple[int, dict[str, Any]]] = {}
    try:
        committed = committed_checkpoints(layout)
    except SnapshotStoreError as exc:
        state_problem = str(exc)
    listed = tuple(sorted({int(r["checkpoint_id"]) for r in rows if r["status"] == "completed"}))
    partial = PathIntegrity(
        layout.root, listed, committed, (), history_problem, state_problem, rows
    )
    newest = max(committed, default=0)
    by_id = {int(r["checkpoint_id"]): r for r in rows if r["status"] == "completed"}
    lost = tuple(Unrestorable(c, _why(layout, by_id[c], partial)) for c in listed if c > newest)
    for u in lost:
        log.info("snapshot path %s: checkpoint %d: %s", layout.root, u.checkpoint_id, u.reason)
    return PathIntegrity(layout.root, listed, committed, lost, history_problem, state_problem, rows)


def _why(layout: SnapshotLayout, row: Mapping[str, Any], seen: PathIntegrity) -> str:
    """What is missing for the listed checkpoint ``row``, naming the file."""
    if seen.state_problem is not None:
        return seen.state_problem.removesuffix(". Nothing was changed")
    log_dir = join(layout.state_table, "_delta_log")
    if not exists(log_dir):
        return f"the state table's log {log_dir!r} is missing"
    version = row.get("state_table_version")
    if version is None:
        return "its _checkpoints row records no state table version"
    problem = log_file_problem(layout.state_table, int(version))
    if problem is not None:
        return problem.replace("its commit", "its state table commit", 1)
    holder = [c for c, (v, _) in seen.committed.items() if v == int(version)]
    carries = f"checkpoint {holder[0]}" if holder else "no checkpoint"
    return (
        f"the state table's commit of version {version} carries {carries}, not this one "
        "(the log was rewritten after it completed)"
    )
