"""The executor's local cache of state files: keys hash alike whatever their chunking,
a lookup finds exactly the keys held (hash collisions included), the folder stays
within its budget, and a unit that alone exceeds it is refused naming the setting."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from barriered.errors import KeyedStateError
from barriered.statestore.state_cache import (
    HASH,
    POS,
    StateCache,
    Unit,
    build_unit,
    key_hashes,
)


def test_equal_keys_hash_alike_whatever_their_arrow_form() -> None:
    one = pa.table({"k": ["a", "b", None, "a"], "n": [1, 2, 3, 1]})
    chunked = pa.Table.from_batches(one.to_batches(max_chunksize=1))
    as_dictionary = one.set_column(0, "k", one["k"].dictionary_encode())
    large = one.set_column(0, "k", one["k"].cast(pa.large_string()))
    expected = key_hashes(one, ["k", "n"])
    for other in (chunked, as_dictionary, large):
        assert key_hashes(other, ["k", "n"]).tolist() == expected.tolist()
    assert expected[0] == expected[3] and len(set(expected[:3].tolist())) == 3
    floats = pa.table({"x": [0.0, -0.0, float("nan"), float("nan")]})
    hashes = key_hashes(floats, ["x"])
    assert hashes[0] == hashes[1] and hashes[2] == hashes[3]
    order = pa.table({"a": [1, 2], "b": [2, 1]})  # the column order matters
    assert key_hashes(order, ["a", "b"])[0] != key_hashes(order, ["b", "a"])[0]


def test_a_lookup_finds_exactly_the_keys_held_even_when_hashes_collide() -> None:
    table = pa.table({"k": ["a", "b", "c", "d"], "v": [1, 2, 3, 4]})
    unit = build_unit(table, ["k"])
    # two keys of the unit forced to one hash: both stay findable, by their value
    forced = unit.column(HASH).to_numpy().copy()
    forced[:] = np.sort(forced)
    forced[1] = forced[2]
    collided = Unit(unit.set_column(unit.schema.get_field_index(HASH), HASH, pa.array(forced)))
    wanted = collided.table.select(["k"]).take([2, 1, 0])
    query, here = collided.find(forced[[2, 1, 0]], wanted, ["k"])
    found = dict(zip(query.tolist(), collided.table["k"].take(here).to_pylist(), strict=True))
    assert found == {
        0: wanted["k"][0].as_py(),
        1: wanted["k"][1].as_py(),
        2: wanted["k"][2].as_py(),
    }
    missing = pa.table({"k": ["zz"]})
    assert Unit(unit).find(key_hashes(missing, ["k"]), missing, ["k"])[0].tolist() == []
    positions = Unit(unit).table[POS].to_pylist()
    assert sorted(positions) == [0, 1, 2, 3]  # each row keeps its row in the file


def test_the_cache_stays_within_its_budget_and_refuses_a_unit_larger_than_it(
    tmp_path: Path,
) -> None:
    unit = build_unit(pa.table({"k": [f"key-{i}" for i in range(2000)]}), ["k"])
    cache = StateCache(str(tmp_path / "cache"), budget=unit.nbytes * 3, setting="x.size")
    for i in range(8):
        cache.put(f"file-{i}", "all", unit)
    cache.flush()  # written on the cache's thread
    cache.evict()
    sizes = [p.stat().st_size for p in (tmp_path / "cache").rglob("*.arrow")]
    assert sum(sizes) <= unit.nbytes * 3 and len(sizes) >= 1
    # the newest stays; an evicted one is built again from its file on use
    assert cache.unit("file-7", "all", lambda: pytest.fail("rebuilt")).table.num_rows == 2000
    rebuilt = cache.unit("file-0", "all", lambda: unit)
    assert rebuilt.table.num_rows == 2000
    small = StateCache(str(tmp_path / "small"), budget=100, setting="x.size")
    with pytest.raises(KeyedStateError, match=r"more than x\.size=100: raise it"):
        small.put("big", "all", unit)
    assert not os.path.exists(tmp_path / "small")  # nothing was written
