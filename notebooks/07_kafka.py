# Databricks notebook source
# MAGIC %md
# MAGIC # spark-barriered: reading Kafka
# MAGIC
# MAGIC A running total per user over a Kafka topic, with unaligned barrier checkpoints.
# MAGIC Each topic-partition is a *channel*; a checkpoint's barrier position for a channel
# MAGIC is the partition's next offset (as in Flink's Kafka source), kept in the snapshot
# MAGIC path with the keyed state, not in a consumer group. This notebook
# MAGIC
# MAGIC 1. creates a topic of 4 partitions and fills it, partition 0 with 4 times the records
# MAGIC    of the others (it lags behind),
# MAGIC 2. runs the keyed total with `trigger(availableNow=True)` and shows its checkpoints,
# MAGIC 3. loses the Spark checkpoint, produces more records and restores from the latest
# MAGIC    barriered checkpoint with 3 shuffle partitions instead of 2,
# MAGIC
# MAGIC and checks after each run that the state equals a recount of the topic: every record
# MAGIC counted once.

# COMMAND ----------

# MAGIC %md
# MAGIC It needs a Kafka cluster the driver and the executors reach, and the Python package
# MAGIC `confluent-kafka` on both (`%pip install spark-barriered[kafka]` or the wheel plus
# MAGIC `confluent-kafka`). On Databricks, set the `bootstrap` widget (and `base`, a Volume
# MAGIC folder); elsewhere the notebook reads the environment variable
# MAGIC `BARRIERED_KAFKA_BOOTSTRAP` and makes a local Spark session and a temporary folder.

# COMMAND ----------

import os
import shutil
import tempfile
import uuid
from collections import Counter

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F

import barriered
from barriered.examples import RunningTotals

try:
    spark  # noqa: B018  (the notebook's session on Databricks)
except NameError:
    from barriered.demo import local_session

    spark = local_session()

try:
    dbutils.widgets.text("base", "/Volumes/main/default/scratch/barriered-kafka")  # noqa: F821
    dbutils.widgets.text("bootstrap", "")  # noqa: F821
    BASE = dbutils.widgets.get("base")  # noqa: F821
    BOOTSTRAP = dbutils.widgets.get("bootstrap")  # noqa: F821
except NameError:  # not on Databricks
    BASE = tempfile.mkdtemp(prefix="barriered-kafka-")
    BOOTSTRAP = os.environ.get("BARRIERED_KAFKA_BOOTSTRAP", "")
try:
    display  # noqa: B018  (Databricks' display)
except NameError:  # plain python: tables printed, figures written to PNG files
    from barriered.views import display
assert BOOTSTRAP, "set the bootstrap widget or BARRIERED_KAFKA_BOOTSTRAP to host:port"
print(f"working under {BASE}, Kafka at {BOOTSTRAP}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The topic
# MAGIC
# MAGIC Records are a user id as the key and an amount as the value (text). A new topic
# MAGIC name per run: a snapshot path keeps the topic's id and refuses a topic recreated
# MAGIC under the same name.

# COMMAND ----------

TOPIC = f"events-{uuid.uuid4().hex[:6]}"
PARTITIONS = 4
admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)])[
    TOPIC
].result(30)
producer = Producer({"bootstrap.servers": BOOTSTRAP, "enable.idempotence": True})


def produce(part, per_partition=30):
    """Write part ``part``: ``per_partition`` records to partitions 1..3, 4x to 0."""
    for partition in range(PARTITIONS):
        count = per_partition * (4 if partition == 0 else 1)
        for i in range(count):
            user, amount = f"user-{(i * 7 + partition + part) % 10}", i % 5 + 1
            producer.produce(TOPIC, key=user, value=str(amount), partition=partition)
    assert producer.flush(30) == 0, "records not acknowledged"


produce(0)

# COMMAND ----------

