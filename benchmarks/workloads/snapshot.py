"""Snapshot cost: bytes and time per checkpoint when 1%, 10% or 100% of key groups changed.

A ``files`` upstream (one channel, Parquet files) first delivers one record for each of
``keys`` distinct users, so the keyed running count holds ``keys`` keys in 128 key
groups. Then, for each level, a file with one record per chosen key group is dropped in
(the users are picked with the pure-Python port of Spark's ``hash`` in
:mod:`barriered.statestore.key_groups`, so exactly those key groups change) and the
suite waits for the checkpoint that covers it. A changed key group rewrites all its keys
(one Parquet file); an unchanged one acknowledges without writing (incremental
snapshots). The write throughput of a checkpoint (state bytes / end-to-end duration) is
compared with a sequential write of the same bytes to the same folder, flushed with
``fsync``, measured in the same run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from barriered.statestore.acks import write_data_file
from barriered.statestore.key_groups import key_group_for_key
from barriered.statestore.layout import SnapshotLayout
from benchmarks.harness import (
    Context,
    checkpoint_rows,
    configure,
    percentile,
    progress,
    ratio,
    source_offsets,
    start,
    target,
)
from benchmarks.jobs import running_count
from benchmarks.markdown import table

MAX_PARALLELISM = 128
LEVELS = (1, 10, 100)  # percent of key groups changed
SIZES = {
    "full": {"keys": (100_000, 1_000_000, 10_000_000), "repeats": 3},
    "quick": {"keys": (10_000,), "repeats": 2},
}
#: Targets (issue 14): snapshot write speed against a sequential write of the same bytes,
#: and the cut batch against an ordinary batch, when 100% of the key groups changed.
TARGET_WRITE, TARGET_CUT_BATCH = 0.1, 1.5
#: Why a target is missed and what would close it (by target label prefix; RESULTS.md).
WHY_MISSED = {
    "snapshot write / sequential write": "at 10M keys the checkpoint's end-to-end time is "
    "mostly its micro-batch, not its writes: a call keeps its slot's live state as one Arrow "
    "table (8 key groups, ~625k keys here) that goes from Spark's state store to Python and "
    "back at every call, so a batch that touches every slot costs O(state) with or without "
    "a snapshot (see the ordinary batch of the 100% row). The writes alone (zstd Parquet, "
    "one file per key group, on the executor's cores) reach the writer ratio above the "
    "table, against a page-cache write plus fsync. Live state per key (Spark's "
    "transformWithState value or map state) would make the ordinary batch O(changed keys) "
    "and leave the writes.",
    "cut batch / ordinary batch": "the cut batch also writes the changed key groups' "
    "snapshot files inside the keyed operator.",
}
SCHEMA = pa.schema([("user_id", pa.string()), ("amount", pa.int64())])


def users_by_group(keys: int) -> dict[int, list[str]]:
    """``user-0 .. user-{keys-1}`` by key group (Spark's ``hash``, computed in Python)."""
    groups: dict[int, list[str]] = {}
    for i in range(keys):
        user = f"user-{i}"
        groups.setdefault(key_group_for_key((user,), ("string",), MAX_PARALLELISM), []).append(user)
    return groups


def drop_file(folder: Path, name: str, users: list[str]) -> None:
    """Write one record per user as a Parquet file, atomically (rename into place)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"user_id": users, "amount": [1] * len(users)}, schema=SCHEMA)
    pq.write_table(table, folder / f".{name}.tmp")
    os.replace(folder / f".{name}.tmp", folder / f"{name}.parquet")


def wait_for_checkpoint(
    snap: str, position: int, timeout: float, poll: float = 0.3
) -> dict[str, Any]:
    """The first completed checkpoint whose barrier covers ``position`` records (reading
    ``_checkpoints`` every ``poll`` seconds)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for row in checkpoint_rows(snap):
            covered = sum(json.loads(row["barrier_positions"]).values())
            if row["status"] == "completed" and covered >= position:
                return row
        time.sleep(poll)
    raise TimeoutError(f"no checkpoint covered position {position} within {timeout:.0f} s")


def writer_speed(snap: str, scratch: str) -> dict[str, Any]:
    """MB/s of the keyed operator's snapshot writer alone on the full state.

    Every key group's state (its Arrow table, as the operator holds it) is written with
    :func:`barriered.statestore.acks.write_data_file`, the call a changed key group makes
    at a cut, into a scratch table: the bytes over the time of those writes.
    """
    table = DeltaTable(SnapshotLayout.configured(snap).state_table)
    data = table.to_pyarrow_table()
    groups = [
        data.filter(pc.equal(data["key_group"], kg)).drop_columns(["operator", "key_group"])
        for kg in sorted(set(data["key_group"].to_pylist()))
    ]
    began = time.perf_counter()
    written = [
        write_data_file(scratch, {"operator": "o", "key_group": str(i)}, "bench", g, ("user_id",))
        for i, g in enumerate(groups)
    ]
    seconds = time.perf_counter() - began
    size = sum(f.size for f in written)
    return {"bytes": size, "files": len(written), "ms": round(seconds * 1000, 1),
            "mb_s": round(size / 1e6 / seconds, 1)}  # fmt: skip


def sequential_write(folder: str, size: int, repeats: int = 3) -> float:
    """MB/s of writing ``size`` bytes to one new file in ``folder`` (write, fsync, close)."""
    data = os.urandom(max(size, 1))
    times = []
    for i in range(repeats):
        path = os.path.join(folder, f"sequential-{i}.bin")
        began = time.perf_counter()
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        times.append(time.perf_counter() - began)
        os.remove(path)
    return len(data) / 1e6 / (percentile(times, 50) or 1e-9)


def state_size(snap: str) -> dict[str, int]:
    """Files, bytes and rows of the state table's latest version."""
    table = DeltaTable(SnapshotLayout.configured(snap).state_table)
    files = [uri.removeprefix("file://") for uri in table.file_uris()]
    return {
        "files": len(files),
        "bytes": sum(os.path.getsize(f) for f in files),
        "rows": table.to_pyarrow_table(columns=["checkpoint_id"]).num_rows,
    }


def _measure(row: dict[str, Any], cut_ms: dict[int, int]) -> dict[str, Any]:
    return {
        "checkpoint_id": row["checkpoint_id"],
        "state_bytes": row["state_bytes"],
        "state_rows": row["state_rows"],
        "end_to_end_ms": row["end_to_end_duration_ms"],
        "cut_batch_ms": cut_ms.get(row["cut_batch_id"]),
    }


def _one_size(ctx: Context, keys: int, repeats: int) -> dict[str, Any]:
    """Load ``keys`` keys, then change 1%, 10% and 100% of the key groups; the costs."""
    groups = users_by_group(keys)
    snap, data = ctx.path(f"snap-{keys}"), ctx.workdir / f"data-{keys}" / "c0"
    drop_file(data, "00-load", [u for users in groups.values() for u in users])
    position = keys
    options = {
        "upstream": "files",
        "path": str(data.parent),
        "format": "parquet",
        "channelBy": "folder",
        "schema": "user_id string, amount long",
    }
    query = start(running_count(ctx.spark, snap, options), ctx.path(f"ck-{keys}"))
    try:
        load = wait_for_checkpoint(snap, position, timeout=900)
        ctx.emit(f"  loaded {keys} keys: checkpoint {load['checkpoint_id']}")
        levels: dict[str, Any] = {}
        seen_before = {p["batchId"] for p in progress(query)}
        for pct in LEVELS:
            chosen = sorted(groups)[: max(1, round(MAX_PARALLELISM * pct / 100))]
            rows = []
            for r in range(repeats):
                drop_file(data, f"{pct:03d}-{r}", [groups[g][r % len(groups[g])] for g in chosen])
                position += len(chosen)
                rows.append(wait_for_checkpoint(snap, position, timeout=300))
            batches = progress(query)
            cut_ms = {p["batchId"]: p["batchDuration"] for p in batches}
            seen = {p["batchId"] for p in batches}
            levels[f"{pct}%"] = {
                "key_groups_changed": len(chosen),
                "checkpoints": [_measure(row, cut_ms) for row in rows],
                "ordinary_batch_ms": _ordinary_batches(batches, seen_before),
            }
            seen_before = seen
            ctx.emit(f"  {keys} keys, {pct}%: {[row['state_bytes'] for row in rows]} bytes")
    finally:
        query.stop()
    full = state_size(snap)
    writer = writer_speed(snap, ctx.path(f"writer-{keys}"))
    writer["sequential_mb_s"] = round(sequential_write(snap, writer["bytes"]), 1)
    writer["ratio"] = ratio(writer["mb_s"], writer["sequential_mb_s"])
    for level in levels.values():
        points = level["checkpoints"]
        level["state_bytes_p50"] = percentile([c["state_bytes"] for c in points], 50)
        level["end_to_end_ms_p50"] = percentile([c["end_to_end_ms"] for c in points], 50)
        level["cut_batch_ms_p50"] = percentile(
            [c["cut_batch_ms"] for c in points if c["cut_batch_ms"] is not None], 50
        )
        level["snapshot_mb_s"] = round(
            level["state_bytes_p50"] / 1e6 / (level["end_to_end_ms_p50"] / 1000), 3
        )
        level["sequential_mb_s"] = round(sequential_write(snap, level["state_bytes_p50"]), 1)
        level["throughput_ratio"] = ratio(
            level["snapshot_mb_s"], level["sequential_mb_s"], digits=5
        )
        level["ordinary_batch_ms_p50"] = percentile(level["ordinary_batch_ms"], 50)
        level["cut_over_ordinary"] = ratio(
            level["cut_batch_ms_p50"], level["ordinary_batch_ms_p50"], digits=2
        )
    return {"full_state": full, "levels": levels, "writer": writer}


def run(ctx: Context) -> dict[str, Any]:
    """Each size in turn; the targets on the largest."""
    size = SIZES["quick" if ctx.quick else "full"]
    configure(
        ctx.spark,
        {"checkpointInterval": "1s", "maxParallelism": str(MAX_PARALLELISM)},
    )
    sizes = {str(keys): _one_size(ctx, keys, size["repeats"]) for keys in size["keys"]}
    largest = max(size["keys"])
    whole = sizes[str(largest)]["levels"]["100%"]
    targets = {
        **target(
            f"snapshot write / sequential write (100%, {largest:,} keys) >= {TARGET_WRITE}",
            whole["throughput_ratio"],
            TARGET_WRITE,
            at_least=True,
        ),
        **target(
            f"cut batch / ordinary batch (100%, {largest:,} keys) <= {TARGET_CUT_BATCH}",
            whole["cut_over_ordinary"],
            TARGET_CUT_BATCH,
            at_least=False,
        ),
    }
    return {
        "params": {"keys": list(size["keys"]), "max_parallelism": MAX_PARALLELISM, **size},
        "results": {"sizes": sizes},
        "targets": targets,
    }


def _ordinary_batches(batches: list[dict[str, Any]], before: set[int]) -> list[int]:
    """Durations of this level's batches that delivered records and cut no checkpoint
    (the same changed keys, without a snapshot): what a cut batch is compared with."""
    out = []
    for p in batches:
        start_offset, end_offset = source_offsets(p)
        if p["batchId"] in before or start_offset is None or end_offset.cut is not None:
            continue
        if sum(end_offset.positions) > sum(start_offset.positions):
            out.append(p["batchDuration"])
    return out


def markdown(record: dict[str, Any]) -> str:
    """The snapshot-cost section of RESULTS.md."""
    sizes = record["results"]["sizes"]
    rows = [
        [
            f"{int(keys):,}",
            f"{pct} ({level['key_groups_changed']})",
            level["state_bytes_p50"],
            level["end_to_end_ms_p50"],
            level["cut_batch_ms_p50"],
            level["snapshot_mb_s"],
            level["sequential_mb_s"],
            level["throughput_ratio"],
            level.get("ordinary_batch_ms_p50"),
            level.get("cut_over_ordinary"),
        ]
        for keys, one in sizes.items()
        for pct, level in one["levels"].items()
    ]
    states = "; ".join(
        f"{int(keys):,} keys: {one['full_state']['bytes']:,} bytes in "
        f"{one['full_state']['files']} files"
        for keys, one in sizes.items()
    )
    writers = "; ".join(
        f"{int(keys):,} keys: {one['writer']['mb_s']} MB/s against "
        f"{one['writer']['sequential_mb_s']} MB/s sequential, ratio {one['writer']['ratio']}"
        for keys, one in sizes.items()
    )
    return "\n".join(
        [
            f"{record['params']['max_parallelism']} key groups; full state: {states}.",
            "",
            "The snapshot writer alone (every key group's Arrow table through the operator's "
            f"Parquet writer): {writers}. The table's ratio divides by the end-to-end "
            "duration, which includes the whole cut micro-batch.",
            "",
            table(
                [
                    "keys",
                    "key groups changed",
                    "state bytes written p50",
                    "end-to-end ms p50",
                    "cut batch ms p50",
                    "snapshot MB/s",
                    "sequential MB/s (fsync)",
                    "ratio",
                    "ordinary batch ms p50",
                    "cut / ordinary batch",
                ],
                rows,
            ),
        ]
    )
