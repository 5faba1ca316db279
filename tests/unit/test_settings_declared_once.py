"""Every setting is declared once, and what uses it reads the declaration (no Spark).

A grep-style scan of ``python/`` finds each setting's name as a string literal in its
:class:`~barriered.config.ConfigKey` declaration only; the coordinator's defaults and
bounds, the source's and the upstreams' defaults and bounds, and the generated docs are
checked against the declarations.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from pathlib import Path

import pytest

from barriered import config_doc
from barriered.config import KEYS, BarrieredConf, ConfigKey
from barriered.config.conf import field_value
from barriered.config.sink_options import SINK_OPTIONS
from barriered.config.upstream_options import (
    CHANNELS,
    DEFAULT_CHANNELS,
    ROWS_PER_SECOND,
    UPSTREAM,
    UPSTREAM_OPTIONS,
)
from barriered.config.upstream_options import KEYS as RATE_KEYS
from barriered.coordinator.settings import FIELD_KEYS, CoordinatorSettings
from barriered.datasource.options import (
    MAX_ROWS_PER_CHANNEL,
    ROWS_PER_PARTITION,
    SESSION_CONF_OPTION,
    SOURCE_OPTIONS,
    parse_source_options,
)
from barriered.datasource.upstreams.rate import RateUpstream
from barriered.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "barriered"

DECLARATIONS: tuple[ConfigKey, ...] = tuple(
    dict.fromkeys(
        [
            *KEYS,
            UPSTREAM,
            *SOURCE_OPTIONS,
            *(k for options in UPSTREAM_OPTIONS.values() for k in options),
            *SINK_OPTIONS.values(),
        ]
    )
)

#: Names that are also ordinary field names (of manifests, offsets, reports, Spark's own
#: API), so a grep cannot tell the setting from the field: only their declarations are
#: counted. Every other name must appear in its declaration only.
GENERIC = {"path", "mode", "channels", "schema", "format", "upstream", "keys"}

#: Literal uses that are not the setting but a persisted or reported field of the same
#: name: (file under python/barriered, name) -> why.
FIELDS_OF_THE_SAME_NAME = {
    ("datasource/upstreams/files.py", "channelBy"): "manifest header and describe()",
    ("datasource/upstreams/files.py", "archiveTo"): "describe()",
    ("datasource/upstreams/delta.py", "channelBy"): "manifest header and describe()",
    ("datasource/upstreams/delta.py", "startingVersion"): "manifest header and describe()",
    ("session.py", "partitionBy"): "a parameter of Spark's DataStreamWriter.start",
    ("coordinator/listener.py", "snapshotPath"): "field of the source's progress report",
    ("datasource/reader.py", "snapshotPath"): "field of the source's progress report",
    ("control/offsets.py", "snapshotPath"): "field of the source's progress report",
}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module and its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def _declared_names(tree: ast.AST) -> list[int]:
    """The ids of the name arguments of ``ConfigKey(...)`` calls."""
    return [
        id(node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "ConfigKey"
        and node.args
    ]


@functools.cache
def _strings(text: str) -> tuple[tuple[str, bool], ...]:
    """Every string constant of Python source ``text`` but docstrings, and whether it is
    the name argument of a ``ConfigKey(...)`` declaration."""
    tree = ast.parse(text)
    skip = _docstrings(tree)
    declared = set(_declared_names(tree))
    return tuple(
        (node.value, id(node) in declared)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
    )


def scan(text: str, name: str) -> tuple[int, int]:
    """(literal uses, declarations) of ``name`` in Python source ``text``: a use is a
    string constant (docstrings aside) that is ``name`` or quotes it, as messages do."""
    quoted = re.compile(rf"""(?<![\w.])["']{re.escape(name)}["']""")
    uses = declarations = 0
    for value, is_declaration in _strings(text):
        if value == name and is_declaration:
            declarations += 1
        elif value == name or quoted.search(value):
            uses += 1
    return uses, declarations


def literal_uses(text: str, name: str) -> int:
    return scan(text, name)[0]


def declarations_of(text: str, name: str) -> int:
    return scan(text, name)[1]


SOURCES = {
    str(path.relative_to(PACKAGE)): path.read_text(encoding="utf-8")
    for path in sorted(PACKAGE.rglob("*.py"))
}


def test_the_scan_sees_a_literal_and_skips_a_declaration() -> None:
    name = "maxRowsPerChannel"
    text = f'X = ConfigKey(\n    "{name}",\n)\nopts.get("{name}")\n'
    assert scan(text, name) == (1, 1)
    assert scan(f"x = f\"option '{name}' is {{bad}}\"", name) == (1, 0)
    assert scan(f'def f():\n    """.option("{name}", 5) in a docstring"""', name) == (0, 0)
    assert scan(f'x = "{name}s"', name) == (0, 0)


@pytest.mark.parametrize("name", sorted({k.name for k in DECLARATIONS} - GENERIC))
def test_a_setting_name_is_written_in_its_declaration_only(name: str) -> None:
    stray = {
        file: literal_uses(text, name)
        for file, text in SOURCES.items()
        if literal_uses(text, name) and (file, name) not in FIELDS_OF_THE_SAME_NAME
    }
    assert stray == {}, f"{name!r} written outside its declaration: use the ConfigKey's .name"
    declared = sum(declarations_of(text, name) for text in SOURCES.values())
    assert declared == 1, f"{name!r} is declared {declared} times"


@pytest.mark.parametrize(
    ("name", "declared"),
    # path: the files/delta upstreams' and the sink's; mode: the session key and the sink's
    [("path", 2), ("mode", 2), ("channels", 1), ("schema", 1), ("format", 1), ("upstream", 1)],
)
def test_a_generic_name_has_one_declaration_per_component(name: str, declared: int) -> None:
    assert sum(declarations_of(text, name) for text in SOURCES.values()) == declared


def test_every_option_is_declared_in_config() -> None:
    """Session keys, the source's, the upstreams' and the sinks' options: each
    ``ConfigKey(...)`` is in ``barriered/config/`` (the packages import them)."""
    outside = {
        file
        for file, text in SOURCES.items()
        if not file.startswith("config/")
        and any(
            isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ConfigKey"
            for node in ast.walk(ast.parse(text))
        )
    }
    assert outside == set()


def test_the_session_prefix_is_written_once() -> None:
    files = [f for f, text in SOURCES.items() if '"spark.sql.streaming.barriered."' in text]
    assert files == ["config/declaration.py"]


def test_barriered_conf_has_one_field_per_key_with_the_declared_default() -> None:
    conf = BarrieredConf()
    assert [f.name for f in dataclasses.fields(conf)] == [k.field for k in KEYS]
    for config_key in KEYS:
        expected = field_value(config_key, config_key.default_value)
        assert getattr(conf, config_key.field) == expected, config_key.name


def test_coordinator_defaults_and_bounds_are_the_declared_ones() -> None:
    settings = CoordinatorSettings()
    for name, config_key in FIELD_KEYS.items():
        assert getattr(settings, name) == field_value(config_key, config_key.default_value)
        if config_key.min_value is not None:
            with pytest.raises(ConfigError) as info:
                CoordinatorSettings(**{name: config_key.min_value - 1})  # type: ignore[arg-type]
            assert f"must be{config_key.range_text().removeprefix(',')}," in str(info.value)


def test_source_defaults_and_bounds_are_the_declared_ones(tmp_path: Path) -> None:
    base = {"snapshotPath": str(tmp_path / "snap"), SESSION_CONF_OPTION: "{}"}
    settings = parse_source_options(base)
    assert settings.upstream == UPSTREAM.default
    assert settings.rows_per_partition == ROWS_PER_PARTITION.default_value
    assert settings.max_rows_per_channel is MAX_ROWS_PER_CHANNEL.default_value is None
    with pytest.raises(ConfigError) as info:
        parse_source_options({**base, MAX_ROWS_PER_CHANNEL.name: "0"})
    assert str(info.value).startswith(MAX_ROWS_PER_CHANNEL.where)
    assert str(info.value).endswith(MAX_ROWS_PER_CHANNEL.range_text())

    rate = RateUpstream.from_options({}, str(tmp_path / "rate"))
    assert rate.channels == DEFAULT_CHANNELS and CHANNELS.default is None
    assert rate.rows_per_second == ROWS_PER_SECOND.default_value
    assert rate.keys == RATE_KEYS.default_value
    with pytest.raises(ConfigError) as info:
        RateUpstream.from_options({RATE_KEYS.name: "0"}, str(tmp_path / "rate"))
    assert str(info.value) == (
        f"{RATE_KEYS.where}: value '0' is out of range; expected an integer{RATE_KEYS.range_text()}"
    )


def test_the_docs_quote_every_declaration() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for config_key in DECLARATIONS:
        assert config_key.doc.replace("|", "\\|") in text, config_key.name
        if config_key.default is not None and not config_key.default_doc:
            assert f"| `{config_key.default}` |" in text, config_key.name
    assert config_doc.render_configuration_doc(text) == text
