# Databricks notebook source
# MAGIC %md
# MAGIC # Aligned vs unaligned checkpoints under a skewed upstream
# MAGIC
# MAGIC One channel produces four times as much as the others, and every channel is admitted
# MAGIC at most 20 records per micro-batch, so that channel lags. The same input runs twice:
# MAGIC
# MAGIC * **aligned**: a channel that reached its barrier position `B_n(c)` gets no more
# MAGIC   records until the lagging channel reaches its own; the batch in which it does is the
# MAGIC   cut. Nothing is stored but state; the fast channels wait (*alignment*).
# MAGIC * **unaligned**: the barrier overtakes the lagging channel's backlog `[D(c), B_n(c))`;
# MAGIC   the next batch boundary is the cut and the backlog is stored with the snapshot as
# MAGIC   *in-flight* records. Nothing waits.
# MAGIC
# MAGIC Both end with exactly the same keyed state.

# COMMAND ----------

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
    dbutils.widgets.text("base", "/Volumes/main/default/scratch/barriered-modes")  # noqa: F821
    BASE = dbutils.widgets.get("base")  # noqa: F821
except NameError:  # not on Databricks
    BASE = tempfile.mkdtemp(prefix="barriered-modes-")
try:
    display  # noqa: B018  (Databricks' display)
except NameError:  # plain python: tables printed, figures written to PNG files
    from barriered.views import display

barriered.install(spark)
spark.conf.set("spark.sql.streaming.barriered.maxParallelism", "8")

# COMMAND ----------

# MAGIC %md
# MAGIC The `rate` upstream makes deterministic records (`user_id`, `amount`) per channel;
# MAGIC `skew` `0:4` gives channel 0 four times the records. Source options override the
# MAGIC session's `spark.sql.streaming.barriered.*` keys for one query: a checkpoint is
# MAGIC triggered every 10 ms (so at every micro-batch) and the source reads at most 40
# MAGIC records ahead per channel (`bufferPerChannel`), which bounds both the alignment and
# MAGIC the in-flight records.

# COMMAND ----------

SOURCE = {
    "upstream": "rate",
    "channels": "3",
    "rowsPerSecond": "0",  # everything available at once: a finite input
    "rowsPerChannel": "40",
    "skew": "0:4",
    "keys": "20",
    "maxRowsPerChannel": "20",
    "checkpointInterval": "10ms",
    "bufferPerChannel": "40",
}
MODES = {
    "aligned": {"unaligned.enabled": "false"},
    "unaligned": {"unaligned.enabled": "true", "alignedCheckpointTimeout": "0s"},
}


def run(mode):
    """Run the input once in ``mode``, to the end; return the finished query."""
    events = (
        spark.readStream.format("barriered")
        .options(**SOURCE)
        .options(**MODES[mode])
        .option("snapshotPath", os.path.join(BASE, mode, "snapshots"))
        .load()
    )
    query = (
        barriered.keyed(events, "user_id")
        .process(RunningTotals())
        .writeStream.format("noop")
        .option("checkpointLocation", os.path.join(BASE, mode, "spark-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query)
    return query


queries = {mode: run(mode) for mode in MODES}

# COMMAND ----------

# MAGIC %md
# MAGIC ## The two histories side by side

# COMMAND ----------

history = barriered.checkpoints(spark, queries["aligned"], full=True).withColumn("run", F.lit("aligned"))
history = history.unionByName(
    barriered.checkpoints(spark, queries["unaligned"], full=True).withColumn("run", F.lit("unaligned"))
)
summary = (
    history.where("status = 'completed'")
    .groupBy("run")
    .agg(
        F.count("*").alias("completed"),
        F.expr("percentile(end_to_end_duration_ms, 0.5)").alias("end_to_end_p50_ms"),
        F.max("alignment_duration_ms").alias("max_alignment_ms"),
        F.sum("inflight_rows").alias("inflight_rows"),
        F.sum("inflight_bytes").alias("inflight_bytes"),
    )
    .orderBy("run")
)
display(summary)  # noqa: F821

# COMMAND ----------

display(history.orderBy("run", "checkpoint_id"))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## The plots
# MAGIC
# MAGIC Aligned checkpoints (blue circles) spend time aligning and store no in-flight
# MAGIC records; unaligned ones (orange triangles) do not align, and store the overtaken
# MAGIC backlog (the hatched part of the bars).

# COMMAND ----------

display(barriered.plot_checkpoints(queries["aligned"], title="aligned"))  # noqa: F821

# COMMAND ----------

display(barriered.plot_checkpoints(queries["unaligned"], title="unaligned"))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## What the numbers say

# COMMAND ----------

by_run = {row["run"]: row for row in summary.collect()}
aligned, unaligned = by_run["aligned"], by_run["unaligned"]
print(
    f"aligned: alignment up to {aligned['max_alignment_ms']} ms, "
    f"{aligned['inflight_rows']} in-flight rows; unaligned: alignment up to "
    f"{unaligned['max_alignment_ms']} ms, {unaligned['inflight_rows']} in-flight rows"
)
assert aligned["inflight_rows"] == 0 and aligned["max_alignment_ms"] > 0
assert unaligned["inflight_rows"] > 0

# COMMAND ----------

# MAGIC %md
# MAGIC Either way the last checkpoint holds the same state: every record counted once.

# COMMAND ----------

final = {
    mode: barriered.state_table(spark, q).select("user_id", "total", "count")
    for mode, q in queries.items()
}
differences = final["aligned"].exceptAll(final["unaligned"]).count()
differences += final["unaligned"].exceptAll(final["aligned"]).count()
assert differences == 0
print(f"{final['aligned'].count()} keys, identical in both runs")
