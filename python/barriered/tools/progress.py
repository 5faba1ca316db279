"""Progress of long work: a live rich display on a terminal, plain lines otherwise.

A command reports *steps* (a description, optionally a total to advance towards) and
*log lines* (results that stay, such as one line per finished checkpoint). On a terminal
the steps are a transient rich progress bar and the log lines print above it; when the
output is a pipe or a file, each step is one plain line on stderr (so stdout stays
machine-readable) and log lines go to stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO


class Progress:
    """Reports long work as plain lines: steps to ``steps``, log lines to ``out``."""

    def __init__(self, out: TextIO, steps: TextIO) -> None:
        self._out = out
        self._steps = steps

    def step(self, description: str, total: float | None = None) -> None:
        """Start a step (and end the previous one); ``total`` is what :meth:`advance` counts."""
        print(f"barriered: {description}", file=self._steps, flush=True)

    def advance(self, amount: float = 1.0) -> None:
        """Move the current step forward by ``amount`` (of its ``total``)."""

    def log(self, line: str) -> None:
        """Print a line that stays (a result, not a status)."""
        print(line, file=self._out, flush=True)


class RichProgress(Progress):
    """Reports long work with a transient rich progress bar on terminal ``out``."""

    def __init__(self, out: TextIO) -> None:
        super().__init__(out, out)
        from rich import progress as bars
        from rich.console import Console

        self._bar = bars.Progress(
            bars.SpinnerColumn(),
            bars.TextColumn("{task.description}"),
            bars.BarColumn(),
            bars.TimeElapsedColumn(),
            console=Console(file=out),
            transient=True,
        )
        self._task: Any = None

    def __enter__(self) -> RichProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def step(self, description: str, total: float | None = None) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._task = self._bar.add_task(description, total=total)

    def advance(self, amount: float = 1.0) -> None:
        if self._task is not None:
            self._bar.advance(self._task, amount)

    def log(self, line: str) -> None:
        self._bar.console.print(line, markup=False, highlight=False, soft_wrap=True)


@contextmanager
def reporting(out: TextIO | None = None, steps: TextIO | None = None) -> Iterator[Progress]:
    """Yield a :class:`RichProgress` when ``out`` is a terminal, else a plain one.

    Parameters
    ----------
    out : TextIO, optional
        Where results go (default ``sys.stdout``); its ``isatty()`` picks the display.
    steps : TextIO, optional
        Where plain step lines go (default ``sys.stderr``).
    """
    out = out or sys.stdout
    if out.isatty():
        with RichProgress(out) as rich:
            yield rich
    else:
        yield Progress(out, steps or sys.stderr)
