# Databricks notebook source
# MAGIC %md
# MAGIC # Spark's own stateful operators in every snapshot
# MAGIC
# MAGIC Most streaming queries keep their state in Spark's built-in operators: `groupBy().agg()`
# MAGIC (with or without `window` and a watermark), `dropDuplicates`, stream-stream joins,
# MAGIC `applyInPandasWithState`. With the barriered **state store provider** (a JVM jar,
# MAGIC `jvm-shim/`) every one of their state stores is written per key group into Delta tables
# MAGIC under the snapshot path at each checkpoint's cut, and loaded back on restore with any
# MAGIC number of shuffle partitions. This notebook
# MAGIC
# MAGIC 1. runs a windowed aggregation with a watermark over the first part of a folder of
# MAGIC    JSON files, with 2 shuffle partitions,
# MAGIC 2. loses the query's Spark checkpoint location,
# MAGIC 3. restores from the latest barriered checkpoint into a **new** checkpoint location
# MAGIC    with 5 shuffle partitions and reads the rest of the input,
# MAGIC 4. checks the result against a batch aggregation over all input, and
# MAGIC 5. reads the operator's state with `barriered.state_table`, SQL and `barriered inspect`.

# COMMAND ----------

# MAGIC %md
# MAGIC ## On Databricks: dedicated compute only
# MAGIC
# MAGIC The provider is a JAR that must be on the classpath when the cluster's JVMs start
# MAGIC (see `jvm-shim/README.md`, "Databricks (dedicated compute)"):
# MAGIC
# MAGIC 1. Get the jar that ships in the wheel: `python -m barriered.provider` prints its path
# MAGIC    (or `barriered.provider.jar_path()`); copy it to a Volume, e.g.
# MAGIC    `/Volumes/main/default/libs/barriered-shim.jar`.
# MAGIC 2. Put it on the classpath: a cluster-scoped init script
# MAGIC    `cp /Volumes/main/default/libs/barriered-shim.jar /databricks/jars/` (or install it
# MAGIC    as a cluster library).
# MAGIC 3. In the cluster's Spark config, set `spark.sql.streaming.stateStore.providerClass`
# MAGIC    to `io.barriered.shim.BarrieredStateStoreProvider` and `spark.sql.extensions` to
# MAGIC    `io.barriered.shim.RestoredWatermark` (a restored query then starts at its
# MAGIC    checkpoint's watermark; a restore without it is refused).
# MAGIC 4. Use a runtime whose Spark version is the one the jar was built for
# MAGIC    (`barriered.provider.built_for()`); the first cell below refuses any other, naming both.
# MAGIC
# MAGIC **Serverless and standard access mode** allow no JARs: there the built-in stateful
# MAGIC operators cannot be captured, so do not run this notebook there; keep the state in
# MAGIC `barriered.keyed(...).process(...)` instead (notebooks 01 to 05 run everywhere).

# COMMAND ----------

import json
import os
import shutil
import tempfile
from datetime import datetime, timedelta, timezone

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import barriered
import barriered.provider
from barriered.cli import main as barriered_cli

try:
    spark  # noqa: B018  (the notebook's session on Databricks)
except NameError:  # a local session, with the provider's jar on its classpath from the start
    spark = barriered.with_state_store(
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # no progress bars
        .config("spark.sql.session.timeZone", "UTC")
    ).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

try:
    dbutils.widgets.text("base", "/Volumes/main/default/scratch/barriered-operators")  # noqa: F821
    BASE = dbutils.widgets.get("base")  # noqa: F821
except NameError:  # not on Databricks
    BASE = tempfile.mkdtemp(prefix="barriered-operators-")
try:
    display  # noqa: B018  (Databricks' display)
except NameError:  # plain python: tables printed, figures written to PNG files
    from barriered.views import display

