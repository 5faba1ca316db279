"""Keyed state at scale: what a batch, a cut, a checkpoint's write and a restore cost as
the state grows (100k, 1M, 10M keys and the largest size this machine holds).

For each size a ``files`` upstream (one channel, Parquet files) first delivers one record
for each of ``keys`` distinct users, at most :data:`SEED_BATCH` per micro-batch, so the
keyed running count holds ``keys`` keys in 128 key groups. Then, for each level, files
are dropped in and the suite waits for the checkpoint that covers them:

* ``1%``, ``10%``, ``100%``: one record for each of 1, 13 and 128 key groups (users
  picked with the pure-Python port of Spark's ``hash``, so exactly those key groups
  change): a batch touches every key group's partition at 100%, with the same input at
  every size. Its ordinary batches (records, no cut) against the cut batches, and the
  ordinary batches of one size against another's, are the figures: a batch must cost
  what it touches, not the state;
* ``bulk``: one record for each of a tenth of the keys (at most 1M): the changed state's
  bytes (its rows as Arrow holds them in memory; the zstd Parquet files are ~5x smaller)
  over the longest time a task took to write them (``state_write_ms``: merge, encode,
  write, cache) against a sequential write (and ``fsync``) of as many bytes to the same
  disk.

After the levels, a restore of the latest checkpoint into a new checkpoint location, with
the seeding run's shuffle partitions (``same``) and with others (``other``), after one
more record per key group: its first micro-batch, against the same first batch of the
largest size. The files the operator wrote are counted per partition and checkpoint, and
the Python workers' largest private resident memory (``RssAnon``: the cache's mapped files
are the kernel's to drop, not the worker's) is sampled while the size runs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from barriered.statestore.key_groups import key_group_for_key
from barriered.statestore.layout import SnapshotLayout
from benchmarks.harness import (
    Context,
    checkpoint_rows,
    configure,
    percentile,
    progress,
    ratio,
    run_until,
    source_offsets,
    start,
    target,
)
from benchmarks.jobs import OPERATOR, running_count
from benchmarks.markdown import table

MAX_PARALLELISM = 128
LEVELS = (1, 10, 100)  # percent of key groups changed
SIZES: dict[str, dict[str, Any]] = {
    "full": {"keys": (100_000, 1_000_000, 10_000_000, 100_000_000), "repeats": 3},
    "quick": {"keys": (10_000, 100_000), "repeats": 2},
}
#: Records per micro-batch while the state is seeded (and rows per seed file).
SEED_BATCH = 2_000_000
SEED_PARTITIONS, RESTORE_PARTITIONS = 2, 3
#: Targets (issue 37), on the 10M-key and the largest size.
TARGET_SIZE_10M, TARGET_SIZE_LARGEST = 1.3, 1.5
TARGET_CUT_1, TARGET_CUT_100 = 1.2, 1.5
TARGET_WRITE, TARGET_FILES, TARGET_RESTORE = 0.25, 3, 1.5
#: Why a target is missed and what would close it (by target label prefix; RESULTS.md).
WHY_MISSED = {
    "changed bytes written": "a task's write at a cut is the changes merged in key-hash "
    "order and encoded as zstd Parquet in one Python thread, against a sequential write of "
    "raw bytes; of ~170 ms per 500k changed rows, ~45 ms was the zstd encode and ~40 ms the "
    "copy into the machine's cache (run 20261128T230451Z). The copy runs on the cache's "
    "own thread since (not measured in Spark yet); row groups of 8,192 rows cost the "
    "encode about 15% more.",
    "restore, first batch": "'same' is the first restore in the session's Python workers: "
    "no footer, deletion vector or chunk of the restored files is known to the process or "
    "cached on the machine; 'other' runs second and finds them. Deletion vectors in files "
    "(run 20261129T083726Z: manifest and log entries of kilobytes, not megabytes) brought "
    "'other' from 1.64 to 1.23 and 'same' from 4.98 to 4.43. py-spy on a cold restore at "
    "10M keys found 42% of the workers' time hashing whole chunks the first batch touched "
    "once (a chunk was cached whole once a batch read half its row groups); since, a chunk "
    "is read row group by row group, hashing only the rows that may hold the batch's keys, "
    "until as many row groups as it has were read (not yet measured here at 100M). What "
    "still grows with the state on a cold machine: the footers of the restored files "
    "(1.6-2.2 MB each for 4-6k row groups at 100M keys, 380 ms for all 72 files in one "
    "process) and the row groups read per key and file.",
}
SCHEMA = pa.schema([("user_id", pa.string()), ("amount", pa.int64())])


def users_by_group(users: int = 20_000) -> dict[int, list[str]]:
    """``user-0 .. user-{users-1}`` by key group (Spark's ``hash``, computed in Python):
    enough users for every level, and in the state at every size."""
    groups: dict[int, list[str]] = {}
    for i in range(users):
        user = f"user-{i}"
        groups.setdefault(key_group_for_key((user,), ("string",), MAX_PARALLELISM), []).append(user)
    return groups


def user_names(first: int, end: int, step: int = 1) -> pa.Array:
    """``user-<i>`` for ``i`` in ``range(first, end, step)`` (vectorized)."""
    numbers = pc.cast(pa.array(np.arange(first, end, step, dtype=np.int64)), pa.string())
    return pc.binary_join_element_wise("user-", numbers, "")


def drop_table(folder: Path, name: str, users: pa.Array) -> None:
    """Write one record per user as a Parquet file, atomically (rename into place)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"user_id": users, "amount": pa.array(np.ones(len(users), np.int64))})
    pq.write_table(table.cast(SCHEMA), folder / f".{name}.tmp")
    os.replace(folder / f".{name}.tmp", folder / f"{name}.parquet")


