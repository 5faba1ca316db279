"""The options of each upstream, declared once.

Each upstream's options are :class:`~barriered.config.ConfigKey` declarations (type,
default, doc, bounds), parsed by :meth:`ConfigKey.read` with the same messages as the
session keys; :data:`UPSTREAM_OPTIONS` lists them per upstream for the source's
unknown-option check and for ``docs/configuration.md`` (``python -m
barriered.config_doc``). Options of ``type="prefix"`` are families passed on to a client
(:mod:`barriered.datasource.upstreams.options` parses the richer values).
"""

from __future__ import annotations

import dataclasses

from barriered.config.declaration import ConfigKey
from barriered.config.source_options import KAFKA_CLIENT

_OWNER = "upstream option"
#: Channels of an upstream that does not derive them from its input.
DEFAULT_CHANNELS = 4

CHANNELS = ConfigKey(
    "channels",
    "int",
    None,
    "Number of channels.",
    min_value=1,
    owner=_OWNER,
    default_doc=f"`{DEFAULT_CHANNELS}`",
)
PATH = ConfigKey(
    "path",
    "path",
    None,
    "files: the folder the files are written to, local or a URI (`s3://bucket/events/`); "
    "delta: the table, a folder or a URI (`s3://bucket/table`, `abfss://...`).",
    owner=_OWNER,
    default_doc="required",
)

# -- rate ------------------------------------------------------------------------------
ROWS_PER_SECOND = ConfigKey(
    "rowsPerSecond",
    "float",
    "100",
    "Records produced per second per channel; `0` makes all of `rowsPerChannel` available "
    "at once (a finite, instant input: the tests and notebooks use it with "
    "`Trigger.AvailableNow`).",
    min_value=0,
    owner=_OWNER,
)
ROWS_PER_CHANNEL = ConfigKey(
    "rowsPerChannel",
    "int",
    None,
    "Records per channel (before `skew`); required when `rowsPerSecond` is `0`.",
    min_value=0,
    owner=_OWNER,
    default_doc="unbounded",
)
KEYS = ConfigKey(
    "keys",
    "int",
    "1000",
    "Distinct `user_id` values (`user-0` ...).",
    min_value=1,
    owner=_OWNER,
)
SKEW = ConfigKey(
    "skew",
    "str",
    None,
    "Per-channel factor on rate and bound, `CHANNEL:FACTOR[,...]`: `0:4` makes channel 0 "
    "produce four times as much. With `maxRowsPerChannel` the skewed channel lags.",
    owner=_OWNER,
)

# -- files -----------------------------------------------------------------------------
FORMAT = ConfigKey(
    "format",
    "enum",
    None,
    "`json` (`.json`, `.jsonl`, `.ndjson`), `csv` or `parquet`.",
    choices=("json", "csv", "parquet"),
    owner=_OWNER,
    default_doc="from the first file's extension",
)
CHANNEL_BY = ConfigKey(
    "channelBy",
    "enum",
    None,
    "`folder`: each immediate sub-folder is one channel; `hash`: crc32 of the file's "
    "relative path modulo `channels`.",
    choices=("folder", "hash"),
    owner=_OWNER,
    default_doc="`folder` when `path` holds only sub-folders, else `hash`",
)
FILES_CHANNELS = dataclasses.replace(
    CHANNELS, default_doc=f"`{DEFAULT_CHANNELS}` (`hash`); the number of sub-folders (`folder`)"
)
SCHEMA = ConfigKey(
    "schema",
    "str",
    None,
    "Columns as `name type, ...`; types `string`, `long`/`bigint`, `int`/`integer`, "
    "`double`, `boolean`/`bool`, `timestamp`. Required to start on an empty folder.",
    owner=_OWNER,
    default_doc="inferred from the first file",
)
ARCHIVE_TO = ConfigKey(
    "archiveTo",
    "path",
    None,
    "A folder outside `path` (local or a URI): files whose records all lie before the "
    "oldest retained checkpoint may be moved there by the upstream's release step (they "
    "stay readable for replay).",
    owner=_OWNER,
)

