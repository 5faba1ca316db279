# Databricks notebook source
# MAGIC %md
# MAGIC # spark-barriered: quickstart
# MAGIC
# MAGIC A running total per user over a folder of JSON files, with Flink-style barrier
# MAGIC checkpoints: consistent snapshots of the keyed state on their own cadence, each one a
# MAGIC version of a Delta table you can read back.
# MAGIC
# MAGIC The input is small and finite and the query runs with `trigger(availableNow=True)`,
# MAGIC so the notebook finishes in seconds (it also runs on Databricks serverless).

# COMMAND ----------

# MAGIC %md
# MAGIC On Databricks, install the wheel first (as a cluster library, or in a cell:
# MAGIC `%pip install /Volumes/<catalog>/<schema>/<volume>/spark_barriered-0.1.0-py3-none-any.whl`;
# MAGIC `make wheel` in a clone builds it into `dist/`, upload it to the Volume),
# MAGIC and set the `base` widget to a folder the driver and the executors share (a Volume).
# MAGIC Elsewhere (`python notebooks/01_quickstart.py`) the notebook makes a local Spark
# MAGIC session and a temporary folder, prints its tables and writes its figure to a PNG file.

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
    from barriered.demo import local_session

    spark = local_session()

try:
    dbutils.widgets.text("base", "/Volumes/main/default/scratch/barriered-quickstart")  # noqa: F821
    BASE = dbutils.widgets.get("base")  # noqa: F821
except NameError:  # not on Databricks
    BASE = tempfile.mkdtemp(prefix="barriered-quickstart-")
try:
    display  # noqa: B018  (Databricks' display)
except NameError:  # plain python: tables printed, figures written to PNG files
    from barriered.views import display
print(f"working under {BASE}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The input: one folder per channel
# MAGIC
# MAGIC The `files` upstream makes each sub-folder a *channel* (a split with a position that
# MAGIC only grows). Folder `eu` holds three times the records of the others.

# COMMAND ----------

EVENTS = os.path.join(BASE, "events")
ROWS = {"eu": 60, "us": 20, "asia": 20}
for region, rows in ROWS.items():
    os.makedirs(os.path.join(EVENTS, region), exist_ok=True)
    for part in range(2):
        with open(os.path.join(EVENTS, region, f"part-{part}.json"), "w") as out:
            for i in range(rows // 2):
                record = {"user_id": f"user-{(i * 7 + part) % 10}", "amount": i % 5 + 1}
                out.write(json.dumps(record) + "\n")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Checkpoints
# MAGIC
# MAGIC `barriered.install(spark)` registers the `barriered` source and the checkpoint
# MAGIC coordinator. Checkpoints are triggered every 100 ms (at most one per micro-batch);
# MAGIC they start aligned and turn unaligned when the alignment takes longer than 50 ms.
# MAGIC `maxParallelism` is the number of key groups, fixed for the life of the snapshots.

# COMMAND ----------

barriered.install(spark)
# Every spark.sql.streaming.barriered.* key is also a source option; serverless refuses
# spark.conf.set, so this notebook gives them as options of the source (next cell).
CHECKPOINTS = {
    "checkpointInterval": "100ms",
    "maxParallelism": "8",
    "unaligned.enabled": "true",
    "alignedCheckpointTimeout": "50ms",
}

# COMMAND ----------

# MAGIC %md
# MAGIC ## The query
# MAGIC
# MAGIC `maxRowsPerChannel` admits at most 15 records per channel and micro-batch, so `eu`
# MAGIC lags behind the others. `bufferPerChannel` bounds how far past what it delivered the
# MAGIC source reads, hence how far a checkpoint's barrier `B_n(c)` reaches: the
# MAGIC checkpoints cover the input in steps. `barriered.keyed(...).process(...)` keeps the state per key
# MAGIC and snapshots it at every barrier. `barriered.await_termination` waits for the query
# MAGIC and for the coordinator to record its last checkpoint.

# COMMAND ----------

SNAPSHOTS = os.path.join(BASE, "snapshots")
events = (
    spark.readStream.format("barriered")
    .option("upstream", "files")
    .option("path", EVENTS)
    .option("schema", "user_id string, amount long")
    .option("maxRowsPerChannel", "15")
    .option("bufferPerChannel", "20")  # read at most 20 records ahead of delivery
    .option("snapshotPath", SNAPSHOTS)
    .options(**CHECKPOINTS)
    .load()
)
totals = barriered.keyed(events, "user_id").process(RunningTotals())
query = (
    totals.writeStream.format("parquet")
    .option("path", os.path.join(BASE, "totals"))
    .option("checkpointLocation", os.path.join(BASE, "spark-checkpoint"))
    .trigger(availableNow=True)
    .start()
)
barriered.await_termination(query)

# COMMAND ----------

# MAGIC %md
# MAGIC ## The checkpoint history
# MAGIC
# MAGIC One row per finished checkpoint, as in Flink's checkpoint history: mode, status,
# MAGIC trigger time, end-to-end and alignment duration, bytes of state and of in-flight
# MAGIC records, acknowledgements: the concise view, in the mode each cut was really taken
# MAGIC in. `full=True` gives every column (`mode` as the coordinator decided it,
# MAGIC `effective_mode`, the barrier positions, ...).

# COMMAND ----------

display(barriered.checkpoints(spark, query))  # noqa: F821
history = barriered.checkpoints(spark, query, full=True)  # every column

# COMMAND ----------

fig = barriered.plot_checkpoints(query)
display(fig)  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## What the last checkpoint holds
# MAGIC
# MAGIC `barriered.state_table` reads the keyed state of a checkpoint (the latest completed
# MAGIC by default), with the key columns and state fields as typed columns (`user_id`,
# MAGIC `total`, `count`). The last checkpoint of an `availableNow` run
# MAGIC covers every record, so its state equals a batch aggregation over the same files.

# COMMAND ----------

state = barriered.state_table(spark, query).select("user_id", "total")
expected = (
    spark.read.schema("user_id string, amount long")
    .json(os.path.join(EVENTS, "*", "*.json"))
    .groupBy("user_id")
    .agg(F.sum("amount").alias("total"))
)
mismatches = state.exceptAll(expected).count() + expected.exceptAll(state).count()
print(f"{state.count()} users in the snapshot, {mismatches} differ from the batch result")
assert mismatches == 0

# COMMAND ----------

# MAGIC %md
# MAGIC The query's own output (a running total per user and batch) ends at the same totals.

# COMMAND ----------

final_output = (
    spark.read.parquet(os.path.join(BASE, "totals"))
    .groupBy("user_id")
    .agg(F.max("total").alias("total"))
)
assert final_output.exceptAll(expected).count() == 0
display(final_output.orderBy("user_id"))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC From a terminal, the same history, contents and plot:
# MAGIC
# MAGIC ```
# MAGIC barriered checkpoints <base>/snapshots
# MAGIC barriered inspect <base>/snapshots
# MAGIC barriered plot <base>/snapshots -o checkpoints.png
# MAGIC ```
