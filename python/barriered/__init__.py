"""spark-barriered: Flink-grade barrier checkpoints for Spark Structured Streaming.

Importing :mod:`barriered` does not import PySpark: the barrier handler, the
coordinator core, key groups and the configuration are pure Python. The Spark-facing
API (``install``, ``uninstall``, ``read_stream``, ``keyed``, ``records``,
``await_termination``, ``checkpoints``, ``state_table``, ``plot_checkpoints``,
``savepoint``, ``managed``, ``rescale``, ``with_state_store``) is loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from barriered.errors import BarrieredError

__version__ = "0.1.0"

# Public name -> module that defines it; imported lazily so that no Spark is needed
# for the pure parts of the package.
_LAZY = {
    "install": "barriered.session",
    "uninstall": "barriered.session",
    "read_stream": "barriered.session",
    "keyed": "barriered.api",
    "records": "barriered.api",
    "await_termination": "barriered.api",
    "snapshot_path": "barriered.api",
    "savepoint": "barriered.api",
    "managed": "barriered.managed_query",
    "rescale": "barriered.managed_query",
    "checkpoints": "barriered.views",
    "state_table": "barriered.views",
    "plot_checkpoints": "barriered.views",
    "with_state_store": "barriered.provider",
}

__all__ = ["BarrieredError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'barriered' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
