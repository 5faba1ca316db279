# Databricks notebook source
# MAGIC %md
# MAGIC # Querying checkpoints and state with SQL
# MAGIC
# MAGIC Every checkpoint is a version of plain Delta tables under the snapshot path:
# MAGIC
# MAGIC | table | holds |
# MAGIC |---|---|
# MAGIC | `_checkpoints` | one row per finished checkpoint (the history) |
# MAGIC | `state` | keyed state: `operator, key_group`, the key columns and state fields as their types (`user_id, total, count`), `checkpoint_id` |
# MAGIC | `inflight` | the records unaligned checkpoints overtook, by `checkpoint_id` |
# MAGIC
# MAGIC A checkpoint's state is the `state` table *at its version* (`state_table_version`).
# MAGIC This notebook reads them three ways: Spark SQL over `barriered.state_table`, SQL with
# MAGIC delta-rs alone (no Spark), and, on Databricks, Delta time travel.

# COMMAND ----------

import os
import tempfile

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

import barriered
from barriered.examples import RunningTotals

try:
    spark  # noqa: B018  (the notebook's session on Databricks)
except NameError:
    from barriered.demo import local_session

    spark = local_session()

try:
    dbutils.widgets.text("base", "/Volumes/main/default/scratch/barriered-sql")  # noqa: F821
    BASE = dbutils.widgets.get("base")  # noqa: F821
except NameError:  # not on Databricks
    BASE = tempfile.mkdtemp(prefix="barriered-sql-")
try:
    display  # noqa: B018  (Databricks' display)
except NameError:  # plain python: tables printed, figures written to PNG files
    from barriered.views import display

barriered.install(spark)
spark.conf.set("spark.sql.streaming.barriered.maxParallelism", "8")

# COMMAND ----------

# MAGIC %md
# MAGIC First some checkpoints: a skewed `rate` upstream through a running total, with
# MAGIC unaligned checkpoints (so some carry in-flight records). Only the last
# MAGIC `retainedCheckpoints` completed checkpoints (default 3) stay readable; this run keeps
# MAGIC them all.

# COMMAND ----------

SNAP = os.path.join(BASE, "snapshots")
events = (
    spark.readStream.format("barriered")
    .option("upstream", "rate")
    .option("channels", "3")
    .option("rowsPerSecond", "0")
    .option("rowsPerChannel", "40")
    .option("skew", "0:4")
    .option("keys", "20")
    .option("maxRowsPerChannel", "20")
    .option("checkpointInterval", "10ms")
    .option("bufferPerChannel", "40")
    .option("unaligned.enabled", "true")
    .option("alignedCheckpointTimeout", "0s")
    .option("retainedCheckpoints", "20")  # keep every checkpoint of this run readable
    .option("snapshotPath", SNAP)
    .load()
)
query = (
    barriered.keyed(events, "user_id")
    .process(RunningTotals())
    .writeStream.format("noop")
    .option("checkpointLocation", os.path.join(BASE, "spark-checkpoint"))
    .trigger(availableNow=True)
    .start()
)
barriered.await_termination(query)

# COMMAND ----------

# MAGIC %md
# MAGIC ## The history as a SQL view

# COMMAND ----------

barriered.checkpoints(spark, SNAP, full=True).createOrReplaceTempView("checkpoints")
completed = spark.sql(
    """
    SELECT checkpoint_id, effective_mode, end_to_end_duration_ms, state_rows,
           inflight_rows, state_table_version, inflight_table_version
    FROM checkpoints WHERE status = 'completed' ORDER BY checkpoint_id
    """
)
display(completed)  # noqa: F821
first, last = completed.first(), completed.orderBy("checkpoint_id", ascending=False).first()

# COMMAND ----------

# MAGIC %md
# MAGIC ## State with Spark SQL
# MAGIC
# MAGIC `barriered.state_table(spark, path, checkpoint=None)` is the state of a checkpoint
# MAGIC (the latest completed by default) as a DataFrame: the key columns and state
# MAGIC fields are columns of their declared types (`operator=` keeps one operator's).

# COMMAND ----------

barriered.state_table(spark, SNAP).createOrReplaceTempView("state")
totals = spark.sql(
    """
    SELECT key_group, user_id, total, count FROM state ORDER BY total DESC
    """
)
display(totals)  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC Time travel: the state at the first completed checkpoint, next to the last one.
# MAGIC Totals only grow, and the last checkpoint of the run has every record.

# COMMAND ----------

barriered.state_table(spark, SNAP, checkpoint=first["checkpoint_id"]).createOrReplaceTempView(
    "state_first"
)
growth = spark.sql(
    """
    SELECT l.user_id, f.total AS first_total, l.total AS last_total
    FROM state l LEFT JOIN state_first f ON l.operator = f.operator AND l.user_id = f.user_id
    ORDER BY user_id
    """
)
display(growth)  # noqa: F821
assert growth.where("first_total > last_total").count() == 0

# COMMAND ----------

# MAGIC %md
# MAGIC ## The same with delta-rs alone (DataFusion SQL, no Spark)
# MAGIC
# MAGIC `deltalake.QueryBuilder` runs SQL over Delta tables loaded at a version; the result
# MAGIC is Arrow. This works anywhere Python runs: a laptop, a job, a CI check.

# COMMAND ----------

state_at_last = DeltaTable(os.path.join(SNAP, "state"), version=last["state_table_version"])
per_group = pa.table(
    QueryBuilder()
    .register("state", state_at_last)
    .execute("SELECT key_group, count(*) AS keys FROM state GROUP BY key_group ORDER BY key_group")
    .read_all()
)
print(per_group.to_pandas())
in_spark = spark.sql("SELECT key_group, count(*) AS keys FROM state GROUP BY key_group")
assert {r["key_group"]: r["keys"] for r in per_group.to_pylist()} == {
    r["key_group"]: r["keys"] for r in in_spark.collect()
}

# COMMAND ----------

# MAGIC %md
# MAGIC The in-flight records of an unaligned checkpoint: per channel, the backlog the
# MAGIC barrier overtook, stored with the checkpoint.

# COMMAND ----------

with_inflight = completed.where("inflight_rows > 0").first()
inflight = DeltaTable(
    os.path.join(SNAP, "inflight"), version=with_inflight["inflight_table_version"]
)
overtaken = pa.table(
    QueryBuilder()
    .register("inflight", inflight)
    .execute(
        f"""
        SELECT _channel, count(*) AS records, min(_seq) AS first_seq, max(_seq) AS last_seq
        FROM inflight WHERE checkpoint_id = {with_inflight["checkpoint_id"]}
        GROUP BY _channel ORDER BY _channel
        """
    )
    .read_all()
)
print(overtaken.to_pandas())
assert sum(overtaken["records"].to_pylist()) == with_inflight["inflight_rows"]

# COMMAND ----------

# MAGIC %md
# MAGIC ## On Databricks: Delta time travel in SQL
# MAGIC
# MAGIC The tables are Delta tables, so Databricks SQL reads them directly:
# MAGIC
# MAGIC ```sql
# MAGIC SELECT checkpoint_id, effective_mode, state_table_version
# MAGIC FROM delta.`/Volumes/main/default/scratch/barriered-sql/snapshots/_checkpoints`;
# MAGIC
# MAGIC SELECT user_id, total, count
# MAGIC FROM delta.`/Volumes/main/default/scratch/barriered-sql/snapshots/state` VERSION AS OF 3;
# MAGIC ```
