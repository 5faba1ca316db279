"""The command line's pure parts: formatting, checkpoint selection, plot, progress."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from barriered import cli
from barriered.config import BarrieredConf
from barriered.errors import CheckpointError
from barriered.files.fileio import write_json
from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from barriered.tools.history import (
    format_history,
    pick_checkpoint,
    retained_ids,
    select_checkpoint,
)
from barriered.tools.plot import ABORTED_STYLE, STYLES, checkpoint_figure, save_checkpoint_plot
from barriered.tools.progress import Progress, RichProgress, reporting
from barriered.tools.text import human_bytes, human_ms, text_table
from file_tree import tree


def row(cid: int, status: str = "completed", mode: str = "aligned", **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "checkpoint_id": cid,
        "kind": "checkpoint",
        "mode": mode,
        "effective_mode": mode if status == "completed" else None,
        "status": status,
        "failure_reason": None if status == "completed" else "expired",
        "trigger_timestamp_ms": 1_700_000_000_000 + cid * 1000,
        "end_to_end_duration_ms": 1000 + cid * 10,
        "alignment_duration_ms": 500 if mode == "aligned" else 0,
        "start_delay_ms": 5,
        "state_bytes": 20_000,
        "inflight_bytes": 8_000 if mode == "unaligned" else 0,
        "inflight_rows": 30 if mode == "unaligned" else 0,
        "num_acknowledged": 8,
        "num_expected": 8,
    }
    return {**base, **extra}


def test_human_numbers() -> None:
    assert [human_bytes(n) for n in (0, 999, 1000, 12_345, 4_500_000, None)] == [
        "0 B",
        "999 B",
        "1.00 KB",
        "12.3 KB",
        "4.50 MB",
        "-",
    ]
    assert [human_ms(n) for n in (0, 850, 1740, 125_000, None)] == [
        "0 ms",
        "850 ms",
        "1.74 s",
        "2 min 05 s",
        "-",
    ]


def test_text_table_aligns_numbers_right() -> None:
    table = text_table(("name", "n"), [("a", "5"), ("long name", "12")], right={1})
    assert table.splitlines() == ["name        n", "a           5", "long name  12"]


def test_history_shows_the_mode_the_cut_was_taken_in_and_why_one_aborted() -> None:
    rows = [
        row(1, mode="aligned_with_timeout", effective_mode="unaligned"),
        row(2, status="aborted"),
    ]
    lines = format_history(rows).splitlines()
    assert lines[1].split()[:4] == ["1", "checkpoint", "unaligned", "completed"]
    assert lines[2].split()[3] == "aborted" and lines[2].endswith("expired")
    assert "8/8" in lines[1].split()


def test_select_checkpoint_latest_retained_aborted_and_unknown() -> None:
    rows = [row(1), row(2, status="aborted"), row(3), row(4), row(5)]
    retained = [4, 5]
    assert select_checkpoint(rows, None, retained)["checkpoint_id"] == 5
    assert select_checkpoint(rows, 4, retained)["checkpoint_id"] == 4
    with pytest.raises(CheckpointError, match=r"checkpoint 2 was aborted \(expired\)"):
        select_checkpoint(rows, 2, retained)
    with pytest.raises(CheckpointError, match=r"checkpoint 3 is no longer retained.*4, 5"):
        select_checkpoint(rows, 3, retained)
    with pytest.raises(CheckpointError, match="checkpoint 9 is not in the history"):
        select_checkpoint(rows, 9, retained)
    with pytest.raises(CheckpointError, match="no completed checkpoint yet"):
        select_checkpoint([row(1, status="aborted")], None, [])


def test_retained_ids_follow_the_recorded_configuration(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    rows = [row(i) for i in range(1, 6)] + [row(6, status="aborted")]
    assert retained_ids(layout, rows) == [3, 4, 5]  # retainedCheckpoints defaults to 3
    (tmp_path / "_coordinator").mkdir()
    (tmp_path / "_coordinator" / "config.json").write_text('{"conf": {"retained_checkpoints": 1}}')
    assert retained_ids(layout, rows) == [5]


def rgb(hex_colour: str) -> tuple[int, ...]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))


def test_plot_draws_each_mode_in_its_own_colour(tmp_path: Path) -> None:
    rows = [row(1), row(2, mode="unaligned"), row(3, status="aborted"), row(4)]
    out = tmp_path / "p.png"
    save_checkpoint_plot(rows, str(out), "test")
    colours = {c: n for n, c in Image.open(out).convert("RGB").getcolors(1 << 24) or []}
    for hex_colour in (STYLES["aligned"][0], STYLES["unaligned"][0], ABORTED_STYLE[0]):
        assert colours.get(rgb(hex_colour), 0) > 50, hex_colour
    assert colours.get(rgb(STYLES["at_least_once"][0]), 0) == 0  # no such checkpoint
    fig = checkpoint_figure(rows)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:3] == ["aligned", "unaligned", "aborted"]


def test_nothing_to_plot_is_an_error() -> None:
    with pytest.raises(CheckpointError, match="nothing to plot"):
        checkpoint_figure([])


def test_plain_progress_writes_steps_and_log_lines_apart() -> None:
    out, steps = io.StringIO(), io.StringIO()
    with reporting(out, steps) as progress:
        assert type(progress) is Progress
        progress.step("reading", total=2)
        progress.advance()
        progress.log("result")
    assert steps.getvalue() == "barriered: reading\n"
    assert out.getvalue() == "result\n"


def test_rich_progress_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    with reporting(out) as progress:
        assert isinstance(progress, RichProgress)
        progress.step("phase one", total=3)
        progress.advance(3)
        progress.log("checkpoint 1 completed")
        progress.step("phase two")
    text = out.getvalue()
    assert "checkpoint 1 completed" in text and "phase two" in text


def test_bad_command_lines_exit_2_with_the_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's promise: 0 done, 1 an error, 2 a bad command line (argparse's)."""
    for argv in (["inspect", "x", "--checkpoint", "0"], ["plot", "x"], ["nope"]):
        assert cli.main(argv) == 2
    assert "checkpoint ids start at 1" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    capsys.readouterr()
    # An option that only applies with --key is refused, not silently ignored.
    before = tree(tmp_path)
    assert cli.main(["inspect", str(tmp_path), "--partitions", "8"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "barriered inspect: error: --partitions only applies with --key (where one key lives)"
    )
    assert cli.main(["inspect", str(tmp_path), "--partitions", "8", "--operator", "op"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "barriered inspect: error: --partitions and --operator only apply with --key (where "
        "one key lives)"
    )
    assert tree(tmp_path) == before


def test_history_shows_how_far_an_aligned_with_timeout_alignment_overshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    conf = BarrieredConf(snapshot_path=layout.root, aligned_checkpoint_timeout_ms=1500)
    write_json(layout.config_file, {"conf": conf.to_dict(), "channels": 4})
    timeout = "aligned_with_timeout"
    for finished in (
        row(1, mode=timeout, effective_mode="aligned", alignment_duration_ms=2132),
        row(2, mode=timeout, effective_mode="unaligned", alignment_duration_ms=1700),
        row(3, mode=timeout, effective_mode="aligned", alignment_duration_ms=900),
        row(4, alignment_duration_ms=3000),  # plain aligned: no timeout to overshoot
    ):
        checkpoints_table.append(layout, finished)
    assert cli.main(["checkpoints", layout.root]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "overshoot" in lines[0].split()
    assert lines[1].split()[8:11] == ["2.13", "s", "+632"]
    assert lines[2].split()[2] == "unaligned" and lines[2].split()[8:11] == ["1.70", "s", "+200"]
    assert "+" not in lines[3] and "+" not in lines[4]
    assert cli.main(["checkpoints", layout.root, "--json"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["alignment_overshoot_ms"] for r in printed] == [632, 200, None, None]


def test_pick_checkpoint_picks_among_the_retained_and_may_find_none(tmp_path: Path) -> None:
    layout = SnapshotLayout.at(str(tmp_path))
    rows = [row(i) for i in range(1, 6)]
    assert pick_checkpoint(layout, rows, None)["checkpoint_id"] == 5
    with pytest.raises(CheckpointError, match="checkpoint 2 is no longer retained"):
        pick_checkpoint(layout, rows, 2, required=False)
    aborted = [row(1, status="aborted")]
    assert pick_checkpoint(layout, aborted, None, required=False) is None
    with pytest.raises(CheckpointError, match="no completed checkpoint yet"):
        pick_checkpoint(layout, aborted, None)


def test_row_of_is_the_newest_row_of_a_checkpoint() -> None:
    rows = [row(1), row(2, status="aborted"), row(2), row(3)]
    found = checkpoints_table.row_of(rows, 2)
    assert found is not None and found["status"] == "completed"
    assert checkpoints_table.row_of(rows, 4) is None
    found["status"] = "changed"  # a copy: the rows stay as read
    assert rows[2]["status"] == "completed"
