"""Keyed operators' registrations that a restore writes once its run has started.

Declaring a keyed operator (``barriered.keyed(...).process``) registers it on the snapshot
path, ``_coordinator/operators/<operator>.json``, when it is new or changed. The
partitions recorded there (``partitions``) are those a later resume must use, as Spark's
checkpoint location keeps the live state per partition. A restore may choose others
(the live state starts afresh in a new checkpoint location), but the source can still
refuse the restore when the query starts (a checkpoint location that already holds
offsets, for one): a refused restore must write nothing, and the path's recorded
partitions must stay those of the checkpoint location the query can still resume. So a restored
declaration's registration waits here, in the driver, until the coordinator sees the
restored run's first progress (:meth:`BarrieredListener.onQueryProgress`), before any
checkpoint of that run completes.

A crash between the restored run's first micro-batch and its first progress report
leaves the old partitions recorded; the resumed query's first call then finds live state
of other partitions and fails with :class:`~barriered.errors.KeyedStateError` (nothing
silently wrong): restore again.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from barriered.statestore.fileio import write_json

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
#: (snapshot path root, operator) -> (restore identity, registration file, its content).
_PENDING: dict[tuple[str, str], tuple[tuple[str, int], str, dict[str, Any]]] = {}


def _identity(source_root: str, checkpoint_id: Any) -> tuple[str, int]:
    return str(source_root), int(checkpoint_id)


def defer(
    root: str, operator: str, path: str, spec: dict[str, Any], restore: dict[str, Any]
) -> None:
    """Keep ``spec``, the registration of ``operator`` on snapshot path ``root`` (its file
    ``path``), until a run restored from ``restore`` (``root`` and ``checkpoint_id`` of
    the restore point, as ``barriered.keyed`` receives them) reports its first progress."""
    with _LOCK:
        _PENDING[(root, operator)] = (
            _identity(restore["root"], restore["checkpoint_id"]),
            path,
            spec,
        )


def discard(root: str, operator: str) -> None:
    """Forget a deferred registration of ``operator`` on ``root``: a later declaration
    (one that resumes, say, after a refused restore) replaces it."""
    with _LOCK:
        _PENDING.pop((root, operator), None)


def write(root: str, restore: dict[str, Any] | None) -> None:
    """Write the registrations deferred on ``root`` by a declaration restored from what
    ``restore`` names (an offset's restore entry: ``from``, ``checkpoint_id``)."""
    if not restore:
        return
    restored = _identity(restore["from"], restore["checkpoint_id"])
    with _LOCK:
        due = [
            (key, _PENDING.pop(key))
            for key, (identity, _, _) in list(_PENDING.items())
            if key[0] == root and identity == restored
        ]
    for (_, operator), (_, path, spec) in due:
        write_json(path, spec)
        log.info(
            "keyed operator %s registered on %s (%s partitions), as restored from "
            "checkpoint %s of %s",
            operator,
            root,
            spec.get("partitions"),
            restored[1],
            restored[0],
        )
