"""The folder a bootstrap or transform writes its savepoint to: new or empty, and left as
it was when the write fails."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from barriered.errors import SnapshotStoreError
from barriered.files.fileio import delete_tree, exists, filesystem, list_names
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """A savepoint folder that does not exist or is empty."""

    layout: SnapshotLayout
    existed: bool

    @classmethod
    def empty(cls, path: str) -> Target:
        """Check that ``path`` is new or empty.

        Raises
        ------
        SnapshotStoreError
            When it holds anything. Nothing is written.
        """
        layout = SnapshotLayout.at(path)
        found = exists(layout.root)
        if found and (list_names(layout.root) or list_names(layout.root, folders=True)):
            raise SnapshotStoreError(
                f"savepoint folder {layout.root!r} is not empty; nothing was written. Choose "
                "a new folder: savepoints are never overwritten"
            )
        return cls(layout, found)

    @contextmanager
    def writing(self) -> Iterator[SnapshotLayout]:
        """Write the savepoint; on any error, remove what was written, then re-raise."""
        try:
            yield self.layout
        except BaseException:
            log.warning("savepoint %s failed; removing what was written", self.layout.root)
            if self.existed:
                fs, path = filesystem(self.layout.root)
                fs.delete_dir_contents(path, missing_dir_ok=True)
            else:
                delete_tree(self.layout.root)
            raise
