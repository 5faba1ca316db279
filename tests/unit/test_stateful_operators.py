"""Which state operators of a query's progress make a barriered query refused."""

from __future__ import annotations

from barriered.statestore.stateful_operators import (
    KEYED_OPERATOR,
    MESSAGE_PREFIX,
    RESTORE_PREFIX,
    refusal,
    unrestored,
)


def test_only_the_registered_keyed_operators_pass() -> None:
    assert refusal([], 0) is None
    assert refusal([KEYED_OPERATOR], 1) is None
    assert refusal([KEYED_OPERATOR, KEYED_OPERATOR], 2) is None


def test_a_spark_operator_is_named_with_what_to_do() -> None:
    message = refusal([KEYED_OPERATOR, "dedupe"], 1)
    assert message is not None and message.startswith(MESSAGE_PREFIX)
    assert "the query runs dropDuplicates() (dedupe), whose state lives only in" in message
    assert "barriered.keyed(df, *keys).process(processor)" in message


def test_more_apply_in_pandas_with_state_operators_than_keyed_ones_are_refused() -> None:
    assert KEYED_OPERATOR == "applyInPandasWithState"
    message = refusal([KEYED_OPERATOR, KEYED_OPERATOR, KEYED_OPERATOR], 1)
    assert message is not None
    assert "applyInPandasWithState() not made by barriered.keyed() " in message
    assert f"({KEYED_OPERATOR} x2)" in message


def test_every_foreign_operator_is_listed_and_unknown_names_kept() -> None:
    message = refusal(["symmetricHashJoin", "stateStoreSave", "someFutureOp"], 0)
    assert message is not None
    assert "a stream-stream join (symmetricHashJoin)" in message
    assert "(stateStoreSave)" in message and "someFutureOp (someFutureOp)" in message


def test_operators_captured_by_the_provider_pass_the_others_do_not() -> None:
    assert (
        refusal(["stateStoreSave", "symmetricHashJoin"], 0, ["stateStoreSave", "symmetricHashJoin"])
        is None
    )
    message = refusal(["stateStoreSave", "dedupe"], 0, ["stateStoreSave"])
    assert message is not None
    assert "dropDuplicates() (dedupe)" in message and "stateStoreSave" not in message
    assert "barriered.with_state_store(SparkSession.builder)" in message
    assert "Databricks serverless or standard access mode" in message


def test_a_restored_query_lacking_a_stored_operator_is_refused_naming_its_stores() -> None:
    stores = ["0-default", "1-left-keyToNumValues", "1-left-keyWithIndexToValue"]
    message = unrestored(stores, 1, "checkpoint 4 of /snap")
    assert message is not None and message.startswith(RESTORE_PREFIX)
    assert "checkpoint 4 of /snap holds the state of store(s) 1-left-keyToNumValues, " in message
    assert "0-default" not in message and "runs 1 stateful operator(s)" in message
    assert unrestored(stores, 2, "c") is None
    assert "0-default" in (unrestored(["0-default"], 0, "c") or "")
    assert unrestored([], 0, "c") is None
