"""RESULTS.md: the latest record of every workload, rendered as Markdown.

Each workload module renders its own section (``markdown(record)``); this module adds
the run's command, machine, versions, the suite's duration and the targets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.markdown import table
from benchmarks.workloads import WORKLOADS

METHOD = """\
## How the numbers are measured

* One local Spark (`local[2]`, `spark.sql.shuffle.partitions=2`, RocksDB state store) and
  one SparkSession for the whole suite; every query writes to the `noop` sink, so only
  the source, the keyed operator and the checkpoints are measured.
* **records/s** comes from Spark's query progress: the records of a batch are what the
  barriered source delivered in it (the growth of the channel positions from its start
  to its end offset, so barrier marker rows do not count), summed over every batch but
  the first (which pays for Python workers, code generation and state store setup),
  divided by the time from the start of the second batch (`timestamp`) to the end of
  the last one (`timestamp + batchDuration`). Gaps between batches count.
* Checkpoint durations come from the `_checkpoints` table written by the coordinator:
  *end-to-end* is trigger → completion (every key group acknowledged, one Delta commit);
  *alignment* is first barrier delivered → cut; *micro-batches* is
  `cut_batch_id - trigger_batch_id`: `trigger_batch_id` is the last batch the coordinator
  had handled when the checkpoint started (the source planner starts a periodic
  checkpoint itself, in the first batch it plans once the coordinator's schedule says it
  is due), so an unaligned cut in that first batch counts 1.
* Fast-channel records while aligning are the records channels 1-3 delivered in the
  batches after the one that fixed a checkpoint's barriers, up to its cut (taken from
  the source's start/end offsets in the query progress), per batch.
* Snapshot throughput (`snapshot`) is the changed state's bytes as Arrow holds them in
  memory (its rows: key, state, key group, checkpoint id) over the longest time a task
  took to write them at the cut (`state_write_ms`: merge, encode, write, cache); the
  sequential reference writes the same number of bytes to one new file in the same
  folder and `fsync`s it (median of 3), in the same run. The snapshot writer does not
  `fsync`, so the reference is the slower of the two ways to write. The `s3` workload
  divides the files' bytes by the checkpoint's end-to-end time instead.
* Restore time is `start()` → end of the first batch of the restored query (in which
  each partition reads what its batch touches of the restored files, on the executor)
  minus the same for a fresh
  query on the same small input (baseline: session, planning, Python workers).
  Native ingest is the same for Spark's `groupBy().count()` reading the seed file (every
  key, one batch, fresh state; like every native baseline it reads the barriered source
  with the coordinator's listener removed, since the coordinator refuses state no
  snapshot holds) minus that query on the small input; restore / native
  ingest compares the two differences, seeding / native ingest the whole runs (start →
  the seeding run's final checkpoint, against start → end of the native batch).
* The cut batch of a snapshot is compared with the ordinary batches of the same level
  (batches that delivered records and cut nothing), p50 against p50.
* The `s3` workload starts its own S3 server (moto's, in memory, `tests/s3_server.py`) on
  this machine and puts snapshot paths in its bucket: a request costs what a local Python
  server on the same cores costs (ms of CPU, no network), not what AWS S3 costs (tens of
  ms of latency, more bandwidth), so its ratios show the requests a checkpoint or a
  restore makes, which the section counts from the server's log.
* The machine is shared: the 1-minute load average before and after each workload is
  recorded with its numbers. Quick runs (`--quick`) are smoke runs with small sizes;
  their results go to `benchmarks/results/quick/` and are not quoted here.
"""


def latest(folder: Path) -> dict[str, dict[str, Any]]:
    """The newest record of every workload that has a ``<name>.jsonl`` in ``folder``."""
    found = {}
    for name in WORKLOADS:
        path = folder / f"{name}.jsonl"
        if path.exists():
            lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
            if lines:
                found[name] = json.loads(lines[-1])
    return found


def _suite(folder: Path) -> dict[str, Any] | None:
    path = folder / "suite.jsonl"
    if not path.exists():
        return None
    runs = [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    complete = [r for r in runs if set(r["workloads"]) == set(WORKLOADS) and not r["failed"]]
    return complete[-1] if complete else None


def _header(records: dict[str, dict[str, Any]], suite: dict[str, Any] | None) -> list[str]:
    any_record = next(iter(records.values()))
    machine, versions = any_record["machine"], any_record["versions"]
    lines = ["# Benchmark results", "", "Generated by `benchmarks/report.py`; do not edit.", ""]
    commands = sorted({r["command"] for r in records.values()})
    lines.append("Command: " + ", ".join(f"`{c}`" for c in commands) + " (or `make bench`)")
    runs = sorted({f"{r['run_id']} ({r['mode']})" for r in records.values()})
    lines.append(f"Run: {', '.join(runs)}")
    if suite is not None:
        lines.append(
            f"Whole suite: {suite['duration_s'] / 60:.1f} min (run {suite['run_id']}, "
            f"`{suite['command']}`)"
        )
    lines += [
        "",
        f"Machine: {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['cpu_model']}, {machine['os']}",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v),
        "",
    ]
    return lines


def _verdict(check: dict[str, Any]) -> str:
    if check["value"] is None:
        return "**not measured** (see the workload's section)"
    return "met" if check["met"] else f"**MISSED** by {abs(check.get('margin') or 0)}"


def _targets(records: dict[str, dict[str, Any]]) -> list[str]:
    rows = [
        [
            name,
            f"`{label}`",
            check["value"],
            check.get("margin"),
            _verdict(check),
        ]
        for name, record in records.items()
        for label, check in record.get("targets", {}).items()
    ]
    if not rows:
        return []
    headers = ["workload", "target", "measured", "margin", "verdict"]
    why = [
        f"* {name}, `{label}`: {text}"
        for name, record in records.items()
        for label, check in record.get("targets", {}).items()
        if not check["met"]
        for prefix, text in getattr(WORKLOADS[name], "WHY_MISSED", {}).items()
        if label.startswith(prefix)
    ]
    lines = ["## Targets", "", table(headers, rows), ""]
    if why:
        lines += ["Why a target is missed, and what would close it:", "", *why, ""]
    return lines


def render(folder: Path) -> str:
    """The Markdown of the latest records in ``folder``."""
    records = latest(folder)
    if not records:
        return "# Benchmark results\n\nNo results yet: run `make bench`.\n"
    lines = _header(records, _suite(folder)) + _targets(records)
    for name, record in records.items():
        try:
            section = WORKLOADS[name].markdown(record).rstrip()
        except (KeyError, TypeError) as exc:  # a record of an older version of the suite
            section = f"(this record cannot be shown: missing {exc}; rerun `--only {name}`)"
        load = record.get("load_average", {})
        lines += [
            f"## {name}",
            "",
            f"_{record['mode']} run {record['run_id']}, {record['duration_s']} s, "
            f"load average {load.get('before')} → {load.get('after')}_",
            "",
            section,
            "",
        ]
        lines += [f"> {note}" for note in record.get("notes", [])]
        if record.get("notes"):
            lines.append("")
    lines.append(METHOD)
    return "\n".join(lines)


def write(folder: Path, target: Path | None = None) -> Path:
    """Render the records in ``folder`` to ``target`` (default ``folder/RESULTS.md``)."""
    path = target or folder / "RESULTS.md"
    path.write_text(render(folder), encoding="utf-8")
    return path


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    print(write(here / "results", here / "RESULTS.md"))