barriered.provider.check_version(spark.version)  # the jar's Spark must be this Spark
if barriered.provider.EXTENSION_CLASS not in spark.conf.get("spark.sql.extensions", ""):
    raise RuntimeError(
        f"add {barriered.provider.EXTENSION_CLASS} to the cluster's spark.sql.extensions "
        "(step 3 above): the restore below needs it"
    )
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
if spark.conf.get(PROVIDER_KEY, None) != barriered.provider.PROVIDER_CLASS:
    # the jar is on the classpath but the provider was not chosen for the cluster:
    # choose it for the queries of this session
    spark.conf.set(PROVIDER_KEY, barriered.provider.PROVIDER_CLASS)
barriered.install(spark)
spark.conf.set("spark.sql.streaming.barriered.maxParallelism", "16")  # fixed for the path
EVENTS = os.path.join(BASE, "events")
SNAP = os.path.join(BASE, "snapshots")
SCHEMA = "user_id string, amount long, event_time timestamp"

# COMMAND ----------

# MAGIC %md
# MAGIC The input arrives in parts: one folder per channel, one JSON-lines file per part,
# MAGIC with event times 10 seconds apart; the second part starts inside the last window
# MAGIC of the first.

# COMMAND ----------

START = datetime(2026, 1, 1, 9, 0, tzinfo=timezone.utc)


def write_part(part):
    """Write part ``part`` of the input: one JSON-lines file per channel folder."""
    for region, rows in {"eu": 60, "us": 20, "asia": 20}.items():
        os.makedirs(os.path.join(EVENTS, region), exist_ok=True)
        with open(os.path.join(EVENTS, region, f"part-{part}.json"), "w") as out:
            for i in range(rows):
                at = START + timedelta(seconds=10 * (part * 45 + i))
                record = {
                    "user_id": f"user-{(i * 7 + part) % 6}",
                    "amount": i % 5 + 1,
                    "event_time": at.isoformat(),
                }
                out.write(json.dumps(record) + "\n")


def windowed(events):
    """Events and amounts per user and 5-minute window (a watermark of one hour)."""
    return (
        events.withWatermark("event_time", "1 hour")
        .groupBy(F.window("event_time", "5 minutes"), "user_id")
        .agg(F.count("*").alias("events"), F.sum("amount").alias("amount"))
    )


def run(checkpoint_location, restore_from=None):
    """Run the windowed aggregation to the end of the input; return the finished query."""
    reader = (
        spark.readStream.format("barriered")
        .option("upstream", "files")
        .option("path", EVENTS)
        .option("schema", SCHEMA)
        .option("maxRowsPerChannel", "20")
        .option("checkpointInterval", "10ms")
        .option("snapshotPath", SNAP)
    )
    if restore_from is not None:
        reader = reader.option("restoreFrom", restore_from)
    query = (
        windowed(barriered.records(reader.load()))
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", checkpoint_location)
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query)
    return query


def batch_result():
    """The same aggregation as a batch job over every file so far."""
    return windowed(spark.read.schema(SCHEMA).json(os.path.join(EVENTS, "*", "*.json")))


# COMMAND ----------

# MAGIC %md
# MAGIC ## 1. A first run, with 2 shuffle partitions

# COMMAND ----------

spark.conf.set("spark.sql.shuffle.partitions", "2")
write_part(0)
first = run(os.path.join(BASE, "spark-checkpoint-1"))
display(barriered.checkpoints(spark, SNAP))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## 2. The crash
# MAGIC
# MAGIC The Spark checkpoint location is gone (and Spark would ignore a changed
# MAGIC `spark.sql.shuffle.partitions` if the query restarted from it). The snapshot path
# MAGIC survives. Meanwhile the rest of the input arrives.

# COMMAND ----------

