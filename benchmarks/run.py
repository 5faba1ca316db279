"""Run the benchmark suite: ``python -m benchmarks.run [--quick] [--only NAME ...]``.

One SparkSession for the whole suite; each workload prints one JSON object and appends
it to ``benchmarks/results/<name>.jsonl`` (``--quick`` runs go to
``benchmarks/results/quick/`` and never replace the full results); RESULTS.md is then
regenerated from the latest record of every workload.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import env, report
from benchmarks.harness import Context
from benchmarks.workloads import WORKLOADS

HERE = Path(__file__).resolve().parent


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these workloads (repeat or comma-separate): {', '.join(WORKLOADS)}",
    )
    parser.add_argument("--results", type=Path, help="results folder (default: by mode)")
    parser.add_argument("--workdir", type=Path, help="scratch folder (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)
    names = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    args.names = [n for n in WORKLOADS if n in names] if names else list(WORKLOADS)
    return args


def results_dir(quick: bool) -> Path:
    """Where the records (and the plot) of a full or a quick run go."""
    return HERE / "results" / "quick" if quick else HERE / "results"


def command(argv: Sequence[str] | None) -> str:
    """The command line that reproduces this run."""
    words = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["python", "-m", "benchmarks.run", *words])


def run_one(name: str, ctx: Context, common: dict[str, Any], out: Path) -> dict[str, Any]:
    """Run workload ``name``; print its JSON record and append it to its .jsonl file."""
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    load_before = env.load_average()
    began = time.time()
    body = WORKLOADS[name].run(ctx)
    record = {
        "benchmark": name,
        **common,
        "started": datetime.fromtimestamp(began, timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - began, 1),
        "load_average": {"before": load_before, "after": env.load_average()},
        **body,
        "notes": ctx.notes,
    }
    line = json.dumps(record, sort_keys=False)
    print(line, flush=True)
    with open(out / f"{name}.jsonl", "a", encoding="utf-8") as f:
        f.write(line + "\n")
    artifacts = getattr(WORKLOADS[name], "artifacts", None)
    if artifacts is not None:
        artifacts(record, out)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected workloads and regenerate RESULTS.md; return an exit code."""
    args = _parse(argv)
    out = args.results or results_dir(args.quick)
    out.mkdir(parents=True, exist_ok=True)
    scratch = args.workdir or Path(tempfile.mkdtemp(prefix="barriered-bench-"))
    began = time.time()
    env.divert_jvm_output()
    print(
        f"Spark's own log (stack traces of stopped queries included): {env.SPARK_LOG}",
        file=sys.stderr,
        flush=True,
    )
    spark = env.session()
    common = {
        "run_id": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
        "mode": "quick" if args.quick else "full",
        "command": command(argv),
        "machine": env.machine(),
        "versions": env.versions(spark),
    }

    def emit(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    failed = []
    try:
        for name in args.names:
            emit(f"=== {name} ({common['mode']}) ===")
            ctx = Context(spark, scratch / name, args.quick, emit)
            try:
                run_one(name, ctx, common, out)
            except Exception as exc:  # one failed workload must not lose the others
                emit(traceback.format_exc())
                emit(f"workload {name} failed: {type(exc).__name__}: {exc}")
                failed.append(name)
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    suite = {
        "run_id": common["run_id"],
        "mode": common["mode"],
        "command": common["command"],
        "workloads": args.names,
        "failed": failed,
        "duration_s": round(time.time() - began, 1),
    }
    with open(out / "suite.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(suite) + "\n")
    path = report.write(out, HERE / "RESULTS.md" if out == results_dir(False) else None)
    emit(f"suite finished in {suite['duration_s']} s; {path} regenerated")
    if failed:
        emit(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
