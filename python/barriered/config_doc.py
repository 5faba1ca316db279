"""The reference tables of ``docs/configuration.md``, generated from the declarations.

``python -m barriered.config_doc [--check] [PATH]`` regenerates them (a test fails when
the document is stale): every session key of :data:`barriered.config.KEYS` between the
config-table markers, the source's and each upstream's options between the
source-options ones, the "barriered-delta" sink's options between the sink-options ones.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from barriered.config import BUFFER_PER_CHANNEL, KEYS, ConfigKey
from barriered.config.kafka_sink_options import KAFKA_SINK_OPTIONS
from barriered.config.sink_options import SINK_OPTIONS
from barriered.config.upstream_options import UPSTREAM_OPTIONS
from barriered.datasource.options import SOURCE_OPTIONS
from barriered.durations import format_duration
from barriered.errors import ConfigError

__all__ = [
    "DOC_MARKER_END",
    "DOC_MARKER_START",
    "config_table_markdown",
    "kafka_sink_options_markdown",
    "main",
    "options_markdown",
    "render_configuration_doc",
    "sink_options_markdown",
    "source_options_markdown",
    "write_configuration_doc",
]

DOC_MARKER_START = "<!-- config-table:start -->"
DOC_MARKER_END = "<!-- config-table:end -->"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _type_cell(config_key: ConfigKey) -> str:
    if config_key.type == "prefix":
        return "options passed on"
    if config_key.type == "enum":
        return "enum: " + " \\| ".join(f"`{c}`" for c in config_key.choices)
    fmt = format_duration if config_key.type == "duration" else str
    lo, hi = config_key.min_value, config_key.max_value
    bounds = ""
    if lo is not None and hi is not None:
        bounds = f" in [{fmt(lo)}, {fmt(hi)}]"
    elif lo is not None:
        bounds = f" ≥ {fmt(lo)}"
    unit = " (rows)" if config_key is BUFFER_PER_CHANNEL else ""
    return f"{config_key.type}{bounds}{unit}"


def config_table_markdown() -> str:
    """The reference table of every key, as Markdown.

    Returns
    -------
    str
        A table with one row per key: key, type (with bounds or choices), default,
        whether a per-source option may override it, whether it may change on
        restore, and its doc. Ends with a newline.
    """
    lines = [
        "| Key | Type | Default | Per-source option | May change on restore | Meaning |",
        "|---|---|---|---|---|---|",
    ]
    for config_key in KEYS:
        default = f"`{config_key.default}`" if config_key.default is not None else "(none)"
        option = f"`{config_key.name}`"
        restore = "yes" if config_key.restore_may_change else "**no**"
        lines.append(
            f"| `{config_key.key}` | {_type_cell(config_key)} | {default} | {option} | "
            f"{restore} | {_md(config_key.doc)} |"
        )
    return "\n".join(lines) + "\n"


SOURCE_DOC_MARKER_START = "<!-- source-options:start -->"
SOURCE_DOC_MARKER_END = "<!-- source-options:end -->"
SINK_DOC_MARKER_START = "<!-- sink-options:start -->"
SINK_DOC_MARKER_END = "<!-- sink-options:end -->"


KAFKA_DOC_MARKER_START = "<!-- kafka-sink-options:start -->"
KAFKA_DOC_MARKER_END = "<!-- kafka-sink-options:end -->"


def options_markdown(options: Sequence[ConfigKey]) -> str:
    """The reference table of some options (of the source, an upstream or the sink).

    Returns
    -------
    str
        A table with one row per option: name (``kafka.*`` for a family passed on to a
        client), type with bounds or choices, default, doc. Ends with a newline.
    """
    lines = ["| Option | Type | Default | Meaning |", "|---|---|---|---|"]
    for option in options:
        name = option.name + ("*" if option.type == "prefix" else "")
        default = option.default_doc or (
            f"`{option.default}`" if option.default is not None else "(none)"
        )
        lines.append(f"| `{name}` | {_type_cell(option)} | {default} | {_md(option.doc)} |")
    return "\n".join(lines) + "\n"


def source_options_markdown() -> str:
    """The source's options and each upstream's, under ``###`` headings, as Markdown."""
    parts = ["### Source options\n\n" + options_markdown(SOURCE_OPTIONS)]
    for upstream, options in UPSTREAM_OPTIONS.items():
        parts.append(f"### Upstream `{upstream}`\n\n" + options_markdown(options))
    return "\n".join(parts)


