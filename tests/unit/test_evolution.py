"""Schema evolution of keyed state on restore: what may change, and the restored values."""

from __future__ import annotations

import pyarrow as pa
import pytest

from barriered.errors import ConfigError
from barriered.statestore.evolution import check_defaults, compare, conform, widens

OLD = pa.schema([("total", pa.int64()), ("count", pa.int32()), ("name", pa.string())])


def test_added_removed_and_widened_fields_are_compatible() -> None:
    new = pa.schema([("total", pa.int64()), ("count", pa.float64()), ("bonus", pa.int64())])
    found = compare(OLD, new)
    assert found.added == ("bonus",) and found.removed == ("name",)
    assert found.widened == (("count", "int32", "double"),)
    assert found.refused == () and found.changed


def test_the_same_schema_is_no_change() -> None:
    assert not compare(OLD, OLD).changed


@pytest.mark.parametrize(
    ("old", "new"),
    [(pa.int64(), pa.int32()), (pa.int64(), pa.float64()), (pa.string(), pa.int64()),
     (pa.float64(), pa.float32()), (pa.int32(), pa.string())],
)  # fmt: skip
def test_narrowing_or_lossy_casts_are_refused_naming_the_field(
    old: pa.DataType, new: pa.DataType
) -> None:
    found = compare(pa.schema([("v", old)]), pa.schema([("v", new)]))
    assert found.refused == (
        f"field 'v' was {old}, now {new}: not a lossless widening, so restored values could "
        "fail to convert or change",
    )
    assert not widens(old, new)


def test_restored_rows_get_defaults_casts_and_lose_removed_fields() -> None:
    stored = pa.table({"user": ["a", "b"], "total": [1, 2], "count": pa.array([3, 4], pa.int32()),
                       "name": ["x", "y"]})  # fmt: skip
    schema = pa.schema(
        [("user", pa.string()), ("total", pa.int64()), ("count", pa.float64()),
         ("bonus", pa.int64()), ("note", pa.string())]
    )  # fmt: skip
    out = conform(stored, schema, {"bonus": 100})
    assert out.schema == schema
    assert out.to_pylist() == [
        {"user": "a", "total": 1, "count": 3.0, "bonus": 100, "note": None},
        {"user": "b", "total": 2, "count": 4.0, "bonus": 100, "note": None},
    ]


def test_defaults_of_unknown_fields_or_wrong_types_are_refused() -> None:
    with pytest.raises(ConfigError, match="state_defaults names 'nope', which is not a field"):
        check_defaults({"nope": 1}, OLD, "op")
    with pytest.raises(ConfigError, match="the default 'many' of field 'total' is not a int64"):
        check_defaults({"total": "many"}, OLD, "op")
    check_defaults({"total": 5, "name": None}, OLD, "op")
