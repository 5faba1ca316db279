package io.barriered.shim;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapred.FileSplit;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.parquet.hadoop.ParquetInputFormat;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.datasources.parquet.ParquetReadSupport;
import org.apache.spark.sql.execution.datasources.parquet.VectorizedParquetRecordReader;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Loads, into a fresh store of a restored query, the rows of the restored checkpoint that
 * this partition owns: {@code pmod(hash, numPartitions) == partitionId}, from every file of
 * the store's table at the checkpoint's version (named by the restore manifest the source
 * wrote at start). No driver reads the state. A store the checkpoint does not hold, or
 * holds with other key or value types, is refused naming the operator.
 */
final class StateLoader {
  private static final Logger LOG = LoggerFactory.getLogger(StateLoader.class);

  private static final int BATCH_ROWS = 4096;

  private StateLoader() {}

  /** The manifest entry of this store, or null when the query was not restored. */
  static JsonNode entry(CutExporter exporter, CutLog.Batch batch) {
    if (batch == null || batch.restoreManifest == null) {
      return null;
    }
    Path file = new Path(batch.restoreManifest);
    JsonNode manifest;
    try {
      FileSystem fs = file.getFileSystem(exporter.conf());
      try (InputStream in = fs.open(file)) {
        manifest =
            CutLog.JSON.readTree(new String(in.readAllBytes(), StandardCharsets.UTF_8));
      }
    } catch (IOException e) {
      throw new IllegalStateException("barriered: cannot read restore manifest " + file, e);
    }
    String name = exporter.operatorName();
    JsonNode stores = manifest.path("stores");
    JsonNode entry = stores.path(name);
    String from = manifest.path("checkpoint").asText();
    if (entry.isMissingNode()) {
      throw new IllegalStateException(
          "barriered: cannot restore state store "
              + name
              + " from "
              + from
              + ": the checkpoint holds no such operator (it holds "
              + stores.properties().stream().map(e -> e.getKey()).toList()
              + "). The query's stateful operators changed since the checkpoint: restore"
              + " with the query that wrote it, or start without restoreFrom");
    }
    check(name, from, "key", exporter.keySchema(), entry.path("key_schema").asText());
    check(name, from, "value", exporter.valueSchema(), entry.path("value_schema").asText());
    return entry;
  }

  private static void check(String name, String from, String what, DataType now, String json) {
    DataType then = DataType.fromJson(json);
    if (!then.sameType(now)) {
      throw new IllegalStateException(
          "barriered: cannot restore state store "
              + name
              + " from "
              + from
              + ": its "
              + what
              + " was "
              + then.simpleString()
              + " at the checkpoint and is "
              + now.simpleString()
              + " now. The query changed since the checkpoint: restore with the query that"
              + " wrote it, or start without restoreFrom");
    }
  }

  /**
   * Spark's vectorized Parquet reader of one whole file, columns as {@code conf}'s requested
   * schema: a batch of rows decoded column by column, several times faster than the row
   * reader, which counts here because every partition reads every file of the store.
   */
  private static VectorizedParquetRecordReader vectorized(Path path, Configuration conf)
      throws IOException {
    long length = path.getFileSystem(conf).getFileStatus(path).getLen();
    VectorizedParquetRecordReader reader = new VectorizedParquetRecordReader(false, BATCH_ROWS);
    try {
      reader.initialize(
          new FileSplit(path, 0, length, new String[0]),
          new TaskAttemptContextImpl(conf, new TaskAttemptID()));
    } catch (InterruptedException e) {
      reader.close();
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while opening " + path, e);
    } catch (IOException | RuntimeException e) {
      reader.close();
      throw e;
    }
    return reader;
  }

  /** Put this partition's rows of {@code entry}'s files into {@code store}. */
  static long load(StateStore store, CutExporter exporter, JsonNode entry, int partitions) {
    int partition = exporter.storeId().partitionId();
    Configuration conf = new Configuration(exporter.conf());
    conf.set(ParquetReadSupport.SPARK_ROW_REQUESTED_SCHEMA(), exporter.fileSchema().json());
    conf.set(ParquetInputFormat.READ_SUPPORT_CLASS, ParquetReadSupport.class.getName());
    for (String[] kv :
        new String[][] {
          {"spark.sql.parquet.binaryAsString", "false"},
          {"spark.sql.parquet.int96AsTimestamp", "true"},
          {"spark.sql.caseSensitive", "false"},
          {"spark.sql.parquet.fieldId.read.enabled", "false"},
          {"spark.sql.parquet.inferTimestampNTZ.enabled", "true"},
          {"spark.sql.legacy.parquet.nanosAsLong", "false"}
        }) {
      conf.set(kv[0], kv[1]);
    }
    int keyFields = exporter.keySchema().fields().length;
    int valueFields = exporter.valueSchema().fields().length;
    UnsafeProjection keys = UnsafeProjection.create(exporter.keySchema());
    UnsafeProjection values = UnsafeProjection.create(exporter.valueSchema());
    long loaded = 0;
    long start = System.currentTimeMillis();
    for (JsonNode file : entry.path("files")) {
      Path path = new Path(file.asText());
      try (VectorizedParquetRecordReader reader = vectorized(path, conf)) {
        ColumnarBatch batch = reader.resultBatch();
        ColumnVector hashes = batch.column(0);
        while (reader.nextBatch()) {
          for (int i = 0, n = batch.numRows(); i < n; i++) {
            if (Math.floorMod(hashes.getInt(i), partitions) != partition) {
              continue;
            }
            InternalRow row = batch.getRow(i); // the projections' rows are reused: RocksDB
            // copies a key and a value into its own encoding at put
            UnsafeRow key = keys.apply(row.getStruct(1, keyFields));
            UnsafeRow value = values.apply(row.getStruct(2, valueFields));
            store.put(key, value, "default");
            loaded++;
          }
        }
      } catch (IOException e) {
        throw new IllegalStateException(
            "barriered: cannot read " + path + " to restore store " + exporter.operatorName(), e);
      }
    }
    LOG.info(
        "barriered: restored {} row(s) of store {} into partition {} of {} in {} ms",
        loaded,
        exporter.operatorName(),
        partition,
        partitions,
        System.currentTimeMillis() - start);
    return loaded;
  }
}