def drop_file(folder: Path, name: str, users: list[str]) -> None:
    """Write one record per user in ``users`` as a Parquet file, atomically."""
    drop_table(folder, name, pa.array(users, pa.string()))


def state_table_rows(users: pa.Array) -> pa.Table:
    """The ``state`` table's rows of ``users`` as the operator holds them in memory (key,
    count, key group, checkpoint id): the changed state's bytes, whatever the files'
    compression makes of them."""
    n = len(users)
    return pa.table(
        {
            "user_id": users,
            "count": pa.array(np.ones(n, np.int64)),
            "key_group": pa.array(np.zeros(n, np.int32)),
            "checkpoint_id": pa.array(np.zeros(n, np.int64)),
        }
    )


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


def state_files(snap: str) -> dict[str, Any]:
    """The operator's state files on disk: how many, their bytes, and the most any
    partition wrote for one checkpoint (names ``p<partition>-c<checkpoint>-<uuid>``)."""
    folder = Path(SnapshotLayout.configured(snap).state_table, f"operator={OPERATOR}")
    per_cut: dict[tuple[str, str], int] = {}
    size = 0
    for path in folder.glob("*.parquet"):
        partition, cut, _ = path.name.split("-", 2)
        per_cut[(partition, cut)] = per_cut.get((partition, cut), 0) + 1
        size += path.stat().st_size
    return {
        "files": sum(per_cut.values()),
        "bytes": size,
        "max_per_partition_and_checkpoint": max(per_cut.values(), default=0),
    }


