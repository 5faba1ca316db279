"""The reference docs list exactly what the code has: source options, table columns.

The option tables are generated (``python -m barriered.config_doc``); these tests read
the generated document, so a declaration missing from it, or a stale row, fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from barriered.config import ConfigKey
from barriered.config.upstream_options import UPSTREAM_OPTIONS
from barriered.datasource.options import SOURCE_OPTIONS
from barriered.statestore import checkpoints_table

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"


def names(options: tuple[ConfigKey, ...]) -> set[str]:
    """The documented names: ``kafka.*`` for a family of options under a prefix."""
    return {k.name.lower() + ("*" if k.type == "prefix" else "") for k in options}


def option_tables(text: str) -> dict[str, set[str]]:
    """The first-column names of each option table, by the ``###`` heading above it."""
    tables: dict[str, set[str]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
        elif heading and re.match(r"\|\s*`[^`]+`\s*\|", line):
            name = line.split("|")[1].strip().strip("`")
            tables.setdefault(heading, set()).add(name.lower())
        elif line.startswith("## "):
            heading = ""
    return tables


def documented() -> dict[str, set[str]]:
    return option_tables(DOC.read_text(encoding="utf-8"))


def test_source_options_table_matches_the_code() -> None:
    assert documented()["Source options"] == names(SOURCE_OPTIONS)


@pytest.mark.parametrize("upstream", sorted(UPSTREAM_OPTIONS))
def test_upstream_options_table_matches_the_code(upstream: str) -> None:
    assert documented()[f"Upstream `{upstream}`"] == names(UPSTREAM_OPTIONS[upstream])
    assert "storageoptions.*" in documented()["Upstream `delta`"]


def test_no_table_documents_an_upstream_the_code_does_not_have() -> None:
    expected = {"Source options", *(f"Upstream `{u}`" for u in UPSTREAM_OPTIONS)}
    assert set(documented()) == expected


def test_the_parser_sees_a_missing_and_an_extra_option() -> None:
    text = (
        "### Upstream `rate`\n\n| option | meaning |\n|---|---|\n| `keys` | k |\n| `extra` | x |\n"
    )
    assert option_tables(text) == {"Upstream `rate`": {"keys", "extra"}}


def test_checkpoints_table_columns_are_documented() -> None:
    text = (ROOT / "statestore" / "README.md").read_text(encoding="utf-8")
    section = text.split("### `_checkpoints`", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = {name for cell in rows for name in re.findall(r"`([a-z_]+)`", cell)}
    assert documented == set(checkpoints_table.SCHEMA.names)


def cited_documents(text: str) -> set[str]:
    """Markdown files a text cites by a path with a folder (``docs/design.md``,
    ``statestore/README.md``, ``../docs/design.md`` in a link), as written."""
    text = re.sub(r"https?://\S+", "", text)  # a web page is not the repository's
    return set(re.findall(r"(?<![\w/.])((?:\.\./)*(?:[\w-]+/)+[\w-]+\.md)\b", text))


def test_every_document_the_code_and_docs_cite_is_in_the_repository() -> None:
    """The repository stands alone: a docstring, comment or document that names a
    Markdown file names one of the repository's own (the barrier rules, the design)."""
    missing = []
    sources = [*(ROOT / "python").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    sources.remove(Path(__file__).resolve())  # its examples below
    sources += [p for p in ROOT.rglob("*.md") if not ({".venv", "build"} & set(p.parts))]
    for path in sources:
        for cited in cited_documents(path.read_text(encoding="utf-8")):
            here = (path.parent / cited).resolve()
            if not here.is_file() and not (ROOT / cited).is_file():
                missing.append(f"{path.relative_to(ROOT)}: {cited}")
    assert missing == []
    assert cited_documents("see ``shared/conformance/README.md`` and [d](../docs/design.md)") == {
        "shared/conformance/README.md",
        "../docs/design.md",
    }
