"""``barriered savepoint bootstrap|transform``: command lines refused before any Spark
session starts (one line on stderr, exit code 1, nothing written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from barriered import cli


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["transform", "SNAP", "-o", "OUT", "--operator", "op"],
         "transform: give at least one of --where, --add, --drop, --cast"),
        (["transform", "SNAP", "-o", "OUT", "--operator", "op", "--add", "bonus = 0"],
         "--add 'bonus = 0' is not 'NAME TYPE = SQL DEFAULT'"),
        (["transform", "SNAP", "-o", "OUT", "--operator", "op", "--cast", "total"],
         "--cast 'total' is not KEY=VALUE"),
        (["bootstrap", "-o", "OUT", "--input", "IN", "--keys", "k", "--processor",
          "barriered.examples:RunningTotals", "--source", "upstream"],
         "--source 'upstream' is not KEY=VALUE"),
        (["bootstrap", "-o", "OUT", "--input", "IN", "--keys", "k", "--processor",
          "barriered.examples:Nope", "--source", "upstream=files"],
         "--processor 'barriered.examples:Nope' cannot be loaded"),
        (["bootstrap", "-o", "OUT", "--input", "IN", "--keys", "k", "--processor",
          "barriered.examples", "--source", "upstream=files"],
         "give it as MODULE:CLASS"),
    ],
)  # fmt: skip
def test_bad_command_lines_are_refused_before_spark_starts(
    words: list[str], message: str, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "OUT"
    words = [str(out) if w == "OUT" else w for w in words]
    assert cli.main(["savepoint", *words]) == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_the_subcommands_have_their_own_usage(capsys: Any) -> None:
    assert cli.main(["savepoint", "bootstrap", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: barriered savepoint bootstrap")
    assert cli.main(["savepoint", "transform"]) == 2  # PATH, -o and --operator are required
    assert "usage: barriered savepoint transform" in capsys.readouterr().err


def test_help_names_the_offline_commands_as_they_are_typed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["--help"]) == 0
    shown = capsys.readouterr().out
    assert "savepoint bootstrap|transform: write state offline" in " ".join(shown.split())
    assert "savepoint-bootstrap" not in shown and "savepoint-transform" not in shown
