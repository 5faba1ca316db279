"""The ``barriered`` command line (also ``python -m barriered``).

Commands:

* ``demo [--kafka BOOTSTRAP]``: the local demo on real Spark (on the ``rate`` upstream,
  or on a Kafka topic it creates and fills);
* ``checkpoints PATH [--json]``: the checkpoint history of a snapshot path;
* ``rescales PATH [--json]``: the rescales of a managed query (:mod:`barriered.managed_query`);
* ``rescale PATH --partitions N``: rescale the running query a script started through
  :func:`barriered.managed` (:mod:`barriered.control.rescale_mailbox`);
* ``inspect PATH [--checkpoint N] [--json]``: what a completed checkpoint holds; with
  ``--key VALUE[,VALUE...] [--partitions N] [--operator NAME]``, which key group (and
  shuffle partition) one key lives in and its state rows;
* ``plot PATH -o FILE.png``: durations, alignment and sizes over checkpoint ids;
* ``savepoint PATH -o OUT [--checkpoint N]``: copy a completed checkpoint into a
  self-contained savepoint folder;
* ``savepoint bootstrap -o OUT ...`` and ``savepoint transform PATH -o OUT ...``: write a
  savepoint from a table of keyed state, or with one operator's state changed
  (:mod:`barriered.tools.offline_state`);
* ``savepoint rescale SAVEPOINT -o OUT --max-parallelism N``: write a savepoint again
  with another number of key groups (:mod:`barriered.state_processor.rescale`);
* ``restore-plan PATH [--from latest|N|FOLDER]``: where a restore would start, after
  checking every file it reads (nothing is written);
* ``ui PATH [--port N] [--host ADDR]``: the live checkpoint page of a snapshot path (and
  its Prometheus metrics) until Ctrl-C (:mod:`barriered.monitoring`);
* ``kafka-broker [--jars DIR]``: a local Kafka broker until Ctrl-C
  (:mod:`barriered.local.kafka_broker`).

Each command is a function ``cmd_<name>(args) -> exit code`` registered by
:func:`build_parser`; the work itself lives in :mod:`barriered.tools`. Long work shows
a progress bar on a terminal and plain lines on stderr otherwise. An error is one line
``barriered: error: ...`` on stderr and exit code 1, never a traceback unless
``--traceback`` is given; a bad command line (an unknown option, a missing argument, an
option that does not apply) is argparse's usage message and exit code 2. The process
ends through :func:`exit_process`, so its exit code is the command's even when native
threads of delta-rs are still running.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from barriered.config.source_options import RESTORE_FROM
from barriered.errors import BarrieredError
from barriered.tools import offline_state
from barriered.tools.progress import reporting

log = logging.getLogger(__name__)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the local demo."""
    from barriered.demo import run_demo

    with reporting() as progress:
        # stop_session: Spark (and its JVM) stops before the process ends (exit_process)
        run_demo(args.out, args.duration, progress, stop_session=True, kafka=args.kafka)
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    """Print the checkpoint history of a snapshot path."""
    from barriered.statestore import integrity, rescales_table
    from barriered.tools import rescales
    from barriered.tools.history import (
        channel_names,
        format_history,
        open_history,
        with_channel_names,
    )

    layout, rows = open_history(args.path)
    if args.json:
        for row in with_channel_names(rows, channel_names(layout)):
            print(json.dumps(row, sort_keys=True))
    elif rows:
        print(format_history(rows))
        note = rescales.summary(rescales_table.read_rows(layout), args.path)
        if note is not None:
            print(note)
    else:
        print(f"barriered: no checkpoint has finished yet under {args.path}", file=sys.stderr)
    for line in integrity.check(layout).warnings():
        print(f"barriered: warning: {line}", file=sys.stderr)
    return 0