# -- delta -----------------------------------------------------------------------------
DELTA_CHANNEL_BY = dataclasses.replace(
    CHANNEL_BY,
    type="str",
    choices=(),
    doc="`file`: crc32 of the data file path modulo `channels`; or a partition column: one "
    "channel per partition value, in first-seen order.",
    default_doc="`file`",
)
DELTA_CHANNELS = dataclasses.replace(CHANNELS, default_doc=f"`{DEFAULT_CHANNELS}` (`file`)")
STARTING_VERSION = ConfigKey(
    "startingVersion",
    "str",
    "0",
    "The first version read, or `latest` (only commits after the current one).",
    owner=_OWNER,
)
STORAGE_OPTIONS = ConfigKey(
    "storageOptions.",
    "prefix",
    None,
    "delta-rs storage options of the table, e.g. `storageOptions.AWS_REGION`.",
    owner=_OWNER,
)

# -- kafka -----------------------------------------------------------------------------
SUBSCRIBE = ConfigKey(
    "subscribe",
    "str",
    None,
    "Topics, comma separated. Exactly one of `subscribe`, `subscribePattern`, `assign`.",
    owner=_OWNER,
)
SUBSCRIBE_PATTERN = ConfigKey(
    "subscribePattern",
    "str",
    None,
    "A regular expression over topic names (internal `__` topics excluded).",
    owner=_OWNER,
)
ASSIGN = ConfigKey(
    "assign",
    "str",
    None,
    'JSON `{"topic": [0, 1]}`: these partitions only (no new ones join).',
    owner=_OWNER,
)
STARTING_OFFSETS = ConfigKey(
    "startingOffsets",
    "str",
    "latest",
    'Where a new stream starts: `earliest`, `latest`, or JSON `{"topic": {"0": 23, "1": '
    "-2}}` (-2 earliest, -1 latest). A restarted or restored stream starts at its "
    "checkpoint's offsets.",
    owner=_OWNER,
)
STARTING_TIMESTAMP = ConfigKey(
    "startingTimestamp",
    "int",
    None,
    "Milliseconds since the epoch: each partition starts at its first record at or after "
    "it (its end if none).",
    min_value=0,
    owner=_OWNER,
)
FAIL_ON_DATA_LOSS = ConfigKey(
    "failOnDataLoss",
    "bool",
    "true",
    "Fail when records were deleted before they were read; `false` skips them.",
    owner=_OWNER,
)
INCLUDE_HEADERS = ConfigKey(
    "includeHeaders",
    "bool",
    "false",
    "Add the `headers` column (`array<struct<key string, value binary>>`).",
    owner=_OWNER,
)
POLL_TIMEOUT_MS = ConfigKey(
    "kafkaConsumer.pollTimeoutMs",
    "int",
    "120000",
    "How long (ms) a task waits for records it knows exist before it fails.",
    min_value=1,
    owner=_OWNER,
)

#: Every upstream's options, by upstream name, in documentation order.
UPSTREAM_OPTIONS: dict[str, tuple[ConfigKey, ...]] = {
    "rate": (CHANNELS, ROWS_PER_SECOND, ROWS_PER_CHANNEL, KEYS, SKEW),
    "files": (PATH, FORMAT, CHANNEL_BY, FILES_CHANNELS, SCHEMA, ARCHIVE_TO),
    "delta": (PATH, DELTA_CHANNEL_BY, DELTA_CHANNELS, STARTING_VERSION, STORAGE_OPTIONS),
    "kafka": (
        SUBSCRIBE,
        SUBSCRIBE_PATTERN,
        ASSIGN,
        STARTING_OFFSETS,
        STARTING_TIMESTAMP,
        FAIL_ON_DATA_LOSS,
        INCLUDE_HEADERS,
        POLL_TIMEOUT_MS,
        KAFKA_CLIENT,
    ),
}

#: The option that chooses the upstream (an option of the source).
UPSTREAM = ConfigKey(
    "upstream",
    "enum",
    "rate",
    "Where records come from: `rate`, `files`, `delta` or `kafka` (the tables below).",
    choices=tuple(UPSTREAM_OPTIONS),
    owner="source option",
)
