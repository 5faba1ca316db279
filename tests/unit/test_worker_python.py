"""barriered.install's check that Spark's Python workers can import barriered: the
interpreter runs for real (no Spark)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import barriered
from barriered.worker_python import importable

PACKAGE_PARENT = str(Path(barriered.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The interpreter of a new virtual environment: no barriered installed."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return str(venv / "bin" / "python")


def test_the_workers_interpreter_imports_barriered() -> None:
    env = {**os.environ, "PYTHONPATH": PACKAGE_PARENT}
    assert importable(sys.executable, env) is None


def test_an_interpreter_without_barriered_is_named(bare_python: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert importable(bare_python, env) == "ModuleNotFoundError: No module named 'barriered'"
    assert importable(bare_python, {**env, "PYTHONPATH": PACKAGE_PARENT}) is None


def test_a_missing_interpreter_is_named(tmp_path: Path) -> None:
    assert importable(str(tmp_path / "python9"), dict(os.environ)) == "no such program"
