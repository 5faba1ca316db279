package io.barriered.shim;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.column.ParquetProperties;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Murmur3Hash;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Writes one store partition's state at a barriered checkpoint's cut, per key group.
 *
 * <p>Each row's key group is {@code pmod(hash(partition key), maxParallelism)} with Spark's
 * {@code hash} (Murmur3, seed 42: the hash of {@code HashPartitioning}). The partition key
 * is the whole store key, except for stores whose key carries more than the partition key:
 * a prefix-scan store (session windows) hashes its prefix columns, the join's
 * {@code keyWithIndexToValue} store drops its trailing index column. Rows go to one Parquet
 * file per changed key group under {@code <snapshot>/operators/<operator>-<store>/
 * key_group=G/store_partition=P/}, with columns {@code hash} (the raw 32-bit hash, so any
 * partition count can be served), {@code key} and {@code value} (structs of the store's own
 * Spark types). A key group is changed when its rows differ from the base checkpoint's (a
 * 64-bit digest over the rows' bytes, kept in memory per checkpoint); without the base's
 * digests (a new executor, another epoch) every non-empty key group is written ("full").
 */
final class CutExporter {
  private static final Logger LOG = LoggerFactory.getLogger(CutExporter.class);
  private static final int KEPT_DIGESTS = 8;

