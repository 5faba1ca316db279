# Databricks notebook source
# MAGIC %md
# MAGIC # Crash, restore and rescale
# MAGIC
# MAGIC A barriered snapshot is a complete restore point: keyed state per key group, the
# MAGIC barrier position of every channel and the in-flight records. This notebook
# MAGIC
# MAGIC 1. runs a keyed running total over the first half of a folder of JSON files,
# MAGIC 2. loses the query's Spark checkpoint, as when a cluster and its local state are gone,
# MAGIC 3. restores from the latest barriered checkpoint into a **new** checkpoint location,
# MAGIC    with twice the shuffle partitions (rescale), and reads the second half,
# MAGIC 4. takes a savepoint and restores from it with fewer partitions,
# MAGIC
# MAGIC and checks after each step that the state equals a batch aggregation over the same
# MAGIC files: nothing lost, nothing counted twice.

# COMMAND ----------

import json
import os
import shutil
import tempfile

from pyspark.sql import functions as F

import barriered
from barriered.examples import RunningTotals

try:
    spark  # noqa: B018  (the notebook's session on Databricks)
except NameError:
    from barriered.demo import local_session

    spark = local_session()

try:
    dbutils.widgets.text("base", "/Volumes/main/default/scratch/barriered-restore")  # noqa: F821
    BASE = dbutils.widgets.get("base")  # noqa: F821
except NameError:  # not on Databricks
    BASE = tempfile.mkdtemp(prefix="barriered-restore-")
try:
    display  # noqa: B018  (Databricks' display)
except NameError:  # plain python: tables printed, figures written to PNG files
    from barriered.views import display

barriered.install(spark)
spark.conf.set("spark.sql.streaming.barriered.maxParallelism", "8")  # fixed for the path
EVENTS = os.path.join(BASE, "events")
SNAP = os.path.join(BASE, "snapshots")

# COMMAND ----------

# MAGIC %md
# MAGIC The input arrives in parts: one folder per channel, a file per part.


# COMMAND ----------


def write_part(part):
    """Write part ``part`` of the input: one JSON-lines file per channel folder."""
    for region, rows in {"eu": 30, "us": 10, "asia": 10}.items():
        os.makedirs(os.path.join(EVENTS, region), exist_ok=True)
        with open(os.path.join(EVENTS, region, f"part-{part}.json"), "w") as out:
            for i in range(rows):
                record = {"user_id": f"user-{(i * 3 + part) % 8}", "amount": i % 4 + 1}
                out.write(json.dumps(record) + "\n")


def run(checkpoint_location, restore_from=None, snapshots=SNAP):
    """Run the keyed total to the end of the input; return the finished query."""
    reader = (
        spark.readStream.format("barriered")
        .option("upstream", "files")
        .option("path", EVENTS)
        .option("schema", "user_id string, amount long")
        .option("maxRowsPerChannel", "15")
        .option("checkpointInterval", "10ms")
        .option("snapshotPath", snapshots)
    )
    if restore_from is not None:
        reader = reader.option("restoreFrom", restore_from)
    query = (
        barriered.keyed(reader.load(), "user_id")
        .process(RunningTotals())
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint_location)
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query)
    return query


def mismatches(snapshots=SNAP):
    """Users whose snapshot total differs from a batch sum over every file so far."""
    state = barriered.state_table(spark, snapshots).select("user_id", "total")
    batch = (
        spark.read.schema("user_id string, amount long")
        .json(os.path.join(EVENTS, "*", "*.json"))
        .groupBy("user_id")
        .agg(F.sum("amount").alias("total"))
    )
    return state.exceptAll(batch).count() + batch.exceptAll(state).count()


# COMMAND ----------

# MAGIC %md
# MAGIC ## 1. A first run, with 2 shuffle partitions

# COMMAND ----------

spark.conf.set("spark.sql.shuffle.partitions", "2")
write_part(0)
first = run(os.path.join(BASE, "spark-checkpoint-1"))
assert mismatches() == 0
display(barriered.checkpoints(spark, SNAP))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## 2. The crash
# MAGIC
# MAGIC The Spark checkpoint location is lost (or unusable: Spark ignores a changed
# MAGIC `spark.sql.shuffle.partitions` when a stateful query restarts from it). The snapshot
# MAGIC path survives. Meanwhile, more input arrives.

# COMMAND ----------

shutil.rmtree(os.path.join(BASE, "spark-checkpoint-1"))
write_part(1)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 3. Restore from the latest checkpoint, rescaled to 4 partitions
# MAGIC
# MAGIC `restoreFrom` = `latest` (or a checkpoint id) starts every channel at the
# MAGIC checkpoint's barrier position, replays its in-flight records and loads each key
# MAGIC group's state; the number of partitions is free, the number of key groups
# MAGIC (`maxParallelism`) is not.

# COMMAND ----------

spark.conf.set("spark.sql.shuffle.partitions", "4")
restored = run(os.path.join(BASE, "spark-checkpoint-2"), restore_from="latest")
after_restore = mismatches()
assert after_restore == 0
display(barriered.checkpoints(spark, SNAP))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## 4. A savepoint, restored with 1 partition
# MAGIC
# MAGIC `barriered.savepoint(query, path)` takes an aligned snapshot of a running query and
# MAGIC writes a self-contained copy to `path`, kept whatever retention does to the snapshot
# MAGIC path; it can be restored elsewhere, into a new snapshot path (a snapshot path holds
# MAGIC the checkpoints of one lineage). Here the restored query restarts from its own Spark
# MAGIC checkpoint with a processing-time trigger, reads one more part, the savepoint is
# MAGIC taken once it has caught up, and a new query restores from it.

# COMMAND ----------

write_part(2)
reader = (
    spark.readStream.format("barriered")
    .option("upstream", "files")
    .option("path", EVENTS)
    .option("schema", "user_id string, amount long")
    .option("snapshotPath", SNAP)
)
running = (
    barriered.keyed(reader.load(), "user_id")
    .process(RunningTotals())
    .writeStream.format("noop")
    .option("checkpointLocation", os.path.join(BASE, "spark-checkpoint-2"))
    .start()
)
running.processAllAvailable()
SAVEPOINT = os.path.join(BASE, "savepoints", "before-upgrade")
barriered.savepoint(running, SAVEPOINT)
running.stop()

write_part(3)
spark.conf.set("spark.sql.shuffle.partitions", "1")
SNAP_AFTER_UPGRADE = os.path.join(BASE, "snapshots-after-upgrade")
from_savepoint = run(
    os.path.join(BASE, "spark-checkpoint-3"), restore_from=SAVEPOINT, snapshots=SNAP_AFTER_UPGRADE
)
after_savepoint = mismatches(SNAP_AFTER_UPGRADE)
assert after_savepoint == 0
history = barriered.checkpoints(spark, SNAP, full=True)
display(history)  # noqa: F821
display(barriered.checkpoints(spark, SNAP_AFTER_UPGRADE))  # noqa: F821
