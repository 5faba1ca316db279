"""Bytes of the ``state`` table's log and of a restored partition's manifest, on a
synthetic state (no Spark, no data read: the commits only need each file's row count).

``python -m benchmarks.dv_bytes [--files 10] [--rows 10000000] [--commits 40]
[--fraction 0.01]``: a table of ``--files`` files of ``--rows`` rows each, then
``--commits`` checkpoints each deleting a random ``--fraction`` of every file's rows
(a bulk update's deletion vectors growing commit after commit). Prints the log bytes
per commit, the log's total, the time to replay the log (what every reader of the
newest version does), and the JSON bytes of the manifest a partition keeps after
restoring the last version.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions

from barriered.statestore.live_manifest import RestoredFile, new_manifest
from barriered.statestore.state_log import STATE_CONFIGURATION, NewFile, StateFiles, commit_state

NONE = np.empty(0, np.int64)
SCHEMA = pa.schema([("operator", pa.string()), ("k", pa.int64())])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--commits", type=int, default=40)
    parser.add_argument("--fraction", type=float, default=0.01)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp, "state"))
        create_table_with_add_actions(
            uri, DeltaSchema.from_arrow(SCHEMA), [], partition_by=["operator"],
            configuration=STATE_CONFIGURATION,
        )  # fmt: skip
        files = StateFiles(uri)
        adds = [
            NewFile(
                f"operator=op/f{i}.parquet",
                1,
                args.rows,
                {"operator": "op"},
                0,
                json.dumps({"numRecords": args.rows}),
                np.empty(0, np.int64),
            )
            for i in range(args.files)
        ]
        commit_state(files, 1, adds, {}, {}, "barriered.state")
        sizes, seconds = [], []
        per = int(args.rows * args.fraction)
        for c in range(args.commits):
            deleted = {
                a.path: np.unique(rng.integers(0, args.rows, per)).astype(np.int64) for a in adds
            }
            begin = time.perf_counter()
            version = commit_state(files, c + 2, [], deleted, {}, "barriered.state").version
            seconds.append(time.perf_counter() - begin)
            sizes.append(Path(uri, "_delta_log", f"{version:020d}.json").stat().st_size)
        total = sum(p.stat().st_size for p in Path(uri).rglob("*") if p.is_file())
        log_total = sum(p.stat().st_size for p in Path(uri, "_delta_log").iterdir())
        begin = time.perf_counter()
        StateFiles(uri)  # what every reader of the newest version replays
        replay_ms = round(1000 * (time.perf_counter() - begin), 1)
        restored = [  # as a restore into another snapshot path carries them
            RestoredFile(f"{uri}/{f.path}", 0, 127, None, f.dv and f.dv.absolute(uri).to_json())
            for f in StateFiles(uri).files.values()
        ]
        manifest = new_manifest(0, 1, 128, restored)
        print(
            json.dumps(
                {
                    "files": args.files,
                    "rows": args.rows,
                    "commits": args.commits,
                    "log_bytes_first_commit": sizes[0],
                    "log_bytes_last_commit": sizes[-1],
                    "log_bytes_median_commit": int(np.median(sizes)),
                    "log_bytes_total": log_total,
                    "table_bytes_total": total,
                    "commit_ms_median": round(1000 * float(np.median(seconds)), 1),
                    "commit_ms_last": round(1000 * seconds[-1], 1),
                    "replay_ms": replay_ms,
                    "manifest_bytes_after_restore": len(manifest.to_json()),
                }
            )
        )


if __name__ == "__main__":
    main()
