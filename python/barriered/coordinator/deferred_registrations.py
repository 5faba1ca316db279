"""Keyed operators' registrations, written once their run has started.

Declaring a keyed operator (``barriered.keyed(...).process``) makes its registration,
``_coordinator/operators/<operator>.json``: the key columns, state fields and the
partitions (``partitions``) a later resume must use, as Spark's checkpoint location keeps
the live state per partition. The declaration writes nothing: ``start()`` may still
refuse the query (a bad sink option, a storage setting), the source may refuse it when
it starts (a restore into a checkpoint location that holds offsets), and a refused query
must leave the snapshot path as it was. A registration left by a refused run would also
make every checkpoint of the corrected rerun wait for an operator that never runs
(issue 36). So a declaration waits here, in the process that declared it (the driver, or
the Spark Connect client, where the coordinator's listener runs too), until the
coordinator sees the first progress of a run of the same loaded stream (the source's id,
one per ``load()``, which the ``_barrier`` column's metadata and the source's progress
report both carry), before any checkpoint of that run completes.

The operators declared on the run's stream are the run's keyed operators: the coordinator
waits for their key groups at every checkpoint, and for no other registration the
snapshot path holds (an operator an earlier query ran, and this one does not).

A crash between a run's first micro-batch and its first progress report leaves the
registration as it was (none, on a new path); the resumed query declares it again, and
a first call that finds live state of other partitions fails with
:class:`~barriered.errors.KeyedStateError` (nothing silently wrong).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from barriered.files.fileio import read_json, write_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Declaration:
    """One keyed operator declared on a loaded stream: its registration and its file."""

    operator: str
    path: str
    registration: dict[str, Any]


_LOCK = threading.Lock()
#: (snapshot path root, source id) -> operator -> its declaration (the latest one).
_DECLARED: dict[tuple[str, str], dict[str, Declaration]] = {}


def declare(
    root: str, source_id: str, operator: str, path: str, registration: dict[str, Any]
) -> None:
    """Keep ``registration``, of ``operator`` on snapshot path ``root`` (its file
    ``path``), declared on the stream loaded as ``source_id``, until a run of that stream
    reports its first progress (:func:`start_run`). A later declaration of the same
    operator on the same stream replaces it."""
    with _LOCK:
        _DECLARED.setdefault((root, source_id), {})[operator] = Declaration(
            operator, path, registration
        )


def declared(root: str, source_id: str) -> frozenset[str]:
    """The keyed operators declared on the stream ``source_id`` of ``root``."""
    with _LOCK:
        return frozenset(_DECLARED.get((root, source_id), {}))


def start_run(root: str, source_id: str | None) -> frozenset[str] | None:
    """A run of the stream ``source_id`` on ``root`` started: write the registrations
    declared on it that differ from their files, and return the declared operators (the
    run's keyed operators; empty when it runs none). None when the run's source did not
    say which stream it is (then every registration on the path counts)."""
    if source_id is None:
        return None
    with _LOCK:
        due = list(_DECLARED.get((root, source_id), {}).values())
    for declaration in due:
        if read_json(declaration.path, default=None) == declaration.registration:
            continue
        write_json(declaration.path, declaration.registration)
        log.info(
            "keyed operator %s registered on %s (%s partitions)",
            declaration.operator,
            root,
            declaration.registration.get("partitions"),
        )
    return frozenset(d.operator for d in due)
