package io.barriered.shim;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.types.StructType;
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
 * Spark types). The key groups changed since the base checkpoint come from the store's
 * writes ({@link ChangeTracker}, the default: the cut reads the store once, to write the
 * changed key groups) or, with {@code providerChangeDetection=digest}, from a 64-bit digest
 * of every key group's rows compared with the base checkpoint's ({@link DigestDetector}: the
 * cut reads the store twice). Without the base's record (a new executor or provider instance, another epoch)
 * every non-empty key group is written ("full").
 */
final class CutExporter {
  private static final Logger LOG = LoggerFactory.getLogger(CutExporter.class);

  private final StateStoreId storeId;
  private final StructType keySchema;
  private final StructType valueSchema;
  private final boolean unsupported;
  private final Configuration conf;
  private final Path checkpointRoot;
  private final int[] partitionKey;
  private final Expression hash;
  private final StructType fileSchema;
  private final ChangeTracker tracker = new ChangeTracker();
  private final DigestDetector digests = new DigestDetector();

  /** What one cut wrote, acknowledged once the store's commit succeeded. */
  static final class Export {
    final CutLog.Cut cut;
    final List<Map<String, Object>> files = new ArrayList<>();
    final List<Integer> changed = new ArrayList<>();
    boolean full;
    long rows;
    long bytes;
    long millis;
    long scanMillis;
    long writeMillis;
    long commitMillis;

    Export(CutLog.Cut cut) {
      this.cut = cut;
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
    for (int i = 0; i < n; i++) {
      partitionKey[i] = i;
    }
    hash = GroupFiles.partitionHash(keySchema, n);
    fileSchema = GroupFiles.fileSchema(keySchema, valueSchema);
    GroupFiles.writeConf(this.conf, fileSchema);
  }

  /**
   * A generated projection of a key to its partition key's Spark {@code hash}: faster
   * than evaluating the expression per row, and not thread-safe (one per store or export).
   */
  UnsafeProjection newHasher() {
    return UnsafeProjection.create(hash);
  }

  ChangeTracker tracker() {
    return tracker;
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

  /**
   * Export the uncommitted {@code store} when this batch is a cut (null otherwise): the
   * key groups changed since the base checkpoint, found from {@code touched} and the
   * tracker's history, or by digest ({@code providerChangeDetection=digest}).
   */
  Export export(StateStore store, ChangeTracker.Touched touched) {
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
    long start = System.nanoTime();
    Export export = new Export(cut);
    UnsafeProjection hasher = newHasher();
    boolean[] write;
    if ("digest".equals(cut.changeDetection)) {
      write = digests.select(store, cut, hasher, export);
    } else {
      BitSet changed = tracker.changedSince(cut, store.version(), touched);
      export.full = changed == null;
      write = new boolean[cut.maxParallelism];
      for (int g = 0; g < write.length; g++) {
        write[g] = export.full || changed.get(g);
        if (!export.full && write[g]) {
          export.changed.add(g);
        }
      }
    }
    export.scanMillis = (System.nanoTime() - start) / 1_000_000;
    long written = System.nanoTime();
    if (export.full || !export.changed.isEmpty()) {
      List<Integer> withRows = writeGroups(store, cut, write, hasher, export);
      if (export.full && !"digest".equals(cut.changeDetection)) {
        export.changed.addAll(withRows);
      }
    }
    export.writeMillis = (System.nanoTime() - written) / 1_000_000;
    export.millis = (System.nanoTime() - start) / 1_000_000;
    return export;
  }

  /** {@code export} was committed as store version {@code version}: the next cut's base. */
  void exported(Export export, long version) {
    tracker.exported(export.cut, version);
  }

  private Path tableDir(CutLog.Cut cut) {
    return SnapshotPaths.operatorTable(cut.snapshotPath, operatorName());
  }

  /**
   * Write the rows of the key groups {@code write} selects, one Parquet file per key
   * group; return the key groups that had rows (ascending).
   */
  private List<Integer> writeGroups(
      StateStore store, CutLog.Cut cut, boolean[] write, UnsafeProjection hasher, Export export) {
    Path table = tableDir(cut);
    int partition = storeId.partitionId();
    GroupFiles files = new GroupFiles(table, partition, "c" + cut.id, conf, write.length);
    try {
      try (StateStoreIterator<UnsafeRowPair> it = store.iterator("default")) {
        while (it.hasNext()) {
          UnsafeRowPair pair = it.next();
          int h = hasher.apply(pair.key()).getInt(0);
          if (write[Math.floorMod(h, write.length)]) {
            files.write(h, pair.key(), pair.value());
          }
        }
      }
      for (Map<String, Object> file : files.finish()) {
        export.files.add(file);
        export.rows += (Long) file.get("rows");
        export.bytes += (Long) file.get("size");
      }
      return files.groups();
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
    extra.put("watermark_ms", cut.watermarkMs);
    extra.put("export_ms", export.millis);
    extra.put("scan_ms", export.scanMillis);
    extra.put("write_ms", export.writeMillis);
    extra.put("commit_ms", export.commitMillis);
    extra.put("files", export.files.size());
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
    try {
      byte[] bytes = CutLog.JSON.writeValueAsString(ack).getBytes(StandardCharsets.UTF_8);
      SnapshotFiles.replace(
          SnapshotPaths.ackFile(cut.snapshotPath, cut.id, participant, cut.epoch), bytes, conf);
      if (partition == 0) {
        register(cut);
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
  private void register(CutLog.Cut cut) throws IOException {
    Map<String, Object> reg = new LinkedHashMap<>();
    reg.put("operator", operatorName());
    reg.put("operator_id", storeId.operatorId());
    reg.put("store", storeId.storeName());
    reg.put("partitions", cut.partitions);
    reg.put("epoch", cut.epoch < 0 ? null : cut.epoch);
    reg.put("key_schema", keySchema.json());
    reg.put("value_schema", valueSchema.json());
    reg.put("partition_key_columns", partitionKey.length);
    byte[] bytes = CutLog.JSON.writeValueAsString(reg).getBytes(StandardCharsets.UTF_8);
    SnapshotFiles.replace(SnapshotPaths.storeRegistration(cut.snapshotPath, operatorName()), bytes, conf);
  }
}
