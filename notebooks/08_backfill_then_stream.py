# Databricks notebook source
# MAGIC %md
# MAGIC # Backfill a year of history, then stream
# MAGIC
# MAGIC A new streaming job usually starts from empty state and replays its whole input to
# MAGIC rebuild it: months of history through micro-batches. With the state processor
# MAGIC (`barriered.state_processor`, Flink's State Processor API for Spark) the history is
# MAGIC computed **in batch** and written as a savepoint, and the stream starts from it,
# MAGIC reading only what arrives after the history. This notebook
# MAGIC
# MAGIC 1. writes a year of order files (one folder per region: the source's channels),
# MAGIC 2. bootstraps the running totals per user from them in one batch job,
# MAGIC 3. lets two more months arrive and streams them from the savepoint, with another
# MAGIC    number of shuffle partitions,
# MAGIC 4. checks that the streamed state equals a batch aggregation over every file,
# MAGIC 5. transforms the state offline (drops test users, adds a field) and restores again.
# MAGIC
# MAGIC The same works for Spark's own `groupBy().agg()` and `dropDuplicates` under the JVM
# MAGIC state store provider (dedicated clusters, see notebook 06): give the streaming query
# MAGIC itself, `state_processor.SparkState(events.groupBy("user_id").agg(...), history)`; its
# MAGIC stores, their types and operator ids are taken from the query's plan and their values
# MAGIC (aggregation buffers, e.g. sum and count of an average) computed by Spark in batch
# MAGIC (`statestore/README.md`, "Writing state offline").

# COMMAND ----------

import json
import os
import tempfile

from pyspark.sql import functions as F

import barriered
from barriered import state_processor
from barriered.examples import RunningTotals

try:
    spark  # noqa: B018  (the notebook's session on Databricks)
except NameError:
    from barriered.demo import local_session

    spark = local_session()

try:
    dbutils.widgets.text("base", "/Volumes/main/default/scratch/barriered-backfill")  # noqa: F821
    BASE = dbutils.widgets.get("base")  # noqa: F821
except NameError:  # not on Databricks
    BASE = tempfile.mkdtemp(prefix="barriered-backfill-")
try:
    display  # noqa: B018  (Databricks' display)
except NameError:  # plain python: tables printed, figures written to PNG files
    from barriered.views import display

barriered.install(spark)
spark.conf.set("spark.sql.streaming.barriered.maxParallelism", "16")  # fixed for the state
ORDERS = os.path.join(BASE, "orders")
SOURCE = {"upstream": "files", "path": ORDERS, "schema": "user_id string, amount long"}

# COMMAND ----------


def write_month(year, month):
    """One JSON-lines file per region for a month of orders."""
    for region, rows in {"eu": 40, "us": 30, "asia": 20}.items():
        os.makedirs(os.path.join(ORDERS, region), exist_ok=True)
        with open(os.path.join(ORDERS, region, f"{year}-{month:02d}.json"), "w") as out:
            for i in range(rows):
                user = f"user-{(i * 7 + month) % 12}" if i % 10 else f"test-{region}"
                out.write(json.dumps({"user_id": user, "amount": (i + month) % 9 + 1}) + "\n")


for month in range(1, 13):
    write_month(2025, month)

# COMMAND ----------

# MAGIC %md
# MAGIC **Bootstrap.** The history is read as a batch DataFrame and the processor the stream
# MAGIC will run computes each user's state from it (`compute=True`). The savepoint records,
# MAGIC per channel, that the stream starts after the files that exist now.

# COMMAND ----------

history = spark.read.schema("user_id string, amount long").json(
    os.path.join(ORDERS, "*", "2025-*.json")
)
saved = state_processor.bootstrap(
    spark,
    os.path.join(BASE, "savepoint-2025"),
    SOURCE,
    [state_processor.KeyedState(history, ["user_id"], RunningTotals(), compute=True)],
)
display(state_processor.read_state(spark, saved.path, "running_totals"))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC **Stream.** Two months arrive; the query restores the savepoint (any number of
# MAGIC shuffle partitions) and reads only them.

# COMMAND ----------

write_month(2026, 1)
write_month(2026, 2)
spark.conf.set("spark.sql.shuffle.partitions", "3")


def stream(restore_from, snapshots, checkpoint, processor):
    events = (
        spark.readStream.format("barriered")
        .options(**SOURCE)
        .option("snapshotPath", snapshots)
        .option("restoreFrom", restore_from)
        .load()
    )
    query = (
        barriered.keyed(events, "user_id")
        .process(processor, "running_totals")
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query)
    return barriered.state_table(spark, snapshots, operator="running_totals")


SNAP = os.path.join(BASE, "snapshots")
streamed = stream(saved.path, SNAP, os.path.join(BASE, "ck"), RunningTotals())
everything = (
    spark.read.schema("user_id string, amount long")
    .json(os.path.join(ORDERS, "*", "*.json"))
    .groupBy("user_id")
    .agg(F.sum("amount").alias("total"))
)
got = streamed.select("user_id", "total")
mismatches = got.exceptAll(everything).count() + everything.exceptAll(got).count()
assert mismatches == 0, f"{mismatches} users differ from the batch totals"
display(barriered.checkpoints(spark, SNAP))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC **Transform.** Test users must go, and the job gains a `since` field: the state of
# MAGIC the latest checkpoint is changed offline into a new savepoint (the snapshot path is
# MAGIC only read), and a processor declaring the new field restores it.

# COMMAND ----------


class TotalsSince(RunningTotals):
    """RunningTotals with the year a user was first seen (set by the transform)."""

    state_schema = "total long, count long, since int"

    def process_batch(self, rows, state):
        output, new = super().process_batch(rows, state.drop(columns=["since"]))
        since = dict(zip(state["user_id"], state["since"], strict=True))
        new["since"] = [int(since.get(u, 2026)) for u in new["user_id"]]
        return output, new


fixed = state_processor.transform(
    spark,
    SNAP,
    os.path.join(BASE, "savepoint-fixed"),
    "running_totals",
    lambda s: s.where(~F.col("user_id").startswith("test-")).withColumn("since", F.lit(2025)),
)
write_month(2026, 3)
final = stream(
    fixed.path, os.path.join(BASE, "snapshots-2"), os.path.join(BASE, "ck-2"), TotalsSince()
)
test_users = final.where(F.col("user_id").startswith("test-")).collect()
march = (
    spark.read.schema("user_id string, amount long")
    .json(os.path.join(ORDERS, "*", "2026-03.json"))
    .where(F.col("user_id").startswith("test-"))
    .groupBy("user_id")
    .agg(F.sum("amount").alias("total"))
)
# test users start again from March only; everyone else keeps the whole history
assert sorted((r.user_id, r.total) for r in test_users) == sorted(
    (r.user_id, r.total) for r in march.collect()
)
assert {r.since for r in final.where(~F.col("user_id").startswith("test-")).collect()} == {2025}
display(final)  # noqa: F821