shutil.rmtree(os.path.join(BASE, "spark-checkpoint-1"))
write_part(1)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 3. Restore from the latest checkpoint, with 5 shuffle partitions
# MAGIC
# MAGIC `restoreFrom` = `latest` starts every channel at the checkpoint's barrier position;
# MAGIC each of the 5 partitions of the aggregation loads, from the operator's Delta table,
# MAGIC the rows whose key hashes to it (the driver reads no state). Only the number of key
# MAGIC groups (`maxParallelism`) is fixed.

# COMMAND ----------

spark.conf.set("spark.sql.shuffle.partitions", "5")
restored = run(os.path.join(BASE, "spark-checkpoint-2"), restore_from="latest")
history = barriered.checkpoints(spark, SNAP, full=True)
display(history)  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## 4. The result equals a batch aggregation over all input
# MAGIC
# MAGIC Spark's own state reader shows what the restored query holds, now spread over 5
# MAGIC partitions: every window of both parts, counted once.

# COMMAND ----------

live = spark.read.format("statestore").load(os.path.join(BASE, "spark-checkpoint-2"))
display(live.groupBy("partition_id").count().orderBy("partition_id"))  # noqa: F821
# the value is the aggregation buffer: count and sum, in the order of agg()
result = live.select("key.window", "key.user_id", "value.*").toDF(
    "window", "user_id", "events", "amount"
)
expected = batch_result()
mismatches = result.exceptAll(expected).count() + expected.exceptAll(result).count()
assert mismatches == 0, f"{mismatches} rows differ from the batch aggregation"
display(result.orderBy("window", "user_id"))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## 5. The operator's state in the snapshot
# MAGIC
# MAGIC Each state store of a Spark operator is a Delta table under
# MAGIC `<snapshot path>/operators/<operator id>-<store name>` (here `0-default`: the
# MAGIC aggregation's one store), partitioned by `key_group` and `store_partition`, with the
# MAGIC columns `hash` (Spark's Murmur3 hash of the key), `key` and `value` (structs of the
# MAGIC operator's own types). `barriered inspect` lists the stores and key groups of a
# MAGIC checkpoint (in a Databricks notebook: `%sh barriered inspect <snapshot path>`).

# COMMAND ----------

assert barriered_cli(["inspect", SNAP]) == 0

# COMMAND ----------

# MAGIC %md
# MAGIC `barriered.state_table(spark, path, checkpoint=None, operator="0-default")` is that
# MAGIC table at a completed checkpoint (the latest by default): the state the restore of
# MAGIC that checkpoint starts from, here the whole input.

# COMMAND ----------

STORE = "0-default"
barriered.state_table(spark, SNAP, operator=STORE).createOrReplaceTempView("window_state")
per_window = spark.sql(
    """
    SELECT key.window.start AS window_start, key.user_id AS user_id, value.*, key_group
    FROM window_state ORDER BY window_start, user_id
    """
)
display(per_window)  # noqa: F821
in_snapshot = per_window.drop("key_group").toDF("start", "user_id", "events", "amount")
expected_by_start = expected.select("window.start", "user_id", "events", "amount")
assert in_snapshot.exceptAll(expected_by_start).count() == 0
assert expected_by_start.exceptAll(in_snapshot).count() == 0

# COMMAND ----------

# MAGIC %md
# MAGIC Where does one key live? `barriered inspect --key` computes its key group (and, with
# MAGIC `--partitions N`, the shuffle partition that owns it) and shows its state row. The
# MAGIC aggregation's key is the window and the user: one `--key` per field, in order.

# COMMAND ----------

ISO = "yyyy-MM-dd'T'HH:mm:ssXXX"
one = spark.sql(
    f"""
    SELECT date_format(key.window.start, "{ISO}") AS start,
           date_format(key.window.end, "{ISO}") AS end, key.user_id AS user_id, key_group
    FROM window_state ORDER BY start, user_id LIMIT 1
    """
).first()
key = ["--key", one["start"], "--key", one["end"], "--key", one["user_id"]]
assert barriered_cli(["inspect", SNAP, "--operator", STORE, *key, "--partitions", "5"]) == 0
