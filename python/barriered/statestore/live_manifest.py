"""The manifest of a partition's live state: the immutable files it reads, newest first,
and the table files no completed checkpoint holds yet (see
:mod:`barriered.statestore.live_state`). It is the JSON half of the value the keyed
operator keeps in Spark's state store.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from barriered.statestore.deletion_vectors import DeletionVector
from barriered.statestore.key_groups import partition_key_groups

#: The format of the value in Spark's state store.
FORMAT = 2


@dataclass
class Run:
    """One immutable file of the live state (an entry of the manifest)."""

    id: int
    uri: str  # absolute
    rel: str | None  # path in this snapshot path's state table; None: private, or restored
    # from another path or an older version
    key_group: int | None = None  # an earlier layout's file: one key group, no column
    dv: dict[str, Any] | None = None  # restored: the version's deletion vector
    private: bool = False  # spilled buffered changes, not in the table


@dataclass
class Pending:
    """A table file written at a cut that no completed checkpoint holds yet."""

    rel: str
    size: int
    rows: int
    modification_time: int
    stats: str
    rows_by_group: dict[str, int]
    first_cut: int

    @property
    def groups(self) -> set[int]:
        """The key groups it holds rows of."""
        return {int(g) for g in self.rows_by_group}


@dataclass
class Manifest:
    """The JSON part of the value in Spark's state store."""

    partition: int
    partitions: int
    runs: list[Run] = field(default_factory=list)  # newest first
    pending: list[Pending] = field(default_factory=list)
    next_run: int = 1
    full_next: bool = False  # the next cut writes the whole state (after a restore)
    format: int = FORMAT

    def to_json(self) -> str:
        """Serialize (compact JSON)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse :meth:`to_json`."""
        d = json.loads(text)
        return cls(
            partition=int(d["partition"]),
            partitions=int(d["partitions"]),
            runs=[Run(**r) for r in d["runs"]],
            pending=[Pending(**p) for p in d["pending"]],
            next_run=int(d["next_run"]),
            full_next=bool(d["full_next"]),
            format=int(d["format"]),
        )

    def vector_files(self) -> list[str]:
        """The deletion vector files (absolute paths) the restored runs read. Each cut
        reports them, so retention keeps them while a run reads them, however long after
        the table stopped referencing them (:func:`~barriered.statestore.retention.
        pinned_vectors`)."""
        return sorted(
            {
                DeletionVector.from_json(run.dv).file_path("")
                for run in self.runs
                if run.dv is not None and run.dv.get("storageType") == "p"
            }
        )

    def add_run(self, **kwargs: Any) -> Run:
        """A new run with the next id (not yet placed in :attr:`runs`)."""
        run = Run(id=self.next_run, **kwargs)
        self.next_run += 1
        return run


@dataclass(frozen=True)
class RestoredFile:
    """A file of a restored checkpoint's ``state`` table, for the partitions that own
    some of its key groups."""

    uri: str
    first_group: int  # the key groups it holds rows of, at most (its statistics)
    last_group: int
    key_group: int | None = None  # an earlier layout's file (one key group, no column)
    dv: dict[str, Any] | None = None  # the restored version's deletion vector
    #: Its path in the restoring run's own ``state`` table when the restore claimed the
    #: files (the table's current version holds the operator's files just as the restored
    #: version did): the run's cuts delete its rows with deletion vectors.
    rel: str | None = None


def new_manifest(
    partition: int,
    partitions: int,
    max_parallelism: int,
    restored: Sequence[RestoredFile] = (),
    claimed: bool = True,
) -> Manifest:
    """The manifest of a partition's first call: empty, or after a restore the restored
    files that may hold its key groups (their deletion vectors name what is not state).
    A restore that did not claim its files (``claimed`` False: from another path, or of
    an older checkpoint, whose later files this table still holds) makes the first cut
    write the whole state, which replaces every older row of the partition's key groups,
    even none (Flink's first checkpoint after a restore in ``NO_CLAIM`` mode: the
    restored files belong to the snapshot); a claimed restore's files are the
    partition's table files (``CLAIM``)."""
    mine = partition_key_groups(partition, partitions, max_parallelism)
    manifest = Manifest(partition, partitions, full_next=not claimed)
    for f in restored:
        if f.first_group <= mine[-1] and f.last_group >= mine[0] if len(mine) else False:
            manifest.runs.append(
                manifest.add_run(uri=f.uri, rel=f.rel, key_group=f.key_group, dv=f.dv)
            )
    return manifest
