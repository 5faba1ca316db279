"""The options of the ``barriered-delta`` sink, declared once (parsed by
:mod:`barriered.sink.options`)."""

from __future__ import annotations

import dataclasses

from barriered.config.declaration import ConfigKey
from barriered.config.keys import SNAPSHOT_PATH

APPEND = "append"
UPDATE = "update"
_OWNER = "barriered-delta sink option"

PATH = ConfigKey(
    "path",
    "path",
    None,
    "The output Delta table (a folder, or a URI delta-rs and pyarrow understand); "
    "created on the first checkpoint that commits output. Also start(path).",
    field="path",
    owner=_OWNER,
)
#: The session key's declaration, as an option of the sink (its default).
SNAPSHOT_PATH_OPTION = dataclasses.replace(
    SNAPSHOT_PATH,
    doc="The snapshot path of the barriered source of the same query (default: the "
    f"session key {SNAPSHOT_PATH.key}); its coordinator commits the staged output with "
    "each checkpoint.",
    owner=_OWNER,
)
MODE = ConfigKey(
    "mode",
    "enum",
    APPEND,
    "append adds every output row; update merges each checkpoint's rows into the "
    "table by keyColumns (the last row of a key wins: running totals, upserts).",
    field="mode",
    choices=(APPEND, UPDATE),
    owner=_OWNER,
)
KEY_COLUMNS = ConfigKey(
    "keyColumns",
    "str",
    None,
    "Comma-separated key columns of mode update (required there, refused in append).",
    field="key_columns",
    owner=_OWNER,
)
PARTITION_BY = ConfigKey(
    "partitionBy",
    "str",
    None,
    "Comma-separated partition columns of the output table (Hive-style folders).",
    field="partition_by",
    owner=_OWNER,
)
SINK_ID = ConfigKey(
    "sinkId",
    "str",
    None,
    "Name of the sink under the snapshot path (_sink/<sinkId>/) and of its Delta "
    "app transaction; default: the output table's folder name. Give each sink of "
    "a query its own, and a second query writing the same table its own.",
    field="sink_id",
    owner=_OWNER,
)
ADOPT_TABLE = ConfigKey(
    "adoptTable",
    "bool",
    "false",
    "Let the sink take over an existing Delta table that no barriered-delta sink "
    "owns (created by another writer; its columns must be the output's). The sink "
    "then owns it: a table another query's sink owns is never taken over.",
    field="adopt_table",
    owner=_OWNER,
)
#: The options of ``writeStream.format("barriered-delta")``, by name; the session's
#: snapshot path reaches the sink as it reaches the source.
SINK_OPTIONS: dict[str, ConfigKey] = {
    k.name: k
    for k in (PATH, SNAPSHOT_PATH_OPTION, MODE, KEY_COLUMNS, PARTITION_BY, SINK_ID, ADOPT_TABLE)
}
#: Options Spark itself reads and hands on to every sink (lower case).
SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})
