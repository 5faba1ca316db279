"""The ``barriered`` command line and the notebook views against one real run.

One availableNow query (skewed ``rate`` upstream, aligned checkpoints that time out into
unaligned ones) makes the snapshot path every test here reads, so the module costs one
Spark run on a classic session and one over Spark Connect. The expectations come from the
run's own Delta tables and the upstream.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from pyspark.sql import functions as F

import barriered
from barriered import cli
from barriered.datasource.upstreams.rate import RateUpstream
from barriered.examples import RunningTotals
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_log import StateFiles
from barriered.testing.expected import running_totals
from barriered.testing.session import barriered_keys
from barriered.tools.history import display_columns
from barriered.tools.plot import STYLES
from barriered.views import CONCISE

pytestmark = pytest.mark.spark

CHANNELS, ROWS, KEYS = 3, 60, 20
SOURCE = {
    "upstream": "rate",
    "channels": str(CHANNELS),
    "rowsPerSecond": "0",
    "rowsPerChannel": str(ROWS),
    "skew": "0:3",
    "keys": str(KEYS),
    "maxRowsPerChannel": "30",
}
CONF = {
    "checkpointInterval": "10ms",
    "maxParallelism": "8",
    "bufferPerChannel": "100",
    "retainedCheckpoints": "100",
    "unaligned.enabled": "true",
    "alignedCheckpointTimeout": "10ms",
    "unaligned.adaptive": "false",
}


@pytest.fixture(
    scope="module", params=["classic", pytest.param("connect", marks=pytest.mark.connect)]
)
def run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """One finished availableNow run: its session, query, snapshot path and
    ``_checkpoints`` rows (on a classic session, or over Spark Connect)."""
    spark = request.getfixturevalue("spark" if request.param == "classic" else "connect_spark")
    base = tmp_path_factory.mktemp("cli-run")
    barriered.install(spark)
    with barriered_keys(spark, CONF):
        events = spark.readStream.format("barriered").options(**SOURCE)
        events = events.option("snapshotPath", str(base / "snap")).load()
        query = (
            barriered.keyed(events, "user_id")
            .process(RunningTotals())
            .writeStream.format("noop")
            .option("checkpointLocation", str(base / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        barriered.await_termination(query, timeout=300)
    layout = SnapshotLayout.at(str(base / "snap"))
    rows = checkpoints_table.read_rows(layout)
    yield {"spark": spark, "query": query, "path": layout.root, "rows": rows}


def upstream() -> RateUpstream:
    return RateUpstream(CHANNELS, 0, ROWS, KEYS, {0: 3.0}, state_dir="/nonexistent")


def final_positions() -> dict[str, int]:
    return {str(c): p for c, p in enumerate(upstream().available())}


def test_await_termination_returns_with_the_final_checkpoint_recorded(
    run: dict[str, Any],
) -> None:
    done = [r for r in run["rows"] if r["status"] == "completed"]
    assert len(done) >= 2
    assert json.loads(done[-1]["barrier_positions"]) == final_positions()


def test_checkpoints_prints_one_line_per_checkpoint(
    run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["checkpoints", run["path"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["id", "kind", "mode", "status"]
    assert len(lines) == 1 + len(run["rows"])
    for line, row in zip(lines[1:], run["rows"], strict=True):
        cells = line.split()
        assert cells[0] == str(row["checkpoint_id"])
        assert cells[2] == (row["effective_mode"] or row["mode"])
        assert cells[3] == row["status"]
        assert f"{row['num_acknowledged']}/{row['num_expected']}" in cells

    assert cli.main(["checkpoints", run["path"], "--json"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    overshoot = [p.pop("alignment_overshoot_ms") for p in printed]  # derived, not stored
    assert printed == run["rows"]
    assert len(overshoot) == len(printed)


def test_inspect_reports_the_state_and_in_flight_of_a_checkpoint(
    run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["inspect", run["path"], "--json"]) == 0
    out, err = capsys.readouterr()
    latest = json.loads(out)
    last = [r for r in run["rows"] if r["status"] == "completed"][-1]
    assert latest["checkpoint"]["checkpoint_id"] == last["checkpoint_id"]
    assert "reading the state table at version" in err  # plain progress lines
    groups = latest["key_groups"]
    assert sum(g["rows"] for g in groups) == KEYS == last["state_rows"]
    version = last["state_table_version"]
    # the bytes of the version's files that hold its rows (a file whose every row a later
    # file replaced keeps a deletion vector of them all until its partition compacts)
    holding = [f for f in StateFiles(str(Path(run["path"]) / "state"), version).files.values()
               if f.live_rows > 0]  # fmt: skip
    on_disk = sum(os.path.getsize(Path(run["path"], "state", f.path)) for f in holding)
    assert sum(g["bytes"] for g in groups) == on_disk
    assert all(g["written_by"] <= last["checkpoint_id"] for g in groups)
    assert {str(c["channel"]): c["barrier"] for c in latest["channels"]} == final_positions()

    overtaken = [r for r in run["rows"] if r["status"] == "completed" and r["inflight_rows"]]
    assert overtaken, "no checkpoint timed out into unaligned under the skew"
    row = overtaken[0]
    assert cli.main(["inspect", run["path"], "--checkpoint", str(row["checkpoint_id"])]) == 0
    text = capsys.readouterr().out
    assert f"checkpoint {row['checkpoint_id']} (checkpoint, unaligned)" in text
    argv = ["inspect", run["path"], "--checkpoint", str(row["checkpoint_id"]), "--json"]
    assert cli.main(argv) == 0
    channels = json.loads(capsys.readouterr().out)["channels"]
    ranges = [c for c in channels if c["inflight_start"] is not None]
    assert sum(c["inflight_end"] - c["inflight_start"] for c in ranges) == row["inflight_rows"]
    assert all(c["inflight_stored_rows"] == c["inflight_end"] - c["inflight_start"] for c in ranges)
    assert all(c["inflight_end"] == c["barrier"] for c in ranges)


def test_plot_writes_a_png_with_the_modes_of_the_run(
    run: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plots" / "checkpoints.png"
    assert cli.main(["plot", run["path"], "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    image = Image.open(out).convert("RGB")
    assert image.size == (1000, 800)
    colours = {rgb: n for n, rgb in image.getcolors(maxcolors=1 << 24) or []}
    white = colours.get((255, 255, 255), 0)
    assert len(colours) > 20 and white < 0.95 * image.width * image.height
    modes = {r["effective_mode"] for r in run["rows"] if r["status"] == "completed"}
    for mode in modes:
        hex_colour = STYLES[mode][0]
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        assert colours.get(rgb, 0) > 100, f"{mode} checkpoints are not drawn in {hex_colour}"


def test_errors_are_one_line_without_traceback(
    run: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        (["checkpoints", str(tmp_path / "missing")], "does not exist"),
        (["inspect", str(tmp_path)], "is not a snapshot path"),
        (["inspect", run["path"], "--checkpoint", "999"], "checkpoint 999 is not in the history"),
        (["plot", run["path"], "-o", str(tmp_path / "p.jpg")], "the plot is a PNG file"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 1, argv
        last = capsys.readouterr().err.splitlines()[-1]
        assert last.startswith("barriered: error: ") and message in last, last
    # The installed entry point, as a user runs it: one line on stderr, exit 1.
    proc = subprocess.run(
        [sys.executable, "-m", "barriered", "inspect", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].endswith("does not exist")
    assert "Traceback" not in proc.stderr


def test_inspect_on_a_terminal_shows_a_progress_bar(
    run: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert cli.main(["inspect", run["path"]]) == 0
    shown = terminal.getvalue()
    assert "reading the in-flight records" in shown  # drawn by rich, then cleared
    assert "\x1b[" in shown  # terminal control sequences
    assert "key group" in shown  # the result itself
    assert capsys.readouterr().err == ""  # no plain progress lines on a terminal


def test_notebook_views_of_the_run(run: dict[str, Any]) -> None:
    spark = run["spark"]
    history = barriered.checkpoints(spark, run["query"], full=True)
    assert history.columns == display_columns()
    assert history.columns[:3] == ["checkpoint_id", "kind", "mode"]
    first = history.first()
    assert first is not None and dict(history.dtypes)["trigger_time"] == "timestamp"
    row = run["rows"][0]
    assert first["acks"] == f"{row['num_acknowledged']}/{row['num_expected']}"
    assert int(first["trigger_time"].timestamp() * 1000) == row["trigger_timestamp_ms"]
    assert history.count() == len(run["rows"])
    concise = barriered.checkpoints(spark, run["query"])  # the default: show() in 100 columns
    assert concise.columns == list(CONCISE)
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        concise.show()
    lines = shown.getvalue().splitlines()
    assert [c.strip() for c in lines[1].split("|")[1:-1]] == list(CONCISE)
    assert max(len(line) for line in lines) <= 100, lines[0]
    top = concise.first()
    assert top is not None and top["id"] == row["checkpoint_id"]
    assert top["mode"] == row["effective_mode"]
    assert top["e2e_ms"] == row["end_to_end_duration_ms"]

    state = barriered.state_table(spark, run["path"])
    totals = state.select(F.col("user_id").alias("user"), "total").collect()
    ends = dict(enumerate(upstream().available()))
    assert {r["user"]: r["total"] for r in totals} == running_totals(upstream(), ends)
    with pytest.raises(barriered.BarrieredError, match="not in the history"):
        barriered.state_table(spark, run["path"], checkpoint=999)

    fig = barriered.plot_checkpoints(run["query"])
    assert len(fig.axes) == 3
    assert fig.axes[2].get_xlabel() == "checkpoint id"


def test_demo_runs_every_mode_its_screen_has_only_its_lines_and_its_next_steps_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``make demo`` in its own process (its own Spark, as a user runs it): every mode
    runs and leaves its snapshot path, Spark's output goes to a log, and the commands the
    demo suggests last each run."""
    command = [sys.executable, "-m", "barriered", "demo", "--out", str(tmp_path)]
    done = subprocess.run(
        [*command, "--duration", "3"], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out, err = done.stdout, done.stderr
    spark_log = tmp_path / "spark.log"
    assert f"Spark's console output: {spark_log}" in out
    for spark_line in ("Python worker", "Starting execution of UDF", "log4j", "WARN"):
        assert spark_line not in out + err, out + err
    assert "Using Spark's default log4j profile" in spark_log.read_text(errors="replace")
    for phase in ("aligned", "unaligned", "aligned_with_timeout"):
        assert f"barriered: {phase}: 1 s" in err  # one plain progress line per phase
        summary = [line for line in out.splitlines() if line.startswith(phase + " ")]
        assert len(summary) == 1, out
        assert cli.main(["checkpoints", str(tmp_path / "snapshots" / phase), "--json"]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert int(summary[0].split()[1]) == sum(r["status"] == "completed" for r in rows)
        assert (tmp_path / "plots" / f"{phase}.png").exists() == bool(rows)
    # the demo's last lines: commands that look further, each one the CLI takes
    commands = [line.split()[1:] for line in out.splitlines() if line.startswith("  barriered ")]
    assert commands[0][0] == "checkpoints"
    for words in commands:
        if words[0] == "plot":
            words[-1] = str(tmp_path / words[-1])
        if words[0] == "ui":  # serves until stopped: its own process, asked for its page
            _serves_its_page([*words, "--port", "0"])
            continue
        assert cli.main(words) == 0, words


def _serves_its_page(words: list[str]) -> None:
    """Start ``barriered <words>`` (a server), fetch the page it prints, stop it."""
    command = [sys.executable, "-m", "barriered", *words]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        url = first.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200 and "Checkpoints of" in page.read().decode()
    finally:
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
    assert server.returncode == 0 and "stopped" in out, (first, out)


@pytest.mark.kafka
@pytest.mark.full  # 10 s per mode: checkpoints (every 2 s) complete in each
def test_demo_on_kafka_reads_the_topic_it_fills(
    spark: Any, kafka_broker: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``demo --kafka``: every mode reads the topic from its start; each phase's last
    checkpoint holds exactly the totals of the records below its barrier offsets, but
    for the in-flight records an unaligned cut overtook."""
    with barriered_keys(spark, {}):
        args = ["demo", "--out", str(tmp_path), "--duration", "30", "--kafka"]
        assert cli.main([*args, kafka_broker.bootstrap]) == 0
    out = capsys.readouterr().out
    (topic,) = [line.split()[2].rstrip(":") for line in out.splitlines() if "Kafka topic" in line]
    assert kafka_broker.end_offsets(topic) == {0: 18000, 1: 4500, 2: 4500, 3: 4500}
    published = kafka_broker.read_committed(topic)
    for phase in ("aligned", "unaligned", "aligned_with_timeout"):
        assert len([line for line in out.splitlines() if line.startswith(phase + " ")]) == 1
        snap = tmp_path / "snapshots" / phase
        assert cli.main(["checkpoints", str(snap), "--json"]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        done = [r for r in rows if r["status"] == "completed"]
        assert done, out
        barrier = json.loads(done[-1]["barrier_positions"])
        assert set(barrier) == {f"{topic}-{p}" for p in range(4)}
        assert barrier[f"{topic}-0"] < 18000  # 250 offsets a batch: partition 0 lags
        assert cli.main(["inspect", str(snap), "--json"]) == 0
        overtaken = {  # an unaligned cut's in-flight records: stored, not in the state yet
            c["name"]: (c["inflight_start"], c["inflight_end"])
            for c in json.loads(capsys.readouterr().out)["channels"]
            if c["inflight_start"] is not None
        }
        expected: dict[str, int] = {}
        for r in published:
            name = f"{topic}-{r.partition}"
            start, end = overtaken.get(name, (0, 0))
            if r.offset < barrier[name] and not start <= r.offset < end:
                user = r.key.decode()
                expected[user] = expected.get(user, 0) + int(r.value.decode())
        state = barriered.state_table(spark, str(snap)).collect()
        assert {r["user_id"]: r["total"] for r in state} == expected
