"""The README's "Install" and "Use" steps, verbatim, in a fresh virtual environment
outside the repository (no Makefile, no PYTHONPATH): the script completes checkpoints.

The ``bash`` block of "Install / use it from your own project" runs with the clone's
path for ``/path/to/spark-barriered`` (a copy of the package's files: pip builds in the
source folder), then the ``python`` block of "Use" as ``use.py``. pip downloads what its
cache lacks: behind ``full``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.full]

ROOT = Path(__file__).resolve().parents[2]


def block(section: str, language: str) -> str:
    """The first ``language`` code block of README section ``## <section>``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(rf"```{language}\n(.*?)```", body, re.DOTALL)
    assert found, f"no {language} block in README section {section!r}"
    return found.group(1)


def test_readme_install_and_use_in_a_fresh_environment(tmp_path: Path) -> None:
    clone = tmp_path / "spark-barriered"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, clone / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "python", clone / "python", ignore=ignore)
    project = tmp_path / "my-project"
    project.mkdir()
    install = block("Install / use it from your own project", "bash")
    assert "/path/to/spark-barriered" in install
    (project / "install.sh").write_text(install.replace("/path/to/spark-barriered", str(clone)))
    (project / "use.py").write_text(block("Use", "python"))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK", "PYTHON", "BARRIERED", "VIRTUAL_ENV"))
    }
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix)
    )
    done = subprocess.run(
        ["bash", "-c", "set -e; . ./install.sh >install.log 2>&1; python use.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    log = (project / "install.log").read_text() if (project / "install.log").exists() else ""
    assert done.returncode == 0, (log[-2000:], done.stderr[-3000:])
    table = [[c.strip() for c in line.split("|")[1:-1]] for line in done.stdout.splitlines()]
    table = [cells for cells in table if cells]
    assert table[0][:4] == ["id", "kind", "mode", "status"], done.stdout
    assert any(r[0].isdigit() and r[3] == "completed" for r in table[1:]), done.stdout
    assert (project / ".venv" / "bin" / "python").exists()
