package io.barriered.shim;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.column.ParquetProperties;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.api.WriteSupport;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.OutputFile;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Murmur3Hash;
import org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The files of one store partition in its store table ({@code operators/<op>-<store>/}): one
 * Parquet file per key group, under {@code key_group=G/store_partition=P/}, with columns
 * {@code hash} (the partition key's raw Spark {@code hash}), {@code key} and {@code value}
 * (structs of the store's own Spark types), written with Spark's own Parquet write support.
 * Used by the cut exports ({@link CutExporter}) and by the bootstrap of a store from batch
 * data ({@link StoreBootstrap}): one layout, one writer.
 */
final class GroupFiles {
  private final Path table;
  private final int partition;
  private final String prefix;
  private final Configuration conf;
  private final int groups;
  private final Map<Integer, ParquetWriter<InternalRow>> writers = new HashMap<>();
  private final Map<Integer, String> paths = new TreeMap<>();
  private final long[] counts;
  private final GenericInternalRow row = new GenericInternalRow(3);

  /**
   * @param table the store table's folder
   * @param partition the store partition the files are named after
   * @param prefix the file names' prefix ({@code c<checkpoint id>})
   * @param conf a configuration prepared by {@link #writeConf}
   * @param groups {@code maxParallelism}: the key group of a row is {@code pmod(hash, groups)}
   */
  GroupFiles(Path table, int partition, String prefix, Configuration conf, int groups) {
    this.table = table;
    this.partition = partition;
    this.prefix = prefix;
    this.conf = conf;
    this.groups = groups;
    this.counts = new long[groups];
  }

  /** The columns of a store table's files for a store of these key and value types. */
  static StructType fileSchema(StructType keySchema, StructType valueSchema) {
    return new StructType(
        new StructField[] {
          new StructField("hash", DataTypes.IntegerType, false, Metadata.empty()),
          new StructField("key", sanitized(keySchema), false, Metadata.empty()),
          new StructField("value", sanitized(valueSchema), true, Metadata.empty())
        });
  }

  /**
   * Field names Delta and Parquet accept: characters Delta refuses become underscores, and
   * a name already taken (case-insensitively: an aggregation's buffers repeat names, {@code
   * sum} of a sum and of an average) gets its position appended ({@code sum_2}).
   */
  private static StructType sanitized(StructType schema) {
    StructField[] fields = schema.fields().clone();
    Set<String> taken = new HashSet<>();
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name().replaceAll("[ ,;{}()\\n\\t=]", "_");
      for (String base = name; !taken.add(name.toLowerCase(Locale.ROOT)); ) {
        name = base + "_" + i;
        base = name;
      }
      fields[i] =
          new StructField(name, fields[i].dataType(), fields[i].nullable(), Metadata.empty());
    }
    return new StructType(fields);
  }

  /** Set, on {@code conf}, the Parquet write settings and the files' schema. */
  static Configuration writeConf(Configuration conf, StructType fileSchema) {
    for (String[] kv :
        new String[][] {
          {"spark.sql.parquet.writeLegacyFormat", "false"},
          {"spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS"},
          {"spark.sql.parquet.fieldId.write.enabled", "false"},
          {"spark.sql.parquet.datetimeRebaseModeInWrite", "CORRECTED"},
          {"spark.sql.parquet.int96RebaseModeInWrite", "CORRECTED"},
          {"spark.sql.parquet.variant.annotateLogicalType.enabled", "false"}
        }) {
      conf.set(kv[0], kv[1]);
    }
    ParquetWriteSupport.setSchema(fileSchema, conf);
    return conf;
  }

  /**
   * Spark's {@code hash} (Murmur3, seed 42: {@code HashPartitioning}'s) of a store key's
   * first {@code n} fields, its partition key, as an expression over the key row.
   */
  static Expression partitionHash(StructType keySchema, int n) {
    List<Expression> refs = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      refs.add(new BoundReference(i, keySchema.fields()[i].dataType(), true));
    }
    return new Murmur3Hash(scala.jdk.javaapi.CollectionConverters.asScala(refs).toSeq(), 42);
  }

  /** Write one store row whose partition key hashes to {@code hash}. */
  void write(int hash, InternalRow key, InternalRow value) throws IOException {
    int g = Math.floorMod(hash, groups);
    ParquetWriter<InternalRow> writer = writers.get(g);
    if (writer == null) {
      String rel =
          "key_group="
              + g
              + "/store_partition="
              + partition
              + "/"
              + prefix
              + "-"
              + UUID.randomUUID()
              + ".parquet";
      writer = open(new Path(table, rel));
      writers.put(g, writer);
      paths.put(g, rel);
    }
    row.setInt(0, hash); // the writer consumes the row at once: one row object serves all
    row.update(1, key);
    row.update(2, value);
    writer.write(row);
    counts[g] += 1;
  }

  /**
   * Close the files; return one entry per file (ascending key group): {@code path} (relative
   * to the table), {@code size}, {@code rows}, {@code partition_values}, {@code
   * modification_time}: a Delta add action's fields.
   */
  List<Map<String, Object>> finish() throws IOException {
    for (ParquetWriter<InternalRow> w : writers.values()) {
      w.close();
    }
    FileSystem fs = table.getFileSystem(conf);
    List<Map<String, Object>> files = new ArrayList<>();
    for (Map.Entry<Integer, String> e : paths.entrySet()) {
      FileStatus status = fs.getFileStatus(new Path(table, e.getValue()));
      Map<String, Object> file = new LinkedHashMap<>();
      Map<String, Object> pv = new LinkedHashMap<>();
      pv.put("key_group", Integer.toString(e.getKey()));
      pv.put("store_partition", Integer.toString(partition));
      file.put("path", e.getValue());
      file.put("size", status.getLen());
      file.put("rows", counts[e.getKey()]);
      file.put("partition_values", pv);
      file.put("modification_time", status.getModificationTime());
      files.add(file);
    }
    return files;
  }

  /** The key groups that got rows (ascending). */
  List<Integer> groups() {
    return new ArrayList<>(paths.keySet());
  }

  /** A Parquet writer of Spark rows with Spark's own write support. */
  private static final class RowWriterBuilder
      extends ParquetWriter.Builder<InternalRow, RowWriterBuilder> {
    RowWriterBuilder(OutputFile file) {
      super(file);
    }

    @Override
    protected RowWriterBuilder self() {
      return this;
    }

    @Override
    protected WriteSupport<InternalRow> getWriteSupport(Configuration conf) {
      return new ParquetWriteSupport();
    }
  }

  private ParquetWriter<InternalRow> open(Path path) throws IOException {
    return new RowWriterBuilder(SnapshotFiles.outputFile(path, conf))
        .withConf(conf)
        .withCompressionCodec(CompressionCodecName.SNAPPY)
        .withDictionaryEncoding(true)
        .withValidation(false)
        .withWriterVersion(ParquetProperties.WriterVersion.PARQUET_1_0)
        .build();
  }
}
