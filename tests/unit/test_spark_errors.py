"""A barriered error raised in a Spark Python worker reaches the user first (no Spark):
the texts are Spark 4.3's, as a query and a load on a local session raised them."""

from __future__ import annotations

import pytest

from barriered.errors import BarrieredError, ConfigError, ProcessorError, unwrapped

PROCESSOR = (
    "processor Bad (operator 'bad'): process_batch() returned output that lacks output "
    "column(s) ['total']. The contract: process_batch(rows, state) returns a tuple"
)
STREAM_FAILED = (
    "[STREAM_FAILED] Query [id = d391e697, runId = c16a6118] terminated with exception: "
    "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most "
    'recent call last):\n  File "/x/barriered/statestore/contract.py", line 105, in '
    f"check_output\n    raise self.error(\nbarriered.errors.ProcessorError: {PROCESSOR}\n"
    " SQLSTATE: 38000 SQLSTATE: XXKST\n=== Streaming Query ===\nIdentifier: [id = d391e697]\n"
)
MISSING = "upstream option 'path': directory '/tmp/t/nope' does not exist; create it"
DATA_SOURCE_ERROR = (
    "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback "
    '(most recent call last):\n  File "/x/barriered/datasource/source.py", line 92, in '
    f"schema\n    settings, upstream, layout, point = self._setup()\n"
    f"barriered.errors.ConfigError: {MISSING}\n SQLSTATE: 38000"
)


class SparkError(Exception):
    """Stands for pyspark's captured exceptions: only their text matters here."""


def raise_in_spark(text: str) -> None:
    with unwrapped():
        raise SparkError(text)


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [(STREAM_FAILED, ProcessorError, PROCESSOR), (DATA_SOURCE_ERROR, ConfigError, MISSING)],
)
def test_the_barriered_error_comes_first(
    text: str, kind: type[BarrieredError], message: str
) -> None:
    with pytest.raises(kind) as raised:
        raise_in_spark(text)
    lines = str(raised.value).splitlines()
    assert lines[0] == message
    assert lines[2] == "Spark's error, SparkError: " + text.splitlines()[0]
    assert isinstance(raised.value.spark_error, SparkError)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_other_errors_pass_unchanged() -> None:
    with pytest.raises(SparkError, match="STREAM_FAILED"):
        raise_in_spark("[STREAM_FAILED] ... ZeroDivisionError: division by zero")
    with pytest.raises(ConfigError) as raised, unwrapped():
        raise ConfigError("already ours")
    assert str(raised.value) == "already ours" and raised.value.spark_error is None


def test_an_unknown_barriered_name_is_a_barriered_error() -> None:
    with pytest.raises(BarrieredError) as raised:
        raise_in_spark("x\nbarriered.errors.NoSuchError: gone\n")
    assert type(raised.value) is BarrieredError and str(raised.value).startswith("gone\n")
