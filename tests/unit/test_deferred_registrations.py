"""A restored declaration's operator registration is written by the restored run's first
progress, not before: a restore the source refuses writes nothing."""

from __future__ import annotations

from pathlib import Path

from barriered.coordinator import deferred_registrations
from barriered.statestore.fileio import read_json

SPEC = {"operator": "totals", "partitions": 4}
RESTORE = {"root": "/snaps/a", "checkpoint_id": 7, "state_version": 3}


def test_written_only_for_the_run_restored_from_the_same_checkpoint(tmp_path: Path) -> None:
    root, path = str(tmp_path), str(tmp_path / "totals.json")
    deferred_registrations.defer(root, "totals", path, SPEC, RESTORE)

    deferred_registrations.write(root, None)  # a run that was not restored
    deferred_registrations.write(root, {"from": "/snaps/a", "checkpoint_id": 6})
    deferred_registrations.write(str(tmp_path / "other"), {"from": "/snaps/a", "checkpoint_id": 7})
    assert not Path(path).exists()

    deferred_registrations.write(root, {"from": "/snaps/a", "checkpoint_id": 7})
    assert read_json(path) == SPEC
    Path(path).unlink()
    deferred_registrations.write(root, {"from": "/snaps/a", "checkpoint_id": 7})  # once
    assert not Path(path).exists()


def test_a_later_declaration_discards_it(tmp_path: Path) -> None:
    root, path = str(tmp_path), str(tmp_path / "totals.json")
    deferred_registrations.defer(root, "totals", path, SPEC, RESTORE)
    deferred_registrations.discard(root, "totals")  # say, the resume after a refused restore
    deferred_registrations.write(root, {"from": "/snaps/a", "checkpoint_id": 7})
    assert not Path(path).exists()
