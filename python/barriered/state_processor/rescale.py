"""A savepoint's ``maxParallelism`` changed: the same checkpoint, written again as a new
savepoint with every key in the key group of the new number of key groups.

``maxParallelism`` (the number of key groups) is fixed for the life of a snapshot path,
and so is the most partitions keyed state can be split into. Here it changes offline: the
keys are in the state, so each key's new group is computed from it
(:mod:`barriered.statestore.regroup`), for the ``barriered.keyed`` operators and for the
JVM provider's stores of Spark's own operators. Everything else of the checkpoint (barrier
positions, in-flight records, the upstream's manifest, the ``_checkpoints`` row) is
copied unchanged; the source savepoint is only read. A restore from the result, with
``maxParallelism`` set to the new value, runs at any ``spark.sql.shuffle.partitions`` up
to it.

Every refusal (:class:`~barriered.errors.RescaleError`) happens before anything is
written; if writing fails, the new folder is removed.
"""

from __future__ import annotations

import logging

from barriered.config import MAX_PARALLELISM
from barriered.errors import RescaleError
from barriered.files.fileio import exists, read_json
from barriered.state_processor.target import Target
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.regroup import Regroup, check_keys
from barriered.statestore.restore_point import resolve
from barriered.statestore.savepoints import Savepoint, export

log = logging.getLogger(__name__)


def _check_value(max_parallelism: object, option: str) -> int:
    low, high = MAX_PARALLELISM.min_value or 1, MAX_PARALLELISM.max_value or 1 << 15
    if (
        isinstance(max_parallelism, bool)
        or not isinstance(max_parallelism, int)
        or not low <= max_parallelism <= high
    ):
        raise RescaleError(
            f"{option} must be a whole number of key groups from {low} to {high} "
            f"({MAX_PARALLELISM.key}'s range), got {max_parallelism!r}; nothing was written"
        )
    return max_parallelism


def _source(snapshot: str) -> SnapshotLayout:
    layout = SnapshotLayout.at(snapshot)
    if not exists(layout.root):
        raise RescaleError(f"savepoint {snapshot!r} does not exist; nothing was written")
    if read_json(layout.savepoint_file, default=None) is None:
        what = "a snapshot path" if layout.is_snapshot_path() else "not a savepoint folder"
        raise RescaleError(
            f"{snapshot!r} is {what}: it has no _savepoint.json, and only a savepoint is "
            "rescaled (the result is a copy of its one checkpoint). Take one first: "
            f"barriered savepoint {snapshot} -o SAVEPOINT (or barriered.savepoint(query, "
            "path) on the running query); nothing was written"
        )
    return SnapshotLayout.existing(snapshot)


def _target(path: str, source: SnapshotLayout) -> Target:
    layout = SnapshotLayout.at(path)
    if exists(layout.root):
        raise RescaleError(
            f"target {path!r} exists; a rescaled savepoint is written to a new folder, never "
            "over anything; nothing was written"
        )
    inside = source.root.rstrip("/") + "/"
    if layout.root.startswith(inside):
        raise RescaleError(
            f"target {path!r} is inside the savepoint {source.root!r}, which stays as it "
            "is; choose a folder outside it; nothing was written"
        )
    return Target(layout, existed=False)


def rescale(
    snapshot: str, path: str, max_parallelism: int, option: str = "max_parallelism"
) -> Savepoint:
    """Write savepoint ``snapshot`` again at ``path`` with ``max_parallelism`` key groups.

    Parameters
    ----------
    snapshot : str
        A savepoint folder (``barriered.savepoint``, ``barriered savepoint``, a bootstrap
        or transform); it is only read.
    path : str
        The new savepoint folder; it must not exist.
    max_parallelism : int
        The new number of key groups (1 to 32768, ``maxParallelism``'s range).
    option : str, default "max_parallelism"
        How error messages name ``max_parallelism`` (the command line's option).

    Returns
    -------
    Savepoint
        The new folder (``restoreFrom``, with ``maxParallelism`` set to the new value).

    Raises
    ------
    RescaleError
        ``max_parallelism`` out of range, ``snapshot`` missing or not a savepoint,
        ``path`` existing or inside ``snapshot``, or a keyed operator's key type whose
        hash is not computed outside Spark when ``max_parallelism`` does not divide the
        old value. Nothing is written.
    RestoreError
        When the savepoint's checkpoint or its files are missing or damaged.
    """
    new = _check_value(max_parallelism, option)
    origin = _source(snapshot)
    target = _target(path, origin)
    point = resolve(origin, "latest", None)
    point.check_files()
    old = int(dict(point.config.get("conf") or {}).get("max_parallelism") or 0)
    old = old or int(MAX_PARALLELISM.default or 128)
    registrations = point.operators()
    unknown = {str(f.partition_values.get("operator")) for f in point.state_files()}
    unknown -= set(registrations)
    if unknown:
        raise RescaleError(
            f"{point.describe()} holds state of keyed operator(s) {sorted(unknown)} that are "
            "not registered (_coordinator/operators/<op>.json is missing): their key columns "
            "are unknown, so their keys' groups cannot be computed; nothing was written"
        )
    check_keys(registrations, new)
    regroup = Regroup(new, old)
    with target.writing():
        saved = export(origin, point.checkpoint_id, target.layout.root, regroup=regroup)
    log.info(
        "savepoint %s rescaled from %d to %d key groups: %s", origin.root, old, new, saved.path
    )
    return saved
