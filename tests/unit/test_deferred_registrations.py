"""A keyed operator's registration is written by the first progress of a run of the
stream it was declared on, not before: a query refused by ``start()`` or by its source
writes nothing, and its rerun's checkpoints wait only for the operators it runs."""

from __future__ import annotations

from pathlib import Path

from barriered.coordinator import deferred_registrations
from barriered.files.fileio import read_json, write_json
from barriered.statestore.stateful_operators import undeclared, unrestored_keyed

SPEC = {"operator": "totals", "partitions": 4}


def test_written_only_by_a_run_of_the_stream_it_was_declared_on(tmp_path: Path) -> None:
    root, path = str(tmp_path), str(tmp_path / "totals.json")
    deferred_registrations.declare(root, "stream-a", "totals", path, SPEC)
    assert not Path(path).exists()

    assert deferred_registrations.start_run(root, "stream-b") == frozenset()
    assert deferred_registrations.start_run(str(tmp_path / "other"), "stream-a") == frozenset()
    assert not Path(path).exists()

    assert deferred_registrations.start_run(root, "stream-a") == {"totals"}
    assert read_json(path) == SPEC
    assert deferred_registrations.start_run(root, None) is None  # a source that did not say


def test_an_unchanged_registration_is_not_rewritten_and_a_later_declaration_wins(
    tmp_path: Path,
) -> None:
    root, path = str(tmp_path), str(tmp_path / "totals.json")
    write_json(path, SPEC)
    before = Path(path).stat().st_mtime_ns
    deferred_registrations.declare(root, "stream-c", "totals", path, SPEC)
    deferred_registrations.start_run(root, "stream-c")
    assert Path(path).stat().st_mtime_ns == before
    wider = {**SPEC, "partitions": 8}
    deferred_registrations.declare(root, "stream-c", "totals", path, wider)
    assert deferred_registrations.start_run(root, "stream-c") == {"totals"}
    assert read_json(path) == wider


def test_a_query_running_fewer_keyed_operators_than_its_stream_declared_is_refused() -> None:
    assert undeclared({"totals"}, 1) is None
    assert undeclared(set(), 0) is None
    assert undeclared({"totals", "numbers"}, 1) == (
        "keyed operators outside the query: barriered.keyed(...).process() declared keyed "
        "operator(s) ['numbers', 'totals'] on the stream this query reads, but the query "
        "runs 1 keyed operator(s): its checkpoints would wait for the others forever. "
        "Declarations belong to the loaded stream: load it again "
        "(spark.readStream...load()) for each query, and declare on it only the operators "
        "that query runs"
    )


def test_a_restore_without_a_keyed_operator_of_its_checkpoint_is_refused() -> None:
    assert unrestored_keyed({"totals"}, {"totals", "numbers"}, "checkpoint 2", "/s") is None
    assert unrestored_keyed({"totals"}, {"numbers"}, "checkpoint 2 of '/s'", "/s") == (
        "restored state without its operator: checkpoint 2 of '/s' holds the state of keyed "
        "operator(s) ['totals'], which the restored query does not run (it runs "
        "['numbers']): that state would be neither restored nor dropped, but carried "
        "unchanged into every later checkpoint. Run the operator in the restored query "
        "(barriered.keyed(...).process(processor, name='totals')), or restore a savepoint "
        "without its state: barriered savepoint transform '/s' -o NEW --operator totals "
        "--where false, then restoreFrom NEW"
    )
