"""``barriered savepoint bootstrap|transform``: the state processor's common cases on the
command line (:mod:`barriered.state_processor`), each in a local Spark session.

* ``bootstrap -o OUT --input PATH [--input-format delta|parquet|json|csv] --keys K[,K]
  --processor MODULE:CLASS [--name OP] [--compute] --source KEY=VALUE ...
  [--position N ...] [--conf KEY=VALUE ...]``: a savepoint whose keyed state comes from
  a table (one row per key, or input rows with ``--compute``), for the stream read with
  the ``--source`` options;
* ``transform PATH -o OUT --operator OP [--checkpoint N] [--where SQL]
  [--add "NAME TYPE = SQL"] [--drop NAME] [--cast NAME=TYPE]``: keep the keys ``--where``
  holds, add fields with a default, drop fields, cast fields.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from barriered.config.source_options import RESTORE_FROM
from barriered.errors import ConfigError
from barriered.tools.progress import reporting


def pairs(items: list[str] | None, what: str) -> dict[str, str]:
    """``KEY=VALUE`` arguments as a mapping.

    Raises
    ------
    ConfigError
        For an argument without ``=``.
    """
    found = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} {item!r} is not KEY=VALUE")
        found[key.strip()] = value.strip()
    return found


def load_processor(spec: str) -> Any:
    """An instance of the processor class ``module:Class``.

    Raises
    ------
    ConfigError
        When the module or the class cannot be imported.
    """
    module, sep, name = spec.partition(":")
    try:
        if not sep:
            raise ImportError("give it as MODULE:CLASS")
        return getattr(importlib.import_module(module), name)()
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--processor {spec!r} cannot be loaded: {exc}") from None


@contextmanager
def local_session(conf: dict[str, str]) -> Iterator[Any]:
    """The active SparkSession (called from a program that has one), else a new local
    one, stopped after; with barriered installed and ``conf`` set."""
    from pyspark.sql import SparkSession

    import barriered

    spark = SparkSession.getActiveSession()
    owned = spark is None
    if spark is None:
        builder = SparkSession.builder.master("local[*]").appName("barriered-state-processor")
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    for key, value in conf.items():
        spark.conf.set(key, value)
    barriered.install(spark)
    try:
        yield spark
    finally:
        if owned:
            spark.stop()


#: Delta reader features whose tables Spark's Parquet reader would misread (rows a
#: deletion vector removed, columns stored under other names).
_UNREADABLE_FEATURES = frozenset({"deletionVectors", "columnMapping", "v2Checkpoint"})


def read_delta(spark: Any, path: str) -> Any:
    """The Delta table at ``path`` as a DataFrame: with the session's Delta data source
    when it has one, else its current files (listed by delta-rs, no JAR) read by Spark's
    Parquet reader, partition columns from their folders.

    Raises
    ------
    ConfigError
        When ``path`` is not a Delta table, or uses a feature that needs Delta's own
        reader (deletion vectors, column mapping), naming the path and what to do.
    """
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import from_arrow_schema

    from barriered.files.storage import delta_options

    try:
        return spark.read.format("delta").load(path)
    except Exception as exc:  # pyspark raises its own types for a missing data source
        if "DATA_SOURCE_NOT_FOUND" not in str(exc) and "Failed to find the data source" not in str(
            exc
        ):
            raise
    try:
        table = DeltaTable(path, storage_options=delta_options(path) or None)
    except Exception as exc:  # deltalake raises several types for a path without a log
        raise ConfigError(
            f"--input {path!r} is not a Delta table ({type(exc).__name__}: {exc}); give "
            "--input-format parquet, json or csv for plain files"
        ) from None
    features = set(table.protocol().reader_features or ())
    unreadable = sorted(features & _UNREADABLE_FEATURES)
    if unreadable:
        raise ConfigError(
            f"--input {path!r} is a Delta table with reader feature(s) {unreadable}, which "
            "only Delta's own reader reads right, and this session has no Delta data source: "
            "run with the Delta Lake package on the session (--conf spark.jars.packages=..., "
            "--conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension), or export "
            "the table to Parquet and give --input-format parquet"
        )
    schema = from_arrow_schema(pa.schema(table.schema().to_arrow()))
    files = table.file_uris()
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", path).parquet(*files)


def cmd_bootstrap(args: argparse.Namespace) -> int:
    """Write a savepoint from a table of keyed state (or input rows with ``--compute``)."""
    from barriered import state_processor

    source = pairs(args.source, "--source")
    processor = load_processor(args.processor)
    keys = [k.strip() for k in args.keys.split(",") if k.strip()]
    with local_session(pairs(args.conf, "--conf")) as spark:
        if args.input_format == "delta":
            df = read_delta(spark, args.input)
        else:
            reader = spark.read.format(args.input_format)
            if args.input_format == "csv":
                reader = reader.option("header", "true").option("inferSchema", "true")
            df = reader.load(args.input)
        state = state_processor.KeyedState(df, keys, processor, args.name, args.compute)
        saved = state_processor.bootstrap(spark, args.out, source, [state], args.position)
    print(
        f"savepoint bootstrapped to {saved.path} ({saved.state_files} key group files, "
        f"{saved.state_bytes} bytes); start the stream with .option({RESTORE_FROM.name!r}, "
        f"{saved.path!r}) on a new snapshot path"
    )
    return 0


def transform_function(args: argparse.Namespace) -> Callable[[Any], Any]:
    """The DataFrame function of ``--where``, ``--add``, ``--drop`` and ``--cast``.

    Raises
    ------
    ConfigError
        For an ``--add`` that is not ``NAME TYPE = SQL`` or a ``--cast`` without ``=``.
    """
    added = []
    for item in args.add or []:
        declared, sep, default = item.partition("=")
        parts = declared.split()
        if not sep or len(parts) != 2 or not default.strip():
            raise ConfigError(f"--add {item!r} is not 'NAME TYPE = SQL DEFAULT'")
        added.append((parts[0], parts[1], default.strip()))
    casts = pairs(args.cast, "--cast")
    if not (args.where or added or args.drop or casts):
        raise ConfigError("transform: give at least one of --where, --add, --drop, --cast")

    def function(state: Any) -> Any:
        from pyspark.sql import functions as F

        if args.where:
            state = state.where(args.where)
        for name, kind, default in added:
            state = state.withColumn(name, F.expr(default).cast(kind))
        if args.drop:
            state = state.drop(*args.drop)
        for name, kind in casts.items():
            state = state.withColumn(name, F.col(name).cast(kind))
        return state

    return function


def cmd_transform(args: argparse.Namespace) -> int:
    """Write a savepoint of a checkpoint with one operator's state transformed."""
    from barriered import state_processor

    function = transform_function(args)
    with local_session(pairs(args.conf, "--conf")) as spark:
        saved = state_processor.transform(
            spark, args.path, args.out, args.operator, function, args.checkpoint
        )
    print(
        f"checkpoint {saved.checkpoint_id} with operator {args.operator!r} transformed "
        f"written to {saved.path}; {args.path} is unchanged. Restore with "
        f".option({RESTORE_FROM.name!r}, {saved.path!r}) on a new snapshot path"
    )
    return 0


