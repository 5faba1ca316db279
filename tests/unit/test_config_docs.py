"""docs/configuration.md carries the current reference table of every key."""

from __future__ import annotations

from pathlib import Path

import pytest

from barriered import config_doc
from barriered.errors import ConfigError

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_configuration_doc_is_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert config_doc.render_configuration_doc(text) == text, (
        "docs/configuration.md is stale: run `python -m barriered.config_doc`"
    )
    assert config_doc.write_configuration_doc(DOC, check=True)


def test_every_key_is_in_the_doc() -> None:
    text = DOC.read_text(encoding="utf-8")
    for config_key in config_doc.KEYS:
        assert f"`{config_key.key}`" in text


def test_regenerate_replaces_only_the_table(tmp_path: Path) -> None:
    doc = tmp_path / "configuration.md"
    doc.write_text(
        f"# Intro\n\n{config_doc.DOC_MARKER_START}\nold table\n"
        f"{config_doc.DOC_MARKER_END}\n\nOutro\n",
        encoding="utf-8",
    )
    assert config_doc.main([str(doc), "--check"]) == 1
    assert "old table" in doc.read_text(encoding="utf-8")
    assert config_doc.main([str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Intro\n\n")
    assert text.endswith(f"{config_doc.DOC_MARKER_END}\n\nOutro\n")
    assert "old table" not in text
    assert config_doc.config_table_markdown() in text
    assert config_doc.main([str(doc), "--check"]) == 0


def test_missing_markers_are_an_error() -> None:
    with pytest.raises(ConfigError, match="config-table:start"):
        config_doc.render_configuration_doc("# no markers\n")


def test_table_has_one_row_per_key_and_escapes_pipes() -> None:
    table = config_doc.config_table_markdown()
    rows = [line for line in table.splitlines() if line.startswith("| `spark.")]
    assert len(rows) == len(config_doc.KEYS)
    mode_row = next(r for r in rows if "barriered.mode`" in r)
    assert "`exactlyOnce` \\| `atLeastOnce`" in mode_row
    max_p_row = next(r for r in rows if "maxParallelism`" in r)
    assert "| `maxParallelism` | **no** |" in max_p_row