  private final StateStoreId storeId;
  private final StructType keySchema;
  private final StructType valueSchema;
  private final boolean unsupported;
  private final Configuration conf;
  private final Path checkpointRoot;
  private final int[] partitionKey;
  private final Expression hash;
  private final StructType fileSchema;
  /** Digests per checkpoint id this store exported in this JVM (epoch, partitions, sums). */
  private final Map<Long, Digests> digests =
      new LinkedHashMap<Long, Digests>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, Digests> eldest) {
          return size() > KEPT_DIGESTS;
        }
      };

  /** What one cut wrote, acknowledged once the store's commit succeeded. */
  static final class Export {
    final CutLog.Cut cut;
    final List<Map<String, Object>> files = new ArrayList<>();
    final List<Integer> changed = new ArrayList<>();
    boolean full;
    long rows;
    long bytes;
    long millis;

    Export(CutLog.Cut cut) {
      this.cut = cut;
    }
  }

  private static final class Digests {
    final long epoch;
    final int partitions;
    final long[] sums;
    final long[] counts;

    Digests(long epoch, int partitions, int groups) {
      this.epoch = epoch;
      this.partitions = partitions;
      this.sums = new long[groups];
      this.counts = new long[groups];
    }
  }

  CutExporter(
      StateStoreId storeId,
      StructType keySchema,
      StructType valueSchema,
      KeyStateEncoderSpec spec,
      boolean unsupported,
      Configuration conf) {
    this.storeId = storeId;
    this.keySchema = keySchema;
    this.valueSchema = valueSchema;
    this.unsupported = unsupported;
    this.conf = conf;
    this.checkpointRoot = new Path(storeId.checkpointRootLocation()).getParent();
    int n = keySchema.fields().length;
    if (spec instanceof PrefixKeyScanStateEncoderSpec) {
      n = ((PrefixKeyScanStateEncoderSpec) spec).numColsPrefixKey();
    } else if (storeId.storeName().endsWith("keyWithIndexToValue")) {
      n = n - 1;
    }
    partitionKey = new int[n];
    List<Expression> refs = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      partitionKey[i] = i;
      refs.add(new BoundReference(i, keySchema.fields()[i].dataType(), true));
    }
    hash = new Murmur3Hash(scala.jdk.javaapi.CollectionConverters.asScala(refs).toSeq(), 42);
    fileSchema =
        new StructType(
            new StructField[] {
              new StructField("hash", DataTypes.IntegerType, false, Metadata.empty()),
              new StructField("key", sanitized(keySchema), false, Metadata.empty()),
              new StructField("value", sanitized(valueSchema), true, Metadata.empty())
            });
    for (String[] kv :
        new String[][] {
          {"spark.sql.parquet.writeLegacyFormat", "false"},
          {"spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS"},
          {"spark.sql.parquet.fieldId.write.enabled", "false"},
          {"spark.sql.parquet.datetimeRebaseModeInWrite", "CORRECTED"},
          {"spark.sql.parquet.int96RebaseModeInWrite", "CORRECTED"},
          {"spark.sql.parquet.variant.annotateLogicalType.enabled", "false"}
        }) {
      this.conf.set(kv[0], kv[1]);
    }
    ParquetWriteSupport.setSchema(fileSchema, this.conf);
  }

  /** Field names Delta accepts: characters it refuses become underscores. */
  private static StructType sanitized(StructType schema) {
    StructField[] fields = schema.fields().clone();
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name().replaceAll("[ ,;{}()\\n\\t=]", "_");
      fields[i] =
          new StructField(name, fields[i].dataType(), fields[i].nullable(), Metadata.empty());
    }
    return new StructType(fields);
  }

  private int hashOf(UnsafeRow key) {
    return (Integer) hash.eval(key);
  }

  private static long digest(UnsafeRow key, UnsafeRow value) {
    long k =
        Murmur3_x86_32.hashUnsafeBytes(
            key.getBaseObject(), key.getBaseOffset(), key.getSizeInBytes(), 0x5eed);
    long v =
        value == null
            ? 0
            : Murmur3_x86_32.hashUnsafeBytes(
                value.getBaseObject(), value.getBaseOffset(), value.getSizeInBytes(), 0x7ab1e);
    long z = (k << 32) ^ (v & 0xffffffffL);
    z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
    z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
    return z ^ (z >>> 31);
  }

  /** What the offset of the task's micro-batch says, or null outside a streaming task. */
  CutLog.Batch thisBatch() {
    TaskContext context = TaskContext.get();
    if (context == null) {
      return null;
    }
    String batch = context.getLocalProperty("streaming.sql.batchId");
    if (batch == null) {
      return null;
    }
    return CutLog.read(conf, checkpointRoot, Long.parseLong(batch));
  }

  /** The cut this store's commit belongs to, or null when the batch is no cut. */
  private CutLog.Cut cutOfThisBatch() {
    CutLog.Batch batch = thisBatch();
    return batch == null ? null : batch.cut;
  }

  StructType fileSchema() {
    return fileSchema;
  }

  Configuration conf() {
    return conf;
  }

  StateStoreId storeId() {
    return storeId;
  }

  StructType keySchema() {
    return keySchema;
  }

  StructType valueSchema() {
    return valueSchema;
  }

  String operatorName() {
    return storeId.operatorId() + "-" + storeId.storeName();
  }

  /** Export the uncommitted store when this batch is a cut; null otherwise. */
  Export export(StateStore store) {
    CutLog.Cut cut = cutOfThisBatch();
    if (cut == null) {
      return null;
    }
    if (unsupported) {
      throw new IllegalStateException(
          "barriered: state store "
              + operatorName()
              + " uses column families or multiple values per key (transformWithState);"
              + " the barriered provider cannot capture it at checkpoint "
              + cut.id);
    }
    long start = System.currentTimeMillis();
    int groups = cut.maxParallelism;
    Digests now = new Digests(cut.epoch, cut.partitions, groups);
    try (StateStoreIterator<UnsafeRowPair> it = store.iterator("default")) {
      while (it.hasNext()) {
        UnsafeRowPair pair = it.next();
        int g = Math.floorMod(hashOf(pair.key()), groups);
        now.sums[g] += digest(pair.key(), pair.value());
        now.counts[g] += 1;
      }
    }
    Export export = new Export(cut);
    Digests base;
    synchronized (digests) {
      base = cut.base == null ? null : digests.get(cut.base);
    }
    export.full =
        base == null
            || base.epoch != cut.epoch
            || base.partitions != cut.partitions
            || base.sums.length != groups;
    boolean[] write = new boolean[groups];
    for (int g = 0; g < groups; g++) {
      boolean differs =
          export.full
              ? now.counts[g] > 0
              : now.counts[g] != base.counts[g] || now.sums[g] != base.sums[g];
      if (differs) {
        export.changed.add(g);
        write[g] = now.counts[g] > 0;
      }
    }
    if (!export.changed.isEmpty()) {
      writeGroups(store, cut, write, export);
    }
    synchronized (digests) {
      digests.put(cut.id, now);
    }
    export.millis = System.currentTimeMillis() - start;
    return export;
  }

  private Path tableDir(CutLog.Cut cut) {
    return new Path(new Path(cut.snapshotPath, "operators"), operatorName());
  }

  private void writeGroups(StateStore store, CutLog.Cut cut, boolean[] write, Export export) {
    Path table = tableDir(cut);
    int partition = storeId.partitionId();
    Map<Integer, ParquetWriter<InternalRow>> writers = new HashMap<>();
    Map<Integer, String> paths = new HashMap<>();
    Map<Integer, Long> counts = new HashMap<>();
    try {
      try (StateStoreIterator<UnsafeRowPair> it = store.iterator("default")) {
        while (it.hasNext()) {
          UnsafeRowPair pair = it.next();
          int h = hashOf(pair.key());
          int g = Math.floorMod(h, write.length);
          if (!write[g]) {
            continue;
          }
          ParquetWriter<InternalRow> writer = writers.get(g);
          if (writer == null) {
            String rel =
                "key_group="
                    + g
                    + "/store_partition="
                    + partition
                    + "/c"
                    + cut.id
                    + "-"
                    + UUID.randomUUID()
                    + ".parquet";
            writer = open(new Path(table, rel));
            writers.put(g, writer);
            paths.put(g, rel);
            counts.put(g, 0L);
          }
          writer.write(new GenericInternalRow(new Object[] {h, pair.key(), pair.value()}));
          counts.put(g, counts.get(g) + 1);
        }
      }
      for (ParquetWriter<InternalRow> w : writers.values()) {
        w.close();
      }
      FileSystem fs = table.getFileSystem(conf);
      for (Map.Entry<Integer, String> e : paths.entrySet()) {
        FileStatus status = fs.getFileStatus(new Path(table, e.getValue()));
        Map<String, Object> file = new LinkedHashMap<>();
        Map<String, Object> pv = new LinkedHashMap<>();
        pv.put("key_group", Integer.toString(e.getKey()));
        pv.put("store_partition", Integer.toString(partition));
        file.put("path", e.getValue());
        file.put("size", status.getLen());
        file.put("rows", counts.get(e.getKey()));
        file.put("partition_values", pv);
        file.put("modification_time", status.getModificationTime());
        export.files.add(file);
        export.rows += counts.get(e.getKey());
        export.bytes += status.getLen();
      }
    } catch (IOException e) {
      throw new IllegalStateException(
          "barriered: cannot write the state of store "
              + operatorName()
              + " partition "
              + partition
              + " for checkpoint "
              + cut.id
              + " under "
              + table,
          e);
    }
  }

  @SuppressWarnings("deprecation")
  private ParquetWriter<InternalRow> open(Path path) throws IOException {
    return new ParquetWriter<InternalRow>(
        path,
        new ParquetWriteSupport(),
        CompressionCodecName.SNAPPY,
        ParquetWriter.DEFAULT_BLOCK_SIZE,
        ParquetWriter.DEFAULT_PAGE_SIZE,
        ParquetWriter.DEFAULT_PAGE_SIZE,
        true,
        false,
        ParquetProperties.WriterVersion.PARQUET_1_0,
        conf);
  }

  /** Publish the acknowledgement of {@code export} (after the store's commit succeeded). */
  void acknowledge(Export export) {
    CutLog.Cut cut = export.cut;
    int partition = storeId.partitionId();
    String participant = "operator/" + operatorName() + "/" + partition;
    Map<String, Object> extra = new LinkedHashMap<>();
    extra.put("operator", operatorName());
    extra.put("table", "operators/" + operatorName());
    extra.put("store_partition", partition);
    extra.put("partitions", cut.partitions);
    extra.put("full", export.full);
    extra.put("changed_groups", export.changed);
    extra.put("batch_id", cut.batchId);
    extra.put("export_ms", export.millis);
    extra.put("key_schema", keySchema.json());
    extra.put("value_schema", valueSchema.json());
    extra.put("partition_key_columns", partitionKey.length);
    Map<String, Object> ack = new LinkedHashMap<>();
    ack.put("checkpoint_id", cut.id);
    ack.put("participant", participant);
    ack.put("changed", !export.changed.isEmpty());
    ack.put("files", export.files);
    ack.put("rows", export.rows);
    ack.put("bytes", export.bytes);
    ack.put("extra", extra);
    ack.put("epoch", cut.epoch < 0 ? null : cut.epoch);
    String name =
        participant.replace("/", "~") + (cut.epoch < 0 ? "" : ".e" + cut.epoch) + ".json";
    Path dir = new Path(new Path(cut.snapshotPath, "_acks"), Long.toString(cut.id));
    try {
      FileSystem fs = dir.getFileSystem(conf);
      fs.mkdirs(dir);
      Path tmp = new Path(dir, "." + name + "." + UUID.randomUUID() + ".tmp");
      try (OutputStream out = fs.create(tmp, true)) {
        out.write(CutLog.JSON.writeValueAsString(ack).getBytes(StandardCharsets.UTF_8));
      }
      Path target = new Path(dir, name);
      fs.delete(target, false);
      if (!fs.rename(tmp, target)) {
        throw new IOException("rename " + tmp + " -> " + target + " failed");
      }
      if (partition == 0) {
        register(fs, cut);
      }
    } catch (IOException e) {
      throw new IllegalStateException(
          "barriered: cannot acknowledge checkpoint " + cut.id + " for " + participant, e);
    }
    LOG.info(
        "barriered: checkpoint {} store {} partition {}: {} key group(s) changed, {} rows, {}"
            + " bytes, {} ms{}",
        cut.id,
        operatorName(),
        partition,
        export.changed.size(),
        export.rows,
        export.bytes,
        export.millis,
        export.full ? " (full)" : "");
  }

  /** Tell the coordinator this store exists and how many partitions acknowledge it. */
  private void register(FileSystem fs, CutLog.Cut cut) throws IOException {
    Map<String, Object> reg = new LinkedHashMap<>();
    reg.put("operator", operatorName());
    reg.put("operator_id", storeId.operatorId());
    reg.put("store", storeId.storeName());
    reg.put("partitions", cut.partitions);
    reg.put("epoch", cut.epoch < 0 ? null : cut.epoch);
    reg.put("key_schema", keySchema.json());
    reg.put("value_schema", valueSchema.json());
    reg.put("partition_key_columns", partitionKey.length);
    Path dir = new Path(new Path(cut.snapshotPath, "_coordinator"), "stores");
    Path target = new Path(dir, operatorName() + ".json");
    Path tmp = new Path(dir, "." + operatorName() + "." + UUID.randomUUID() + ".tmp");
    fs.mkdirs(dir);
    try (OutputStream out = fs.create(tmp, true)) {
      out.write(CutLog.JSON.writeValueAsString(reg).getBytes(StandardCharsets.UTF_8));
    }
    fs.delete(target, false);
    fs.rename(tmp, target);
  }
}
