"""Whether Spark's Python workers can import barriered, checked by :func:`barriered.install`.

The "barriered" source, its sinks and ``barriered.keyed()`` run in Spark's Python
workers, which a classic PySpark session starts with ``PYSPARK_PYTHON`` (``python3`` on
the PATH when it is unset), not with the interpreter of the driver. When that
interpreter cannot import barriered, a query fails with ``ModuleNotFoundError`` deep in a
worker's traceback. On a local session the workers run on this machine with this
process's environment, so :func:`check` runs the same interpreter once and refuses at
``install()``, naming ``PYSPARK_PYTHON`` and the fix. A cluster's workers run elsewhere,
and a Spark Connect client is not the driver: nothing is checked there.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import barriered
from barriered.errors import WorkerPythonError

log = logging.getLogger(__name__)

#: Seconds the worker interpreter may take to import barriered (it imports no Spark).
TIMEOUT = 30.0
_PROBE = "import barriered, sys; sys.stdout.write(barriered.__file__)"


def check(spark: Any) -> None:
    """Refuse a local classic session whose Python workers cannot import barriered.

    Parameters
    ----------
    spark : SparkSession
        A classic session (the caller skips Spark Connect sessions).

    Raises
    ------
    barriered.errors.WorkerPythonError
        The interpreter Spark starts its local Python workers with cannot import
        barriered (or does not run).
    """
    context = spark.sparkContext
    if not str(context.master).startswith("local"):
        return  # a cluster: the workers are not this machine's
    python = context.pythonExec
    env = {**os.environ, **{k: str(v) for k, v in (context.environment or {}).items()}}
    found = importable(python, env)
    if found is None:
        return
    raise WorkerPythonError(
        f"barriered.install(spark): Spark's Python workers run {python!r} (PYSPARK_PYTHON, "
        f"python3 on the PATH when unset), which cannot import barriered: {found}. Set "
        "PYSPARK_PYTHON to the interpreter barriered is installed in before the session "
        f"starts (export PYSPARK_PYTHON={sys.executable}, or os.environ['PYSPARK_PYTHON'] "
        f"= sys.executable before getOrCreate()), or pip install spark-barriered into {python}"
    )


def importable(python: str, env: Mapping[str, str]) -> str | None:
    """Why ``python`` with ``env`` cannot import barriered, or None when it can.

    Runs it once per interpreter and environment (the answer is kept). A worker
    importing another copy of barriered than this process is logged as a warning.
    """
    return _importable(python, tuple(sorted(env.items())))


@functools.lru_cache(maxsize=8)
def _importable(python: str, env: tuple[tuple[str, str], ...]) -> str | None:
    try:
        probe = subprocess.run(
            [python, "-c", _PROBE],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        return "no such program"
    except PermissionError:
        return "it is not executable"
    except subprocess.TimeoutExpired:
        log.warning("%s took over %.0f s to import barriered; not checked", python, TIMEOUT)
        return None
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        return lines[-1] if lines else f"exit code {probe.returncode}"
    mine = os.path.realpath(barriered.__file__)
    if os.path.realpath(probe.stdout.strip()) != mine:
        log.warning(
            "Spark's Python workers (%s) import barriered from %s, this process from %s",
            python,
            probe.stdout.strip(),
            mine,
        )
    return None