def _python_rss() -> int:
    """The largest private resident memory (``RssAnon``, bytes) of this machine's PySpark
    Python workers."""
    largest = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path("/proc", pid, "cmdline").read_bytes()
            if b"pyspark.daemon" not in cmdline and b"pyspark.worker" not in cmdline:
                continue
            for line in Path("/proc", pid, "status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    largest = max(largest, int(line.split()[1]) * 1024)
        except OSError:
            continue
    return largest


@contextmanager
def peak_worker_memory() -> Iterator[dict[str, int]]:
    """Sample the Python workers' private resident memory every 0.5 s while inside."""
    peak = {"bytes": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            peak["bytes"] = max(peak["bytes"], _python_rss())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


def _measure(row: dict[str, Any], cut_ms: dict[int, int]) -> dict[str, Any]:
    return {
        "checkpoint_id": row["checkpoint_id"],
        "state_bytes": row["state_bytes"],
        "state_rows": row["state_rows"],
        "state_write_ms": row.get("state_write_ms"),
        "end_to_end_ms": row["end_to_end_duration_ms"],
        "cut_batch_ms": cut_ms.get(row["cut_batch_id"]),
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


def files_options(data: Path) -> dict[str, str]:
    """The ``files`` upstream over the Parquet files of ``data`` (one channel)."""
    return {
        "upstream": "files",
        "path": str(data.parent),
        "format": "parquet",
        "channelBy": "folder",
        "schema": "user_id string, amount long",
        "maxRowsPerChannel": str(SEED_BATCH),
    }


def _seed(ctx: Context, keys: int, data: Path) -> None:
    for i, first in enumerate(range(0, keys, SEED_BATCH)):
        drop_table(data, f"00-load-{i:04d}", user_names(first, min(keys, first + SEED_BATCH)))


def _levels(
    ctx: Context, snap: str, data: Path, query: Any, keys: int, repeats: int
) -> dict[str, Any]:
    groups = users_by_group()
    position = keys
    levels: dict[str, Any] = {}
    seen_before = {p["batchId"] for p in progress(query)}
    bulk_every = max(1, keys // min(keys // 10, 1_000_000))
    plan: list[tuple[str, int, Any]] = [(f"{pct}%", pct, None) for pct in LEVELS]
    state_rows = pa.table({})
    plan.append(("bulk", 0, bulk_every))
    for name, pct, step in plan:
        rows = []
        for r in range(repeats):
            if step is None:
                chosen = sorted(groups)[: max(1, round(MAX_PARALLELISM * pct / 100))]
                users = [groups[g][r % len(groups[g])] for g in chosen]
                drop_file(data, f"{pct:03d}-{r}", users)
                position += len(users)
            else:
                users_array = user_names(r, keys, step)
                drop_table(data, f"bulk-{r}", users_array)
                position += len(users_array)
                state_rows = state_table_rows(users_array)
            rows.append(wait_for_checkpoint(snap, position, timeout=1800))
        batches = progress(query)
        cut_ms = {p["batchId"]: p["batchDuration"] for p in batches}
        levels[name] = {
            "key_groups_changed": MAX_PARALLELISM if step else max(1, round(128 * pct / 100)),
            "keys_changed": (keys // step) if step else None,
            "changed_state_bytes": state_rows.nbytes if step else None,
            "checkpoints": [_measure(row, cut_ms) for row in rows],
            "ordinary_batch_ms": _ordinary_batches(batches, seen_before),
        }
        seen_before = {p["batchId"] for p in batches}
        ctx.emit(f"  {keys:,} keys, {name}: {[row['state_bytes'] for row in rows]} bytes")
    return levels


def _restore(ctx: Context, snap: str, data: Path, keys: int) -> dict[str, Any]:
    """The first batch of a restore of the latest checkpoint into a new checkpoint
    location, with the seeding run's partitions and with others."""
    groups = users_by_group()
    out = {}
    for name, partitions in (("same", SEED_PARTITIONS), ("other", RESTORE_PARTITIONS)):
        drop_file(data, f"restore-{name}", [users[0] for _, users in sorted(groups.items())])
        ctx.spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
        began = time.time()
        options = {**files_options(data), "restoreFrom": "latest"}
        query = start(running_count(ctx.spark, snap, options), ctx.path(f"ck-{keys}-{name}"))
        try:
            first = run_until(query, lambda seen: bool(seen), timeout=1800)[0]
        finally:
            query.stop()
            ctx.spark.conf.set("spark.sql.shuffle.partitions", str(SEED_PARTITIONS))
        out[name] = {
            "first_batch_ms": first["batchDuration"],
            "seconds_to_first_batch": round(time.time() - began, 2),
        }
    return out


def _one_size(ctx: Context, keys: int, repeats: int) -> dict[str, Any]:
    """Seed ``keys`` keys, run the levels, restore; the costs."""
    snap, data = ctx.path(f"snap-{keys}"), ctx.workdir / f"data-{keys}" / "c0"
    ctx.spark.conf.set("spark.sql.shuffle.partitions", str(SEED_PARTITIONS))
    with peak_worker_memory() as memory:
        began = time.time()
        _seed(ctx, keys, data)
        query = start(running_count(ctx.spark, snap, files_options(data)), ctx.path(f"ck-{keys}"))
        try:
            load = wait_for_checkpoint(snap, keys, timeout=7200)
            seed_s = round(time.time() - began, 1)
            ctx.emit(f"  seeded {keys:,} keys in {seed_s} s: checkpoint {load['checkpoint_id']}")
            levels = _levels(ctx, snap, data, query, keys, repeats)
        finally:
            query.stop()
        restore = _restore(ctx, snap, data, keys)
        ctx.emit(f"  {keys:,} keys, restore: {restore}")
    files = state_files(snap)
    for level in levels.values():
        points = level["checkpoints"]
        level["state_bytes_p50"] = percentile([c["state_bytes"] for c in points], 50)
        level["state_write_ms_p50"] = percentile(
            [c["state_write_ms"] for c in points if c["state_write_ms"]], 50
        )
        level["end_to_end_ms_p50"] = percentile([c["end_to_end_ms"] for c in points], 50)
        level["cut_batch_ms_p50"] = percentile(
            [c["cut_batch_ms"] for c in points if c["cut_batch_ms"] is not None], 50
        )
        level["ordinary_batch_ms_p50"] = percentile(level["ordinary_batch_ms"], 50)
        level["cut_over_ordinary"] = ratio(
            level["cut_batch_ms_p50"], level["ordinary_batch_ms_p50"], digits=2
        )
    bulk = levels["bulk"]
    seconds = (bulk["state_write_ms_p50"] or 0) / 1000
    file_mb_s = ratio(bulk["state_bytes_p50"] / 1e6, seconds)
    write_mb_s = ratio(bulk["changed_state_bytes"] / 1e6, seconds)
    sequential = round(sequential_write(snap, int(bulk["changed_state_bytes"] or 1)), 1)
    return {
        "seed_seconds": seed_s,
        "state_files": files,
        "levels": levels,
        "write": {
            "file_bytes": bulk["state_bytes_p50"],
            "state_bytes": bulk["changed_state_bytes"],
            "ms": bulk["state_write_ms_p50"],
            "file_mb_s": file_mb_s,
            "mb_s": write_mb_s,
            "sequential_mb_s": sequential,
            "ratio": ratio(write_mb_s, sequential),
        },
        "restore": restore,
        "peak_python_worker_anon_bytes": memory["bytes"],
    }


def run(ctx: Context) -> dict[str, Any]:
    """Each size in turn; the targets on the 10M-key and the largest size."""
    size = SIZES["quick" if ctx.quick else "full"]
    configure(ctx.spark, {"checkpointInterval": "1s", "maxParallelism": str(MAX_PARALLELISM)})
    sizes = {str(keys): _one_size(ctx, keys, size["repeats"]) for keys in size["keys"]}
    keys = sorted(size["keys"])
    largest = keys[-1]
    small, mid, ten = (keys[0], keys[0], largest) if ctx.quick else (100_000, 1_000_000, 10_000_000)

    def ordinary(k: int) -> Any:
        return sizes.get(str(k), {}).get("levels", {}).get("100%", {}).get("ordinary_batch_ms_p50")

    def cut(k: int, level: str) -> Any:
        return sizes.get(str(k), {}).get("levels", {}).get(level, {}).get("cut_over_ordinary")

    def restore(k: int, run: str) -> Any:
        return sizes.get(str(k), {}).get("restore", {}).get(run, {}).get("first_batch_ms")

    targets = {
        **target(
            f"ordinary batch p50, 100% of key groups: {ten:,} / {small:,} keys "
            f"<= {TARGET_SIZE_10M}",
            ratio(ordinary(ten), ordinary(small), digits=2),
            TARGET_SIZE_10M,
            at_least=False,
        ),
        **target(
            f"ordinary batch p50, 100% of key groups: {largest:,} / {mid:,} keys "
            f"<= {TARGET_SIZE_LARGEST}",
            ratio(ordinary(largest), ordinary(mid), digits=2),
            TARGET_SIZE_LARGEST,
            at_least=False,
        ),
        **target(
            f"cut batch / ordinary batch, 1% of key groups, {ten:,} keys <= {TARGET_CUT_1}",
            cut(ten, "1%"),
            TARGET_CUT_1,
            at_least=False,
        ),
        **target(
            f"cut batch / ordinary batch, 100% of key groups, {ten:,} keys <= {TARGET_CUT_100}",
            cut(ten, "100%"),
            TARGET_CUT_100,
            at_least=False,
        ),
        **target(
            f"changed bytes written per second at a cut / sequential write ({ten:,} keys) "
            f">= {TARGET_WRITE}",
            sizes.get(str(ten), {}).get("write", {}).get("ratio"),
            TARGET_WRITE,
            at_least=True,
        ),
        **target(
            f"state files written per checkpoint per task <= {TARGET_FILES}",
            max(s["state_files"]["max_per_partition_and_checkpoint"] for s in sizes.values()),
            TARGET_FILES,
            at_least=False,
        ),
    }
    for run in ("same", "other"):
        targets |= target(
            f"restore, first batch, {run} partitions: {largest:,} / {mid:,} keys "
            f"<= {TARGET_RESTORE}",
            ratio(restore(largest, run), restore(mid, run), digits=2),
            TARGET_RESTORE,
            at_least=False,
        )
    return {
        "params": {"keys": list(size["keys"]), "max_parallelism": MAX_PARALLELISM, **size},
        "results": {"sizes": sizes},
        "targets": targets,
    }


def markdown(record: dict[str, Any]) -> str:
    """The keyed-state-at-scale section of RESULTS.md."""
    sizes = record["results"]["sizes"]
    rows = [
        [
            f"{int(keys):,}",
            name,
            level.get("keys_changed") or level["key_groups_changed"],
            level.get("ordinary_batch_ms_p50"),
            level["cut_batch_ms_p50"],
            level.get("cut_over_ordinary"),
            level["state_bytes_p50"],
            level.get("state_write_ms_p50"),
            level["end_to_end_ms_p50"],
        ]
        for keys, one in sizes.items()
        for name, level in one["levels"].items()
    ]
    per_size = [
        [
            f"{int(keys):,}",
            one["seed_seconds"],
            one["state_files"]["files"],
            one["state_files"]["bytes"],
            one["state_files"]["max_per_partition_and_checkpoint"],
            one["write"].get("file_mb_s"),
            one["write"]["mb_s"],
            one["write"]["sequential_mb_s"],
            one["write"]["ratio"],
            one["restore"]["same"]["first_batch_ms"],
            one["restore"]["other"]["first_batch_ms"],
            round(one["peak_python_worker_anon_bytes"] / 2**20),
        ]
        for keys, one in sizes.items()
    ]
    return "\n".join(
        [
            f"{record['params']['max_parallelism']} key groups, {SEED_PARTITIONS} shuffle "
            "partitions (the restore's `other`: "
            f"{RESTORE_PARTITIONS}). `1%`/`10%`/`100%`: one record per changed key group; "
            "`bulk`: one record for a tenth of the keys (at most 1M). The ordinary batch of "
            "a level delivers records and cuts no checkpoint.",
            "",
            table(
                [
                    "keys",
                    "level",
                    "keys (or key groups) changed",
                    "ordinary batch ms p50",
                    "cut batch ms p50",
                    "cut / ordinary",
                    "state bytes written p50",
                    "state write ms p50",
                    "end-to-end ms p50",
                ],
                rows,
            ),
            "",
            table(
                [
                    "keys",
                    "seeding s",
                    "state files",
                    "state bytes",
                    "files per task and checkpoint (max)",
                    "bulk write, file MB/s",
                    "bulk write, state MB/s",
                    "sequential MB/s (fsync)",
                    "write ratio",
                    "restore first batch ms (same)",
                    "restore first batch ms (other)",
                    "peak Python worker MB (private)",
                ],
                per_size,
            ),
        ]
    )