def cmd_rescale(args: argparse.Namespace) -> int:
    """Write a savepoint again with another maxParallelism."""
    from barriered.state_processor.rescale import rescale

    with reporting() as progress:
        progress.step(f"rewriting {args.path} for {args.max_parallelism} key groups")
        saved = rescale(args.path, args.out, args.max_parallelism, option="--max-parallelism")
    print(
        f"savepoint of checkpoint {saved.checkpoint_id} written to {saved.path} with "
        f"maxParallelism {args.max_parallelism} ({saved.state_files} state files, "
        f"{saved.state_bytes} bytes); restore it with .option({RESTORE_FROM.name!r}, "
        f"{saved.path!r}) and maxParallelism={args.max_parallelism} on a new snapshot path, "
        f"at up to {args.max_parallelism} shuffle partitions"
    )
    return 0


def _whole_number(raw: str) -> int | str:
    """An int, or the text as given: the command checks the range and names the option."""
    try:
        return int(raw)
    except ValueError:
        return raw


def add_parsers(sub: Any, checkpoint_option: Callable[[argparse.ArgumentParser], None]) -> None:
    """Register ``savepoint-bootstrap``, ``savepoint-transform`` and
    ``savepoint-rescale``, typed as ``savepoint bootstrap`` (etc.; so ``--help`` lists
    them under ``savepoint``, not as commands of their own)."""
    conf_help = "a Spark or spark.sql.streaming.barriered.* key of the local session"
    bs = sub.add_parser(
        "savepoint-bootstrap",
        prog="barriered savepoint bootstrap",
        # no help: --help lists it under "savepoint" (typed "savepoint bootstrap")
    )
    bs.add_argument("-o", "--out", required=True, help="the savepoint folder (must be new)")
    bs.add_argument("--input", required=True, help="the table or files of the state rows")
    bs.add_argument("--input-format", default="delta", choices=("delta", "parquet", "json", "csv"))
    bs.add_argument("--keys", required=True, help="the key columns, comma-separated")
    bs.add_argument("--processor", required=True, metavar="MODULE:CLASS")
    bs.add_argument("--name", help="the operator id (default: the class name in snake_case)")
    bs.add_argument(
        "--compute", action="store_true", help="the input holds input rows: run the processor"
    )
    bs.add_argument(
        "--source",
        action="append",
        required=True,
        metavar="KEY=VALUE",
        help="an option of the stream's barriered source (upstream=files, path=...)",
    )
    bs.add_argument(
        "--position",
        type=int,
        nargs="+",
        metavar="N",
        help="per channel, where the stream starts (default: all the upstream holds)",
    )
    bs.add_argument("--conf", action="append", metavar="KEY=VALUE", help=conf_help)
    bs.set_defaults(run=cmd_bootstrap)

    tf = sub.add_parser(
        "savepoint-transform",
        prog="barriered savepoint transform",
    )
    tf.add_argument("path", help="the snapshot path or savepoint folder (only read)")
    tf.add_argument("-o", "--out", required=True, help="the new savepoint folder (must be new)")
    tf.add_argument("--operator", required=True, help="the keyed operator")
    checkpoint_option(tf)
    tf.add_argument("--where", metavar="SQL", help="keep the keys this condition holds for")
    tf.add_argument("--add", action="append", metavar="'NAME TYPE = SQL'", help="add a state field")
    tf.add_argument("--drop", action="append", metavar="NAME", help="drop a state field")
    tf.add_argument("--cast", action="append", metavar="NAME=TYPE", help="cast a state field")
    tf.add_argument("--conf", action="append", metavar="KEY=VALUE", help=conf_help)
    tf.set_defaults(run=cmd_transform)

    rs = sub.add_parser(
        "savepoint-rescale",
        prog="barriered savepoint rescale",
        description="Write a savepoint again with another maxParallelism (number of key "
        "groups): each key moves to its new key group.",
        # no help: --help lists it under "savepoint" (typed "savepoint rescale")
    )
    rs.add_argument("path", help="the savepoint folder (only read)")
    rs.add_argument("-o", "--out", required=True, help="the new savepoint folder (must not exist)")
    rs.add_argument(
        "--max-parallelism",
        required=True,
        type=_whole_number,
        metavar="N",
        help="the new number of key groups (1 to 32768): the most shuffle partitions a "
        "restore of the result can use",
    )
    rs.set_defaults(run=cmd_rescale)