def sink_options_markdown() -> str:
    """The reference table of the "barriered-delta" sink's options, as Markdown."""
    return options_markdown(list(SINK_OPTIONS.values()))


def kafka_sink_options_markdown() -> str:
    """The reference table of the "barriered-kafka" sink's options, as Markdown."""
    return options_markdown(list(KAFKA_SINK_OPTIONS.values()))


def _replace_between(text: str, start_marker: str, end_marker: str, table: str) -> str:
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        raise ConfigError(
            f"the configuration document has no {start_marker} ... {end_marker} "
            "section; add both markers where the table goes"
        )
    return f"{text[: start + len(start_marker)]}\n{table}{text[end:]}"


def render_configuration_doc(text: str) -> str:
    """Replace the table between the config-table markers of a document.

    Parameters
    ----------
    text : str
        The document; it must contain :data:`DOC_MARKER_START` and
        :data:`DOC_MARKER_END` once each, in that order.

    Returns
    -------
    str
        The document with the current :func:`config_table_markdown` between them (and
        :func:`source_options_markdown` and :func:`sink_options_markdown` between the
        source-options and sink-options markers, when present).

    Raises
    ------
    ConfigError
        If the markers are missing or out of order.
    """
    text = _replace_between(text, DOC_MARKER_START, DOC_MARKER_END, config_table_markdown())
    if SOURCE_DOC_MARKER_START in text:
        text = _replace_between(
            text, SOURCE_DOC_MARKER_START, SOURCE_DOC_MARKER_END, source_options_markdown()
        )
    if SINK_DOC_MARKER_START in text:
        text = _replace_between(
            text, SINK_DOC_MARKER_START, SINK_DOC_MARKER_END, sink_options_markdown()
        )
    if KAFKA_DOC_MARKER_START in text:
        table = kafka_sink_options_markdown()
        text = _replace_between(text, KAFKA_DOC_MARKER_START, KAFKA_DOC_MARKER_END, table)
    return text


def _default_doc_path() -> Path:
    return Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def write_configuration_doc(path: str | Path | None = None, *, check: bool = False) -> bool:
    """Regenerate the table in ``docs/configuration.md`` (or check that it is current).

    Parameters
    ----------
    path : str or Path, optional
        The document; ``docs/configuration.md`` of the source checkout by default.
    check : bool, default False
        Only compare, do not write.

    Returns
    -------
    bool
        ``True`` if the document was already current.
    """
    doc = Path(path) if path is not None else _default_doc_path()
    text = doc.read_text(encoding="utf-8")
    rendered = render_configuration_doc(text)
    if rendered == text:
        return True
    if not check:
        doc.write_text(rendered, encoding="utf-8")
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m barriered.config_doc [--check] [PATH]``.

    Parameters
    ----------
    argv : sequence of str, optional
        Command-line arguments (``sys.argv[1:]`` by default).

    Returns
    -------
    int
        0 if the document is (now) current; 1 with ``--check`` if it is stale.
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m barriered.config_doc",
        description="Regenerate the configuration table in docs/configuration.md.",
    )
    parser.add_argument("path", nargs="?", help="the document (default: docs/configuration.md)")
    parser.add_argument("--check", action="store_true", help="fail if the table is stale")
    args = parser.parse_args(argv)
    current = write_configuration_doc(args.path, check=args.check)
    doc = args.path or _default_doc_path()
    if args.check and not current:
        print(f"{doc} is stale: run python -m barriered.config_doc", file=sys.stderr)
        return 1
    print(f"{doc}: {'up to date' if current else 'regenerated'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
