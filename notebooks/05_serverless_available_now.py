# Databricks notebook source
# MAGIC %md
# MAGIC # spark-barriered on serverless: scheduled `availableNow` runs
# MAGIC
# MAGIC Databricks serverless (and every Spark Connect client) runs streaming queries with
# MAGIC `availableNow` or once triggers only. The pattern: a job runs this notebook on a
# MAGIC schedule; each run reads what arrived since the last one, takes checkpoints on its
# MAGIC interval while it runs and a last one at its end, and the next run continues from the
# MAGIC same Spark checkpoint location (or, with a new one, restores the latest barriered
# MAGIC checkpoint with `restoreFrom`).
# MAGIC
# MAGIC Serverless refuses most `spark.conf.set` calls, so every barriered key is given as a
# MAGIC source option. The snapshot path is on a Unity Catalog volume (`/Volumes/...`): the
# MAGIC notebook (where the checkpoint coordinator runs) and the Python workers (where the
# MAGIC source and the keyed operator write) both reach it as a local path. Locally the
# MAGIC notebook uses a temporary folder; the tests run it over a local Spark Connect server.

# COMMAND ----------

import json
import os
import tempfile

from pyspark.sql import functions as F

import barriered
from barriered.examples import RunningTotals

try:
    spark  # noqa: B018  (the notebook's session on Databricks)
except NameError:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.remote("local[2]")  # a local Spark Connect server
        .config("spark.sql.shuffle.partitions", "2")  # Spark's 200: 200 tasks a batch
        .config("spark.ui.showConsoleProgress", "false")  # no progress bars
        .getOrCreate()
    )

try:
    dbutils.widgets.text("base", "/Volumes/main/default/scratch/barriered-scheduled")  # noqa: F821
    BASE = dbutils.widgets.get("base")  # noqa: F821
except NameError:  # not on Databricks
    BASE = tempfile.mkdtemp(prefix="barriered-scheduled-")
try:
    display  # noqa: B018  (Databricks' display)
except NameError:  # plain python: tables printed, figures written to PNG files
    from barriered.views import display
print(f"working under {BASE}")
barriered.install(spark)

# COMMAND ----------

# MAGIC %md
# MAGIC ## The input: JSON files landing in one folder per channel
# MAGIC
# MAGIC `land(batch)` stands for the files that arrive between two scheduled runs.

# COMMAND ----------

EVENTS = os.path.join(BASE, "events")


def land(batch: int) -> None:
    for region, rows in {"eu": 120, "us": 40, "asia": 40}.items():
        os.makedirs(os.path.join(EVENTS, region), exist_ok=True)
        path = os.path.join(EVENTS, region, f"batch-{batch}.json")
        with open(path, "w") as out:
            for i in range(rows):
                record = {"user_id": f"user-{(i * 7 + batch) % 10}", "amount": i % 5 + 1}
                out.write(json.dumps(record) + "\n")


# COMMAND ----------

# MAGIC %md
# MAGIC ## One scheduled run
# MAGIC
# MAGIC Every key is a source option. A checkpoint every 100 ms while the run lasts (at most
# MAGIC one per micro-batch), and `barriered.await_termination` returns once the coordinator
# MAGIC has recorded the run's last checkpoint, which covers every record read.

# COMMAND ----------

SNAPSHOTS = os.path.join(BASE, "snapshots")
KEYS = {
    "snapshotPath": SNAPSHOTS,
    "checkpointInterval": "100ms",
    "maxParallelism": "8",
    "unaligned.enabled": "true",
    "alignedCheckpointTimeout": "50ms",
    "bufferPerChannel": "20",
}


def completed_ids() -> set[int]:
    if not os.path.exists(SNAPSHOTS):
        return set()
    history = barriered.checkpoints(spark, SNAPSHOTS, full=True).where("status = 'completed'")
    return {r["checkpoint_id"] for r in history.collect()}


def scheduled_run(checkpoint_location: str, restore: bool = False) -> list[int]:
    """One run of the job; returns the ids of the checkpoints it completed."""
    before = completed_ids()
    reader = (
        spark.readStream.format("barriered")
        .option("upstream", "files")
        .option("path", EVENTS)
        .option("schema", "user_id string, amount long")
        .option("maxRowsPerChannel", "15")
        .options(**KEYS)
    )
    if restore:
        reader = reader.option("restoreFrom", "latest")
    totals = barriered.keyed(reader.load(), "user_id").process(RunningTotals())
    query = (
        totals.writeStream.format("noop")
        .option("checkpointLocation", checkpoint_location)
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query)
    return sorted(completed_ids() - before)


def check_latest_state() -> int:
    """The latest checkpoint's state equals a batch recount of every file landed so far."""
    state = barriered.state_table(spark, SNAPSHOTS).select("user_id", "total")
    expected = (
        spark.read.schema("user_id string, amount long")
        .json(os.path.join(EVENTS, "*", "*.json"))
        .groupBy("user_id")
        .agg(F.sum("amount").alias("total"))
    )
    return state.exceptAll(expected).count() + expected.exceptAll(state).count()


# COMMAND ----------

land(1)
CHECKPOINT = os.path.join(BASE, "spark-checkpoint")
first_run = scheduled_run(CHECKPOINT)
print(f"run 1 completed checkpoints {first_run}")
assert len(first_run) >= 2 and check_latest_state() == 0

# COMMAND ----------

# MAGIC %md
# MAGIC ## The next run continues
# MAGIC
# MAGIC New files landed; the next scheduled run uses the same checkpoint location, reads
# MAGIC only the new records and keeps writing checkpoints to the same snapshot path with
# MAGIC higher ids.

# COMMAND ----------

land(2)
second_run = scheduled_run(CHECKPOINT)
print(f"run 2 completed checkpoints {second_run}")
assert second_run and min(second_run) > max(first_run) and check_latest_state() == 0

# COMMAND ----------

# MAGIC %md
# MAGIC ## A run with a new checkpoint location restores
# MAGIC
# MAGIC When the Spark checkpoint location is lost or the job changed (other partitions,
# MAGIC new code), the run restores the latest barriered checkpoint with
# MAGIC `restoreFrom=latest` into a new checkpoint location.

# COMMAND ----------

land(3)
third_run = scheduled_run(os.path.join(BASE, "spark-checkpoint-2"), restore=True)
print(f"run 3 (restored) completed checkpoints {third_run}")
assert third_run and min(third_run) > max(second_run) and check_latest_state() == 0
display(barriered.checkpoints(spark, SNAPSHOTS, full=True))  # noqa: F821
