"""Keyed processors of the contract tests (importable by Spark's Python workers): one
keeping a state field of every type Delta stores, and processors breaking the contract."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pandas as pd

from barriered.examples import RunningTotals

#: One state field of every type Spark SQL offers that Delta stores, with its value.
EVERY_TYPE: list[tuple[str, str, Any]] = [
    ("i", "int", 7),
    ("b", "boolean", True),
    ("f", "double", 1.5),
    ("s", "string", "text"),
    ("bin", "binary", b"\x00\x01"),
    ("d", "date", dt.date(2026, 1, 2)),
    ("ts", "timestamp", dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc)),
    ("ntz", "timestamp_ntz", dt.datetime(2026, 1, 2, 3, 4, 5, 6)),
    ("dec", "decimal(12,3)", Decimal("123456789.125")),
    ("arr", "array<bigint>", [1, 2, 3]),
    ("m", "map<string,bigint>", {"x": 1, "y": 2}),
    ("st", "struct<n:bigint,tags:array<string>>", {"n": 4, "tags": ["p", "q"]}),
]
VALUES = {n: v for n, _, v in EVERY_TYPE}


class KeepsEveryType:
    """Per key: stores VALUES the first time, then emits whether its state still equals
    them (``seen``)."""

    state_schema = ", ".join(f"{n} {t}" for n, t, _ in EVERY_TYPE)
    output_schema = "user_id string, seen boolean"

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: Any) -> pd.DataFrame:
        seen = state.get()
        state.update(VALUES if seen is None else seen)
        return pd.DataFrame({"user_id": [key[0]], "seen": [seen == VALUES]})


class KeepsEveryTypeBatch(KeepsEveryType):
    """The vectorized form: hands the state it is given back unchanged (VALUES if none)."""

    def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
        keys = pd.DataFrame({"user_id": rows["user_id"].unique()})
        new = keys.merge(state, on="user_id", how="left")
        fresh = ~new["user_id"].isin(state["user_id"])
        for name, value in VALUES.items():
            new[name] = [value if f else v for f, v in zip(fresh, new[name], strict=True)]
        return keys.assign(seen=~fresh.to_numpy()), new


class ReturnsNone(RunningTotals):
    """Forgets to return."""

    def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
        super().process_batch(rows, state)


class DropsTotal(RunningTotals):
    """Misspells an output column: ``total`` would be committed NULL."""

    def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
        output, new = super().process_batch(rows, state)
        return output.rename(columns={"total": "totl"}), new


class KeepsKeysTwice(RunningTotals):
    """Appends the new state to the old: every key of the batch twice."""

    def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
        output, new = super().process_batch(rows, state)
        return output, pd.concat([state, new], ignore_index=True)


class TextTotals(RunningTotals):
    """Keeps a string in a ``long`` state field."""

    def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
        output, new = super().process_batch(rows, state)
        return output, new.assign(total="many")


class PerKeyReturnsDict:
    """A per-key processor returning a dict as its output."""

    state_schema = "total long, count long"
    output_schema = "user_id string, total long"

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: Any) -> Any:
        state.update({"total": 1, "count": 1})
        return {"user_id": key[0], "total": 1}


class PerKeyForgetsCount(PerKeyReturnsDict):
    """A per-key processor updating its state without the field ``count``."""

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: Any) -> Any:
        state.update({"total": 1})


class TotalsWithBonus:
    """RunningTotals that gained a state field: ``bonus`` counts a key's records (its value
    in restored state without it: ``state_defaults``, or what a transform put there)."""

    state_schema = "total long, count long, bonus long"
    output_schema = "user_id string, total long"
    state_defaults = {"bonus": 100}

    def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
        amounts = rows.groupby("user_id", sort=False)["amount"]
        batch = pd.DataFrame({"total": amounts.sum(), "count": amounts.size()})
        batch["bonus"] = batch["count"]
        before = state.set_index("user_id")[["total", "count", "bonus"]]
        new = batch.add(before, fill_value=0).astype("int64").rename_axis("user_id")
        new = new.reset_index()
        return new[["user_id", "total"]], new


class TotalsOnly:
    """RunningTotals that lost its ``count`` state field."""

    state_schema = "total long"
    output_schema = "user_id string, total long"

    def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
        batch = rows.groupby("user_id", sort=False)["amount"].sum().to_frame("total")
        before = state.set_index("user_id")[["total"]]
        new = batch.add(before, fill_value=0).astype("int64").rename_axis("user_id")
        return new.reset_index(), new.reset_index()


class TotalsAsText:
    """RunningTotals whose ``total`` became a string: not a lossless widening."""

    state_schema = "total string, count long"
    output_schema = "user_id string, total string"

    def process_batch(self, rows: pd.DataFrame, state: pd.DataFrame) -> Any:
        raise AssertionError("never runs: the restore is refused")


class NoDefaultBonus(TotalsWithBonus):
    """TotalsWithBonus restoring a state that already has ``bonus`` (a transform's)."""

    state_defaults: dict[str, int] = {}
