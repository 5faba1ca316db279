"""The figures of a snapshot path read from its files (``barriered ui PATH``).

Everything comes from the snapshot path itself, on local disk or an object store (the
storage options its source recorded): the ``_checkpoints`` rows, the configuration in
``config.json`` (secrets redacted there), the owners table, which says whether the
newest run was restored and from where, and the state table's commit metadata, which
holds each checkpoint's in-flight ranges per channel. Nothing is written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from barriered.config import BarrieredConf
from barriered.errors import BarrieredError
from barriered.files.fileio import read_json
from barriered.monitoring.figures import Tally
from barriered.monitoring.page import PathView
from barriered.statestore import checkpoints_table, integrity, ownership
from barriered.statestore.layout import SnapshotLayout

__all__ = ["configuration", "inflight_ranges", "path_view", "restored_from"]

log = logging.getLogger(__name__)


def configuration(layout: SnapshotLayout) -> dict[str, str]:
    """The settings the newest run on ``layout`` started with, as session keys and
    value strings (empty when ``config.json`` is missing or unreadable)."""
    stored = read_json(layout.config_file, default=None) or {}
    try:
        return BarrieredConf(**stored.get("conf", {})).to_conf()
    except (BarrieredError, TypeError) as exc:
        log.warning("the configuration of %s cannot be read: %s", layout.root, exc)
        return {}


def restored_from(layout: SnapshotLayout) -> dict[str, Any] | None:
    """What the newest run on ``layout`` was restored from: ``from`` (the ``restoreFrom``
    it was given), ``epoch`` and ``started_ms``; None for a fresh start or no run."""
    try:
        owner = ownership.current_owner(layout)
    except BarrieredError as exc:
        log.warning("the owners of %s cannot be read: %s", layout.root, exc)
        return None
    if owner is None or owner.restore_from is None:
        return None
    return {"from": owner.restore_from, "epoch": owner.epoch, "started_ms": owner.started_ms}


def path_view(layout: SnapshotLayout, restored: Mapping[str, Any] | None = None) -> PathView:
    """The page's view of ``layout``, read now.

    Parameters
    ----------
    layout : SnapshotLayout
        An existing snapshot path (``SnapshotLayout.existing``).
    restored : mapping, optional
        What its run was restored from; read from the owners table when not given.

    Raises
    ------
    SnapshotStoreError
        When ``_checkpoints`` is damaged.
    """
    rows = checkpoints_table.read_rows(layout)
    tally = Tally.of(layout.root, rows, restored or restored_from(layout))
    return PathView(tally.figures(), configuration(layout), inflight_ranges(layout))


def inflight_ranges(layout: SnapshotLayout) -> dict[int, dict[str, list[int]]]:
    """Per checkpoint still in the state table's history, its in-flight ranges
    ``{channel: [start, end)}`` (commit metadata ``barriered.inflight``); empty when the
    table cannot be read (the page shows the rest)."""
    try:
        committed = integrity.committed_checkpoints(layout)
    except BarrieredError as exc:
        log.warning("the in-flight ranges of %s cannot be read: %s", layout.root, exc)
        return {}
    out: dict[int, dict[str, list[int]]] = {}
    for cid, (_, meta) in committed.items():
        try:
            ranges = json.loads(meta.get("barriered.inflight") or "{}")
            out[cid] = {str(c): [int(r[0]), int(r[1])] for c, r in ranges.items()}
        except (ValueError, TypeError, IndexError, AttributeError):
            continue
    return out
