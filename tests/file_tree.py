"""What a refusal must leave alone: every file under a folder with its size and mtime."""

from __future__ import annotations

from pathlib import Path


def tree(root: str | Path) -> dict[str, tuple[int, int]]:
    """Relative path -> (size, mtime_ns) of every file under ``root`` (empty if missing)."""
    root = Path(root)
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
