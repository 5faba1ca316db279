"""Every setting of spark-barriered, declared once (see ``docs/configuration.md``).

* :mod:`~barriered.config.declaration`: :class:`ConfigKey`, the declaration of one
  setting (name, type, default, doc, bounds, whether a restore may change it) and how its
  values are parsed;
* :mod:`~barriered.config.keys`: the ``spark.sql.streaming.barriered.*`` session keys;
* :mod:`~barriered.config.conf`: :class:`BarrieredConf`, their parsed values, built by
  :func:`resolve`.

The options of the source and its upstreams (:mod:`barriered.datasource.options`,
:mod:`barriered.datasource.upstreams.options`) and of the sink
(:mod:`barriered.sink.options`) are :class:`ConfigKey` declarations too;
:mod:`barriered.config_doc` generates the reference tables from all of them. This package
does not import PySpark.
"""

from __future__ import annotations

from barriered.config.conf import (
    BarrieredConf,
    check_restore_compatible,
    resolve,
    split_options,
)
from barriered.config.declaration import (
    PREFIX,
    ConfigKey,
    ConfigValue,
    ValueType,
)
from barriered.config.keys import (
    ALIGNED_CHECKPOINT_TIMEOUT,
    BUFFER_PER_CHANNEL,
    CHECKPOINT_INTERVAL,
    CHECKPOINT_TIMEOUT,
    COORDINATOR_TIMEOUT,
    INFLIGHT_CAPTURE,
    KEYS,
    KEYS_BY_NAME,
    LEASE_TIMEOUT,
    MAX_CONCURRENT_CHECKPOINTS,
    MAX_PARALLELISM,
    METRICS_HOST,
    METRICS_OPEN_TELEMETRY,
    METRICS_PROMETHEUS_PORT,
    MIN_PAUSE_BETWEEN_CHECKPOINTS,
    MODE,
    PROVIDER_CHANGE_DETECTION,
    RETAINED_CHECKPOINTS,
    RETENTION_HISTORY_SIZE,
    RETENTION_MAINTENANCE_INTERVAL,
    RETENTION_MIN_AGE,
    SNAPSHOT_PATH,
    SNAPSHOT_STORAGE_OPTIONS,
    TOLERABLE_CHECKPOINT_FAILURES,
    UNALIGNED_ADAPTIVE,
    UNALIGNED_ENABLED,
    key,
)

__all__ = [
    "ALIGNED_CHECKPOINT_TIMEOUT",
    "BUFFER_PER_CHANNEL",
    "CHECKPOINT_INTERVAL",
    "CHECKPOINT_TIMEOUT",
    "COORDINATOR_TIMEOUT",
    "INFLIGHT_CAPTURE",
    "KEYS",
    "KEYS_BY_NAME",
    "LEASE_TIMEOUT",
    "MAX_CONCURRENT_CHECKPOINTS",
    "MAX_PARALLELISM",
    "METRICS_HOST",
    "METRICS_OPEN_TELEMETRY",
    "METRICS_PROMETHEUS_PORT",
    "MIN_PAUSE_BETWEEN_CHECKPOINTS",
    "MODE",
    "PREFIX",
    "PROVIDER_CHANGE_DETECTION",
    "RETAINED_CHECKPOINTS",
    "RETENTION_HISTORY_SIZE",
    "RETENTION_MAINTENANCE_INTERVAL",
    "RETENTION_MIN_AGE",
    "SNAPSHOT_PATH",
    "SNAPSHOT_STORAGE_OPTIONS",
    "TOLERABLE_CHECKPOINT_FAILURES",
    "UNALIGNED_ADAPTIVE",
    "UNALIGNED_ENABLED",
    "BarrieredConf",
    "ConfigKey",
    "ConfigValue",
    "ValueType",
    "check_restore_compatible",
    "key",
    "resolve",
    "split_options",
]
