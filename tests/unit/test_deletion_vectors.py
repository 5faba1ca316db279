"""Delta deletion vectors written here (delta-rs reads them, does not write them): the
bytes round-trip, and delta-rs reads a table whose ``add`` actions carry them exactly."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from barriered.errors import SnapshotStoreError
from barriered.statestore.deletion_vectors import (
    MAGIC,
    DeletionVector,
    contains,
    deserialize,
    serialize,
    union,
    z85_decode,
    z85_encode,
)


def test_z85_matches_the_zeromq_reference_vector() -> None:
    # the example of the Z85 specification (ZeroMQ RFC 32)
    data = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(data) == "HelloWorld"
    assert z85_decode("HelloWorld", 8) == data
    assert z85_decode(z85_encode(b"abcde"), 5) == b"abcde"  # padded, then cut


@settings(max_examples=150, deadline=None)
@given(st.sets(st.integers(0, 3 * 65536 + 10), max_size=600), st.integers(0, 2))
def test_rows_round_trip(rows: set[int], dense_chunks: int) -> None:
    values = set(rows)
    for chunk in range(dense_chunks):  # > 4096 in one chunk: a bitmap container
        values |= set(range(chunk * 65536, chunk * 65536 + 5000, 1))
    expected = np.array(sorted(values), np.int64)
    assert deserialize(serialize(expected)).tolist() == expected.tolist()


def test_rows_above_two_to_the_32_use_a_second_bitmap() -> None:
    rows = np.array([1, 7, (1 << 32) + 3], np.int64)
    data = serialize(rows)
    assert struct.unpack_from("<iq", data) == (MAGIC, 2)
    assert deserialize(data).tolist() == rows.tolist()


def test_run_containers_are_read() -> None:
    """CRoaring's run container (Spark writes them after runOptimize): rows 10..14, 100."""
    runs = struct.pack("<I", 12347 | (0 << 16)) + bytes([1])  # one container, a run one
    runs += struct.pack("<HH", 0, 5)  # key 0, cardinality 6
    runs += struct.pack("<HHHHH", 2, 10, 4, 100, 0)  # 2 runs: 10+4, 100+0
    data = struct.pack("<iq", MAGIC, 1) + struct.pack("<I", 0) + runs
    assert deserialize(data).tolist() == [10, 11, 12, 13, 14, 100]


def test_a_damaged_inline_vector_is_refused_naming_it() -> None:
    dv = DeletionVector.inline(np.array([1, 2], np.int64))
    wrong = DeletionVector(dv.storage_type, dv.path_or_inline_dv, dv.size_in_bytes, 3)
    with pytest.raises(SnapshotStoreError, match="holds 2 rows, its descriptor says 3"):
        wrong.rows()
    with pytest.raises(SnapshotStoreError, match="cannot be read"):
        DeletionVector("i", "00000", 4, 1).rows()


def test_union_is_sorted_and_distinct() -> None:
    assert union(np.array([5, 1]), np.array([1, 9]), np.array([], np.int64)).tolist() == [1, 5, 9]


def test_delta_rs_reads_a_table_with_inline_deletion_vectors(tmp_path: Path) -> None:
    """The descriptor and bytes written here are what delta-rs (delta-kernel) applies:
    the rows it returns are exactly the file's rows minus the deleted ones."""
    uri = str(tmp_path / "t")
    n = 200_000
    write_deltalake(
        uri,
        pa.table({"k": np.arange(n)}),
        configuration={"delta.enableDeletionVectors": "true"},
    )
    add = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()[0]
    rng = np.random.default_rng(7)
    deleted = np.unique(
        np.concatenate([rng.integers(0, n, 3000), np.arange(70_000, 140_000)])
    )  # array containers and bitmap containers
    dv = DeletionVector.inline(deleted)
    now = int(time.time() * 1000)
    actions = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE", "operationParameters": {}}},
        {"remove": {"path": add["path"], "deletionTimestamp": now, "dataChange": True}},
        {
            "add": {
                "path": add["path"],
                "partitionValues": {},
                "size": add["size_bytes"],
                "modificationTime": now,
                "dataChange": True,
                "stats": json.dumps({"numRecords": n}),
                "deletionVector": dv.to_json(),
            }
        },
    ]
    (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").write_text(
        "\n".join(json.dumps(a) for a in actions) + "\n"
    )
    table = DeltaTable(uri)
    kept = np.sort(pa.table(table.scan().read_all())["k"].to_numpy())
    assert kept.tolist() == np.setdiff1d(np.arange(n), deleted).tolist()
    assert DeletionVector.from_json(dv.to_json()).rows().tolist() == deleted.tolist()


def test_contains_answers_as_isin_does() -> None:
    rng = np.random.default_rng(3)
    for size in (0, 1, 7, 5000):
        rows = np.unique(rng.integers(0, 20_000, size))
        values = rng.integers(-5, 20_005, 3000)
        assert (contains(rows, values) == np.isin(values, rows)).all()
