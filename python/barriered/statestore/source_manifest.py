"""The upstream manifests under a snapshot path's ``_source/`` folder, as a restore reads them.

A file-backed upstream (``files``, ``delta``) fixes which positions of a channel each
data file holds in a manifest: a JSON-lines file, a header line (the options that fix
positions) and one line per data file (``kind`` ``file``, ``channel``, ``start``,
``rows``). The upstreams write, resume and index them
(:mod:`barriered.datasource.upstreams.manifest`); a checkpoint's barrier positions mean
records only through its manifest, so a restore checks that the manifest is there and
reaches every position (:func:`manifest_ends`).
"""

from __future__ import annotations

import json
from typing import Any

from barriered.errors import SnapshotStoreError
from barriered.files.fileio import read_bytes

#: The manifest of the ``files`` upstream, in its state folder (``_source/``).
FILES_MANIFEST = "files_manifest.jsonl"
#: The manifest of the ``delta`` upstream, in its state folder (``_source/``).
DELTA_MANIFEST = "delta_manifest.jsonl"
#: Upstream name -> its manifest file (an upstream not here keeps none).
MANIFESTS = {"files": FILES_MANIFEST, "delta": DELTA_MANIFEST}


def read_records(path: str) -> list[dict[str, Any]] | None:
    """Return the JSON documents of manifest ``path``, one per line; None if missing.

    Raises
    ------
    SnapshotStoreError
        When the file cannot be read or a line is not a JSON object.
    """
    raw = read_bytes(path, "upstream manifest")
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SnapshotStoreError(
            f"upstream manifest {path!r} is corrupt ({exc}); restore it from a backup, or "
            "start the stream on a new snapshot path"
        ) from exc
    out: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise SnapshotStoreError(
                f"upstream manifest {path!r} is corrupt at line {number} ({exc}); restore "
                "it from a backup, or start the stream on a new snapshot path"
            ) from exc
        if not isinstance(record, dict):
            raise SnapshotStoreError(
                f"upstream manifest {path!r} is corrupt at line {number} (not an object); "
                "restore it from a backup, or start the stream on a new snapshot path"
            )
        out.append(record)
    return out


def manifest_ends(manifest_path: str, channels: int) -> list[int] | None:
    """Per channel, the end of the positions manifest ``manifest_path`` records (None if
    the file is missing or empty)."""
    records = read_records(manifest_path)
    if not records:
        return None
    ends = [0] * channels
    for record in records[1:]:
        channel = record.get("channel")
        if record.get("kind") != "file" or not isinstance(channel, int):
            continue
        try:
            end = int(record["start"]) + int(record["rows"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotStoreError(
                f"upstream manifest {manifest_path!r} has a malformed file entry {record!r} "
                f"({exc}); restore it from a backup"
            ) from exc
        if 0 <= channel < channels:
            ends[channel] = max(ends[channel], end)
    return ends
