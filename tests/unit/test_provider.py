"""The JVM provider on a session builder: jar, version check, confs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from barriered import provider
from barriered.errors import ConfigError


def test_builder_gets_the_jar_the_extension_and_the_provider() -> None:
    builder = SparkSession.Builder().config("spark.jars", "/opt/other.jar")
    builder = builder.config("spark.sql.extensions", "com.example.Other")
    assert provider.with_state_store(builder) is builder
    options = builder._options
    extensions = ["com.example.Other", provider.EXTENSION_CLASS]
    assert options["spark.jars"].split(",") == ["/opt/other.jar", provider.jar_path()]
    assert options["spark.sql.extensions"].split(",") == extensions
    assert options["spark.sql.streaming.stateStore.providerClass"] == provider.PROVIDER_CLASS
    provider.with_state_store(builder)  # twice: each is listed once
    assert options["spark.jars"].split(",") == ["/opt/other.jar", provider.jar_path()]
    assert options["spark.sql.extensions"].split(",") == extensions


def test_the_jar_records_the_spark_it_was_built_for() -> None:
    assert provider.built_for() == pyspark.__version__
    provider.check_version()


def test_another_spark_version_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError) as refused:
        provider.check_version("4.2.1")
    message = str(refused.value)
    assert f"compiled against Spark {pyspark.__version__}" in message
    assert "this is Spark 4.2.1" in message
    assert "jvm-shim/build.sh" in message


def test_a_missing_jar_says_how_to_build_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(provider, "_JAR", tmp_path / "none.jar")
    builder = SparkSession.Builder()
    with pytest.raises(ConfigError, match="javac"):
        provider.with_state_store(builder)
    assert "spark.jars" not in builder._options


def test_python_m_barriered_provider_prints_the_jar_path() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "barriered.provider"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == provider.jar_path() + "\n"
    assert f"built for Spark {pyspark.__version__}" in done.stderr
    assert f"stateStore.providerClass={provider.PROVIDER_CLASS}" in done.stderr
    assert f"spark.sql.extensions={provider.EXTENSION_CLASS}" in done.stderr


def test_python_m_barriered_provider_without_the_jar_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(provider, "_JAR", tmp_path / "none.jar")
    assert provider.main() == 1
    out = capsys.readouterr()
    assert out.out == "" and "barriered: error:" in out.err and "javac" in out.err
