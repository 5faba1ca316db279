"""What a refusal must leave alone: every file under a folder with its size and mtime,
or with its bytes' sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path


def tree(root: str | Path) -> dict[str, tuple[int, int]]:
    """Relative path -> (size, mtime_ns) of every file under ``root`` (empty if missing)."""
    root = Path(root)
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def digests(root: str | Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (empty if missing)."""
    root = Path(root)
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
