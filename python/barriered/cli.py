"""The ``barriered`` command line: ``demo``, ``checkpoints`` and ``savepoint``.

Errors are one clear line on stderr and a non-zero exit, not a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from barriered.errors import BarrieredError


def _checkpoints(path: str, as_json: bool) -> int:
    from barriered.demo import format_row
    from barriered.statestore import checkpoints_table
    from barriered.statestore.layout import SnapshotLayout

    rows = checkpoints_table.read_rows(SnapshotLayout.configured(path))
    if not rows:
        raise BarrieredError(f"no checkpoints under {path!r} (is it a snapshot path?)")
    for row in rows:
        print(json.dumps(row, sort_keys=True) if as_json else format_row("", row).lstrip("[] "))
    return 0


def _savepoint(path: str, out: str, checkpoint: int | None) -> int:
    from barriered.statestore.layout import SnapshotLayout
    from barriered.statestore.savepoints import export

    saved = export(SnapshotLayout.configured(path), checkpoint, out)
    print(
        f"savepoint of checkpoint {saved.checkpoint_id} written to {saved.path} "
        f"({saved.state_files} state files, {saved.state_bytes} bytes, "
        f"{saved.inflight_rows} in-flight rows); restore it with "
        f".option('restoreFrom', {saved.path!r}) on a new snapshot path"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``barriered`` and ``python -m barriered``."""
    parser = argparse.ArgumentParser(prog="barriered", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the local demo on real Spark")
    demo.add_argument("--out", default="out/demo", help="folder for the Delta tables")
    demo.add_argument("--duration", type=float, default=45.0, help="seconds, all modes")
    ck = sub.add_parser("checkpoints", help="print the checkpoint history of a snapshot path")
    ck.add_argument("path")
    ck.add_argument("--json", action="store_true", help="one JSON object per line")
    sp = sub.add_parser(
        "savepoint",
        help="copy a completed checkpoint into a self-contained savepoint folder",
    )
    sp.add_argument("path", help="the snapshot path")
    sp.add_argument("-o", "--out", required=True, help="the savepoint folder (must be new)")
    sp.add_argument("--checkpoint", type=int, default=None, help="id (default: latest)")
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from barriered.demo import run_demo

            run_demo(args.out, args.duration)
            return 0
        if args.command == "savepoint":
            return _savepoint(args.path, args.out, args.checkpoint)
        return _checkpoints(args.path, args.json)
    except BarrieredError as exc:
        print(f"barriered: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