def cmd_rescales(args: argparse.Namespace) -> int:
    """Print the rescales of a managed query's snapshot path."""
    from barriered.statestore import rescales_table
    from barriered.statestore.layout import SnapshotLayout
    from barriered.tools.rescales import format_rescales

    rows = rescales_table.read_rows(SnapshotLayout.existing(args.path))
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True))
    elif rows:
        print(format_rescales(rows))
    else:
        print(f"barriered: no rescale recorded under {args.path}", file=sys.stderr)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print the state and in-flight records of one completed checkpoint, or with
    ``--key`` where one key lives (key group, partition) and its state rows."""
    from barriered.tools.contents import format_contents, inspect_checkpoint

    alone = [f"--{name}" for name in ("partitions", "operator") if getattr(args, name) is not None]
    if alone and not args.key:
        verb = "apply" if len(alone) > 1 else "applies"
        args.usage(f"{' and '.join(alone)} only {verb} with --key (where one key lives)")
    if args.key:
        from barriered.tools.key_lookup import format_location, locate_key

        with reporting() as progress:
            loc = locate_key(
                args.path, args.key, args.operator, args.partitions, args.checkpoint, progress.step
            )
        print(
            json.dumps(loc.to_dict(), sort_keys=True, default=str)
            if args.json
            else format_location(loc)
        )
        return 0
    with reporting() as progress:
        contents = inspect_checkpoint(args.path, args.checkpoint, step=progress.step)
    print(
        json.dumps(contents.to_dict(), sort_keys=True) if args.json else format_contents(contents)
    )
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """Write the checkpoint plot of a snapshot path to a PNG file."""
    from barriered.tools.history import open_history
    from barriered.tools.plot import save_checkpoint_plot

    out = Path(args.output)
    if out.suffix.lower() != ".png":
        raise BarrieredError(f"the plot is a PNG file: give -o NAME.png, not {args.output!r}")
    with reporting() as progress:
        progress.step(f"reading the checkpoint history of {args.path}")
        layout, rows = open_history(args.path)
        progress.step(f"drawing {len(rows)} checkpoints")
        out.parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint_plot(rows, str(out), title=f"Checkpoints of {layout.root}")
    print(f"wrote {out} ({len(rows)} checkpoints)")
    return 0


def cmd_savepoint(args: argparse.Namespace) -> int:
    """Copy a completed checkpoint of a snapshot path into a savepoint folder."""
    from barriered.statestore.layout import SnapshotLayout
    from barriered.statestore.savepoints import export

    saved = export(SnapshotLayout.existing(args.path), args.checkpoint, args.out)
    print(
        f"savepoint of checkpoint {saved.checkpoint_id} written to {saved.path} "
        f"({saved.state_files} state files, {saved.state_bytes} bytes, "
        f"{saved.inflight_rows} in-flight rows); restore it with "
        f".option({RESTORE_FROM.name!r}, {saved.path!r}) on a new snapshot path"
    )
    return 0


def cmd_restore_plan(args: argparse.Namespace) -> int:
    """Resolve and check a restore point; print where a restore starts."""
    from barriered.tools.restore_plan import restore_plan

    print(restore_plan(args.path, args.source))
    return 0


def cmd_rescale(args: argparse.Namespace) -> int:
    """Ask the running managed query of a snapshot path to rescale; print the rescale."""
    from barriered.tools.rescale_request import request_rescale
    from barriered.tools.rescales import format_rescales

    with reporting() as progress:
        progress.step(f"asking the query on {args.path} for {args.partitions} partitions")
        row = request_rescale(args.path, args.partitions, args.timeout)
    print(json.dumps(row, sort_keys=True) if args.json else format_rescales([row]))
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    """Serve the live checkpoint page of a snapshot path until Ctrl-C or SIGTERM."""
    from barriered.monitoring.offline import path_view
    from barriered.monitoring.server import MonitoringServer
    from barriered.statestore.layout import SnapshotLayout

    layout = SnapshotLayout.existing(args.path)
    path_view(layout)  # a damaged table fails here, with its message, not per request

    server = MonitoringServer(
        lambda: [path_view(layout)],
        args.port,
        args.host,
        refresh_ms=int(args.refresh * 1000),
        title=f"Checkpoints of {layout.root}",
    )
    try:
        with _interruptible():
            print(
                f"checkpoint page of {layout.root} at {server.url} (metrics at {server.url}metrics)"
            )
            print("Ctrl-C stops it", flush=True)
            server.serve_until_interrupted()
    except KeyboardInterrupt:
        print("stopped", flush=True)
    finally:
        server.close()
    return 0


def cmd_kafka_broker(args: argparse.Namespace) -> int:
    """Run a local Kafka broker (KRaft) until Ctrl-C or SIGTERM, then stop it by pid."""
    from barriered.errors import LocalServerError
    from barriered.local.kafka_broker import KafkaBroker

    broker = KafkaBroker(Path(args.jars)) if args.jars else KafkaBroker()
    try:
        with _interruptible():
            broker.start()
            print(f"Kafka broker at {broker.bootstrap} (pid {broker.pid}, log {broker.log_file})")
            print(f"try: barriered demo --kafka {broker.bootstrap}; Ctrl-C stops it", flush=True)
            code = broker.wait()
        raise LocalServerError(f"the Kafka broker exited with {code}\n{broker.log_tail()}")
    except KeyboardInterrupt:
        print("Kafka broker stopped", flush=True)
        return 0
    finally:
        broker.stop()


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt inside (SIGINT too: a process started
    in the background of a shell ignores it); the handlers are put back after."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    kept = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def _checkpoint_id(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a checkpoint id is a number, not {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"checkpoint ids start at 1, got {value}")
    return value


def _add_checkpoint_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        type=_checkpoint_id,
        metavar="N",
        help="a completed checkpoint id (default: the latest completed)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one sub-command per ``cmd_*`` function."""
    parser = argparse.ArgumentParser(
        prog="barriered",
        description="Flink-grade barrier checkpoints for Spark Structured Streaming.",
    )
    parser.add_argument(
        "--traceback", action="store_true", help="show the full traceback of an error"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the local demo on real Spark")
    demo.add_argument("--out", default="out/demo", help="folder for the Delta tables")
    demo.add_argument("--duration", type=float, default=45.0, help="seconds, all modes")
    demo.add_argument(
        "--kafka",
        metavar="BOOTSTRAP",
        help="read a new topic on this Kafka cluster (host:port), filled by the demo",
    )
    demo.set_defaults(run=cmd_demo)

    ck = sub.add_parser("checkpoints", help="the checkpoint history of a snapshot path")
    ck.add_argument("path", help="the snapshot path (snapshotPath of the query)")
    ck.add_argument("--json", action="store_true", help="one JSON object per checkpoint")
    ck.set_defaults(run=cmd_checkpoints)

    rsc = sub.add_parser(
        "rescales", help="the rescales of a managed query (barriered.managed): when, partitions"
    )
    rsc.add_argument("path", help="the snapshot path")
    rsc.add_argument("--json", action="store_true", help="one JSON object per rescale")
    rsc.set_defaults(run=cmd_rescales)

    rs = sub.add_parser(
        "rescale",
        help="rescale the running query of a snapshot path (started by barriered.managed)",
    )
    rs.add_argument("path", help="the snapshot path")
    rs.add_argument("--partitions", type=int, required=True, help="the new shuffle partitions")
    rs.add_argument("--timeout", type=float, default=300.0, help="seconds to wait (default 300)")
    rs.add_argument("--json", action="store_true", help="the rescale as one JSON object")
    rs.set_defaults(run=cmd_rescale)

    ins = sub.add_parser(
        "inspect", help="state per operator and key group, in-flight records per channel"
    )
    ins.add_argument("path", help="the snapshot path")
    _add_checkpoint_option(ins)
    ins.add_argument("--json", action="store_true", help="one JSON object")
    ins.add_argument(
        "--key",
        action="append",
        metavar="VALUE[,VALUE...]",
        help="where this key lives: its key group, partition and state rows (one --key per "
        "key column, or one with the values comma-separated)",
    )
    ins.add_argument(
        "--operator",
        metavar="NAME",
        help="with --key: the keyed operator, or a Spark operator's store (<op>-<store>, "
        "e.g. 0-default: one --key per leaf field of its key, window.start and window.end "
        "first for a window)",
    )
    ins.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="with --key: the Spark shuffle partition of the key for N partitions",
    )
    ins.set_defaults(run=cmd_inspect, usage=ins.error)

    plot = sub.add_parser("plot", help="plot durations, alignment and sizes per checkpoint")
    plot.add_argument("path", help="the snapshot path")
    plot.add_argument("-o", "--output", required=True, metavar="FILE.png", help="the PNG")
    plot.set_defaults(run=cmd_plot)

    sp = sub.add_parser(
        "savepoint",
        help="copy a completed checkpoint into a self-contained savepoint folder; "
        "savepoint bootstrap|transform: write state offline; savepoint rescale: change "
        "maxParallelism",
        epilog="Write state offline: barriered savepoint bootstrap --help, "
        "barriered savepoint transform --help; change maxParallelism: barriered savepoint "
        "rescale --help",
    )
    sp.add_argument("path", help="the snapshot path")
    sp.add_argument("-o", "--out", required=True, help="the savepoint folder (must be new)")
    _add_checkpoint_option(sp)
    sp.set_defaults(run=cmd_savepoint)
    offline_state.add_parsers(sub, _add_checkpoint_option)  # and savepoint rescale

    rp = sub.add_parser(
        "restore-plan", help="check a restore point and show where a restore would start"
    )
    rp.add_argument("path", help="the snapshot path of the query to restore")
    rp.add_argument(
        "--from",
        dest="source",
        default="latest",
        help="latest (default), a checkpoint id, or a savepoint folder (restoreFrom)",
    )
    rp.set_defaults(run=cmd_restore_plan)

    ui = sub.add_parser(
        "ui", help="serve the live checkpoint page (and Prometheus metrics) of a snapshot path"
    )
    ui.add_argument("path", help="the snapshot path (local folder or s3://...)")
    ui.add_argument("--port", type=int, default=8040, help="the port (default 8040; 0: any free)")
    ui.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)"
    )
    ui.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how often the page checks for new checkpoints (default 2; 0: never)",
    )
    ui.set_defaults(run=cmd_ui)

    kb = sub.add_parser(
        "kafka-broker",
        help="run a local Kafka broker (KRaft, from the jars `make kafka` fetched) until Ctrl-C",
    )
    kb.add_argument(
        "--jars", metavar="DIR", help="the broker's jars (default: build/kafka of the checkout)"
    )
    kb.set_defaults(run=cmd_kafka_broker)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``barriered`` and ``python -m barriered``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments. Given: the exit code is returned (for callers and tests). None
        (the console script and ``python -m barriered``): the process ends with the
        exit code through :func:`exit_process`, so it is exactly the command's.

    Returns
    -------
    int
        0: done; 1: an error (one line on stderr); 2: a bad command line (argparse's
        usage error, the Unix convention); 130: interrupted.
    """
    code = _run(argv)
    if argv is not None:
        return code
    exit_process(code)


def _run(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["savepoint"] and words[1:2] in (["bootstrap"], ["transform"], ["rescale"]):
        words[:2] = [f"savepoint-{words[1]}"]  # "savepoint bootstrap": its own parser
    try:
        return _command(build_parser().parse_args(words))
    except SystemExit as exc:  # argparse printed --help (0) or the usage error (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)


def _command(args: argparse.Namespace) -> int:
    try:
        code: int = args.run(args)
        return code
    except KeyboardInterrupt:
        print("barriered: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.traceback:
            traceback.print_exc()
            return 1
        if isinstance(exc, BarrieredError):
            message = str(exc)
        else:
            log.debug("unexpected error", exc_info=True)
            message = f"unexpected {type(exc).__name__}: {exc} (--traceback shows where)"
        print(f"barriered: error: {' '.join(message.split())}", file=sys.stderr)
        return 1


def exit_process(code: int) -> NoReturn:
    """End the process now with ``code``, after flushing logs, stdout and stderr.

    delta-rs keeps native threads running until the interpreter tears down; tearing
    them down can abort the process (SIGABRT, ``terminate called without an active
    exception``, exit 134) after the work succeeded (delta-rs issue #2184).
    ``os._exit`` skips that teardown, so the exit code is the command's, every time.
    Anything that must be stopped (a SparkSession) is stopped before.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken pipe
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