# MAGIC %md
# MAGIC ## The query
# MAGIC
# MAGIC The `kafka` upstream takes Spark's Kafka source options: `kafka.bootstrap.servers`
# MAGIC (and any other `kafka.*` client setting), one of `subscribe`, `subscribePattern` or
# MAGIC `assign`, `startingOffsets`. `maxRowsPerChannel` admits at most 20 offsets per
# MAGIC partition and micro-batch, so partition 0 lags behind the others; the checkpoints
# MAGIC are unaligned (`alignedCheckpointTimeout` 0): a barrier overtakes the records
# MAGIC admitted but not yet processed, which the checkpoint stores as in-flight records.

# COMMAND ----------

barriered.install(spark)
spark.conf.set("spark.sql.streaming.barriered.maxParallelism", "8")  # fixed for the path
spark.conf.set("spark.sql.streaming.barriered.unaligned.enabled", "true")
spark.conf.set("spark.sql.streaming.barriered.alignedCheckpointTimeout", "0s")
SNAP = os.path.join(BASE, "snapshots")


def run(checkpoint_location, restore_from=None):
    """Run the keyed total to the end of the topic; return the finished query."""
    reader = (
        spark.readStream.format("barriered")
        .option("upstream", "kafka")
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxRowsPerChannel", "20")
        .option("checkpointInterval", "10ms")
        .option("snapshotPath", SNAP)
    )
    if restore_from is not None:
        reader = reader.option("restoreFrom", restore_from)
    events = (
        reader.load()
        .withColumn("user_id", F.col("key").cast("string"))
        .withColumn("amount", F.col("value").cast("string").cast("long"))
    )
    query = (
        barriered.keyed(events, "user_id")
        .process(RunningTotals())
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint_location)
        .trigger(availableNow=True)
        .start()
    )
    barriered.await_termination(query)
    return query


def recount():
    """Each user's total over every record in the topic, read by a plain consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"recount-{uuid.uuid4().hex}",  # assigned: never joins the group
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p))[1] for p in range(PARTITIONS)
    }
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    totals, seen = Counter(), Counter()
    while sum(seen.values()) < sum(ends.values()):
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is None, msg and msg.error()
        totals[msg.key().decode()] += int(msg.value())
        seen[msg.partition()] += 1
    consumer.close()
    return dict(totals)


def mismatches():
    """Users whose total in the latest checkpoint differs from the recount."""
    state = {r["user_id"]: r["total"] for r in barriered.state_table(spark, SNAP).collect()}
    expected = recount()
    return sum(state.get(user) != expected.get(user) for user in set(state) | set(expected))


# COMMAND ----------

# MAGIC %md
# MAGIC ## 1. A first run, with 2 shuffle partitions
# MAGIC
# MAGIC `barrier_positions` name the topic-partitions: `{"events-…-0": 120, ...}` is the
# MAGIC next offset of each partition that the checkpoint's state covers.

# COMMAND ----------

spark.conf.set("spark.sql.shuffle.partitions", "2")
first = run(os.path.join(BASE, "spark-checkpoint-1"))
after_first = mismatches()
assert after_first == 0
history = barriered.checkpoints(spark, SNAP, full=True)
display(history.select("checkpoint_id", "effective_mode", "inflight_rows", "barrier_positions"))  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC ## 2. The crash, more records, a restore with 3 shuffle partitions
# MAGIC
# MAGIC The Spark checkpoint is gone; the snapshot path survives. `restoreFrom` = `latest`
# MAGIC starts every partition at the checkpoint's offset, replays its in-flight records
# MAGIC and loads each key group's state into 3 partitions instead of 2.

# COMMAND ----------

shutil.rmtree(os.path.join(BASE, "spark-checkpoint-1"))
produce(1)
spark.conf.set("spark.sql.shuffle.partitions", "3")
restored = run(os.path.join(BASE, "spark-checkpoint-2"), restore_from="latest")
after_restore = mismatches()
assert after_restore == 0
history = barriered.checkpoints(spark, SNAP, full=True)
display(history)  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC From a terminal, the same history and what the latest checkpoint holds, per
# MAGIC topic-partition:
# MAGIC
# MAGIC ```
# MAGIC barriered checkpoints <base>/snapshots --json
# MAGIC barriered inspect <base>/snapshots
# MAGIC ```
