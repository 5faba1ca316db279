"""Entries of the live keyed state: rows with a key hash (:data:`HASH`), a key group and
whether they mark a deleted key (:data:`GONE`); merged newest first, compared, selected by
key group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from barriered.statestore.state_cache import HASH, keys_equal
from barriered.statestore.state_files import KEY_GROUP


def newest_first(tables: Sequence[pa.Table], columns: Sequence[str]) -> pa.Table:
    """One row per key of ``tables`` (each with :data:`HASH`, one schema): the row of
    the earliest table holding it (tables are given newest first)."""
    table = pa.concat_tables(tables).combine_chunks()
    rank = np.concatenate([np.full(t.num_rows, i, np.int32) for i, t in enumerate(tables)])
    hashes = table[HASH].to_numpy()
    order = np.lexsort((rank, hashes))
    ordered = hashes[order]
    later = np.flatnonzero(ordered[1:] == ordered[:-1]) + 1
    drop = np.zeros(len(order), bool)
    if len(later):
        same = keys_equal(
            table.take(pa.array(order[later])), table.take(pa.array(order[later - 1])), columns
        )
        drop[later[same]] = True
        for h in np.unique(ordered[later[~same]]):  # a hash collision: compare by value
            seen: set[tuple[Any, ...]] = set()
            for i in np.flatnonzero(ordered == h):
                key = tuple(table[c][int(order[i])].as_py() for c in columns)
                drop[i] = key in seen
                seen.add(key)
    return table.take(pa.array(order[~drop]))


def unchanged(new: pa.Table, old: pa.Table, fields: Sequence[str]) -> np.ndarray:
    """Per row, whether ``new`` holds the same state as ``old`` (rows compared pairwise;
    a nested field counts as changed)."""
    same = np.ones(new.num_rows, bool)
    for name in fields:
        a, b = new[name], old[name]
        if pa.types.is_nested(a.type) or a.type != b.type:
            return np.zeros(new.num_rows, bool)
        equal = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b)).to_numpy(zero_copy_only=False)
        same &= equal | both_null
    return same


def with_columns(table: pa.Table, columns: Mapping[str, pa.Array]) -> pa.Table:
    """``table`` with ``columns`` appended."""
    for name, values in columns.items():
        table = table.append_column(name, values)
    return table


def in_groups(entries: pa.Table, low: int, high: int) -> pa.Table:
    """The entries of key groups ``low..high`` (their order kept)."""
    groups = entries[KEY_GROUP].to_numpy()
    inside = (groups >= low) & (groups <= high)
    return entries if inside.all() else entries.filter(pa.array(inside))
