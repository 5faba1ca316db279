package io.barriered.shim;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.types.DataTypeUtils;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.execution.ProjectExec;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.streaming.operators.stateful.StateStoreRestoreExec;
import org.apache.spark.sql.execution.streaming.operators.stateful.StateStoreSaveExec;
import org.apache.spark.sql.execution.streaming.operators.stateful.StateStoreWriter;
import org.apache.spark.sql.execution.streaming.operators.stateful.StreamingDeduplicateExec;
import org.apache.spark.sql.execution.streaming.runtime.StreamingRelationExec;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The stores of a streaming query's Spark stateful operators, computed from batch data: the
 * state a query would hold after reading that data, written in the layout the provider
 * restores ({@link GroupFiles}), for {@code barriered.state_processor.bootstrap}.
 *
 * <p>Everything comes from the query's own physical plan, planned as a micro-batch (the one
 * {@code explain()} shows): the stateful operators with the ids Spark's state rule gives
 * them, their store key and value types, and the part of the
 * plan that feeds each store. For a grouped aggregation ({@code StateStoreSaveExec}) that is
 * the partial-merge aggregation below its {@code StateStoreRestoreExec}: with the query's
 * streaming source replaced by the batch data, it yields per key the merged aggregation
 * buffers (sum and count of an average, ...), computed by Spark's own aggregate functions,
 * which is what the store holds. For {@code dropDuplicates} ({@code StreamingDeduplicateExec})
 * it is the operator's input: each key once, with the store's empty value. Rows are hashed
 * like the stream's shuffle and written per key group by the provider's own writer, one
 * {@code store_partition} per partition of the bootstrap's shuffle.
 */
public final class StoreBootstrap {
  private static final Logger LOG = LoggerFactory.getLogger(StoreBootstrap.class);
  static final String AGGREGATION = "aggregation";
  static final String DEDUPLICATION = "dropDuplicates";

  private StoreBootstrap() {}

  /** One store the bootstrap can write. */
  private static final class Store {
    final int operatorId;
    final String kind;
    final SparkPlan input;
    final scala.collection.immutable.Seq<Attribute> keys;
    final scala.collection.immutable.Seq<Attribute> values;
    final StructType keySchema;
    final StructType valueSchema;

    Store(
        int operatorId,
        String kind,
        SparkPlan input,
        scala.collection.immutable.Seq<Attribute> keys,
        scala.collection.immutable.Seq<Attribute> values,
        StructType valueSchema) {
      this.operatorId = operatorId;
      this.kind = kind;
      this.input = input;
      this.keys = keys;
      this.values = values;
      this.keySchema = DataTypeUtils.fromAttributes(keys);
      this.valueSchema = valueSchema;
    }

    String name() {
      return operatorId + "-default";
    }
  }

  /** What the plan holds: the stores, the operators refused and the streaming sources. */
  private static final class Analysis {
    final List<Store> stores = new ArrayList<>();
    final List<String> unsupported = new ArrayList<>();
    final List<StreamingRelationExec> sources = new ArrayList<>();
  }

  private static <T> List<T> java(scala.collection.Seq<T> seq) {
    return CollectionConverters.asJava(seq);
  }

  private static void preorder(SparkPlan plan, List<SparkPlan> out) {
    out.add(plan);
    for (SparkPlan child : java(plan.children())) {
      preorder(child, out);
    }
  }

  private static List<SparkPlan> nodes(SparkPlan plan) {
    List<SparkPlan> out = new ArrayList<>();
    preorder(plan, out);
    return out;
  }

  private static String describe(SparkPlan node, int operatorId) {
    return node.nodeName() + " (operator " + operatorId + ")";
  }

  private static Analysis analyze(Dataset<?> query) {
    // The plan explain() shows: planned as a micro-batch, stateful operators numbered.
    SparkPlan plan = query.queryExecution().queryExecutionForExplain().executedPlan();
    Analysis found = new Analysis();
    for (SparkPlan node : nodes(plan)) {
      if (node instanceof StreamingRelationExec) {
        found.sources.add((StreamingRelationExec) node);
      }
      if (!(node instanceof StateStoreWriter)) {
        continue;
      }
      int id = (int) ((StateStoreWriter) node).getStateInfo().operatorId();
      Store store = null;
      if (node instanceof StateStoreSaveExec) {
        store = aggregation((StateStoreSaveExec) node, id);
      } else if (node instanceof StreamingDeduplicateExec) {
        StreamingDeduplicateExec dedup = (StreamingDeduplicateExec) node;
        store =
            new Store(
                id,
                DEDUPLICATION,
                dedup.child(),
                dedup.keyExpressions(),
                CollectionConverters.asScala(new ArrayList<Attribute>()).toSeq(),
                dedup.stateValueSchema());
      }
      if (store == null) {
        found.unsupported.add(describe(node, id));
        continue;
      }
      for (SparkPlan below : nodes(store.input)) {
        if (below instanceof StateStoreWriter) {
          found.unsupported.add(
              describe(node, id) + " over another stateful operator, " + below.nodeName());
          store = null;
          break;
        }
      }
      if (store != null) {
        found.stores.add(store);
      }
    }
    return found;
  }

  /** The store of a grouped aggregation, or null when its plan is not the expected one. */
  private static Store aggregation(StateStoreSaveExec save, int id) {
    StateStoreRestoreExec restore = null;
    for (SparkPlan node : nodes(save.child())) {
      if (node instanceof StateStoreRestoreExec) {
        restore = (StateStoreRestoreExec) node;
        break;
      }
    }
    if (restore == null) {
      return null;
    }
    SparkPlan input = restore.child();
    Set<ExprId> keyIds = new HashSet<>();
    for (Attribute key : java(save.keyExpressions())) {
      keyIds.add(key.exprId());
    }
    List<Attribute> values = new ArrayList<>();
    for (Attribute a : java(input.output())) {
      if (save.stateFormatVersion() == 1 || !keyIds.contains(a.exprId())) {
        values.add(a);
      }
    }
    scala.collection.immutable.Seq<Attribute> valueSeq =
        CollectionConverters.asScala(values).toSeq();
    StructType valueSchema = save.stateManager().getStateValueSchema();
    if (!DataTypeUtils.fromAttributes(valueSeq).sameType(valueSchema)) {
      return null;
    }
    return new Store(id, AGGREGATION, input, save.keyExpressions(), valueSeq, valueSchema);
  }

  /**
   * What a bootstrap of {@code query}'s stores would write, as JSON: {@code stores} (per
   * store: {@code operator}, {@code operator_id}, {@code kind}, {@code key_schema}, {@code
   * value_schema}, Spark JSON), {@code unsupported} (the stateful operators it cannot
   * bootstrap, named), {@code sources} (the streaming sources' names) and {@code
   * source_schema} (the columns of the one streaming source, Spark JSON, when there is one).
   */
  public static String describe(Dataset<?> query) throws IOException {
    Analysis found = analyze(query);
    Map<String, Object> out = new LinkedHashMap<>();
    List<Map<String, Object>> stores = new ArrayList<>();
    for (Store store : found.stores) {
      Map<String, Object> entry = new LinkedHashMap<>();
      entry.put("operator", store.name());
      entry.put("operator_id", store.operatorId);
      entry.put("kind", store.kind);
      entry.put("key_schema", store.keySchema.json());
      entry.put("value_schema", store.valueSchema.json());
      stores.add(entry);
    }
    out.put("stores", stores);
    out.put("unsupported", found.unsupported);
    List<String> sources = new ArrayList<>();
    for (StreamingRelationExec source : found.sources) {
      sources.add(source.sourceName());
    }
    out.put("sources", sources);
    if (found.sources.size() == 1) {
      out.put("source_schema", DataTypeUtils.fromAttributes(found.sources.get(0).output()).json());
    }
    return CutLog.JSON.writeValueAsString(out);
  }

  /**
   * Write the stores of {@code query} computed from {@code batch} under {@code
   * <snapshotRoot>/operators/<op>-<store>/}; return, as JSON, per store the files written
   * ({@link GroupFiles#finish}'s entries). {@code batch} has the streaming source's columns,
   * in its order and types ({@link #describe}'s {@code source_schema}): it replaces the
   * source in the plan. Call {@link #describe} first: this writes the supported stores only.
   */
  public static String write(
      Dataset<?> query, Dataset<?> batch, String snapshotRoot, int maxParallelism, long checkpoint)
      throws IOException {
    Analysis found = analyze(query);
    if (found.sources.size() != 1) {
      throw new IllegalArgumentException(
          "barriered: a bootstrap needs a query of one streaming source, not " + found.sources);
    }
    StreamingRelationExec source = found.sources.get(0);
    SparkPlan data = batch.queryExecution().executedPlan();
    List<Attribute> from = java(data.output());
    List<Attribute> to = java(source.output());
    List<NamedExpression> aliases = new ArrayList<>();
    for (int i = 0; i < to.size(); i++) {
      Attribute target = to.get(i);
      aliases.add(
          new Alias(
              from.get(i),
              target.name(),
              target.exprId(),
              CollectionConverters.asScala(new ArrayList<String>()).toSeq(),
              Option.empty(),
              CollectionConverters.asScala(new ArrayList<String>()).toSeq()));
    }
    SparkPlan replacement =
        new ProjectExec(CollectionConverters.asScala(aliases).toSeq(), data);
    SerializableConfiguration conf =
        new SerializableConfiguration(query.sparkSession().sessionState().newHadoopConf());
    Map<String, Object> out = new LinkedHashMap<>();
    for (Store store : found.stores) {
      long start = System.currentTimeMillis();
      SparkPlan input = replace(store.input, source, replacement);
      Path table = SnapshotPaths.operatorTable(snapshotRoot, store.name());
      Writer writer =
          new Writer(
              table.toString(),
              "c" + checkpoint,
              maxParallelism,
              conf,
              store.kind,
              store.keys,
              store.values,
              input.output(),
              store.keySchema,
              store.valueSchema);
      List<String> files = input.execute().toJavaRDD().mapPartitionsWithIndex(writer, false).collect();
      List<Object> entries = new ArrayList<>();
      for (String file : files) {
        entries.add(CutLog.JSON.readValue(file, Map.class));
      }
      out.put(store.name(), entries);
      LOG.info(
          "barriered: bootstrap of store {}: {} file(s) in {} ms",
          store.name(),
          entries.size(),
          System.currentTimeMillis() - start);
    }
    return CutLog.JSON.writeValueAsString(out);
  }

  private static SparkPlan replace(SparkPlan plan, SparkPlan leaf, SparkPlan with) {
    if (plan == leaf) {
      return with;
    }
    List<SparkPlan> children = java(plan.children());
    List<SparkPlan> replaced = new ArrayList<>();
    boolean changed = false;
    for (SparkPlan child : children) {
      SparkPlan now = replace(child, leaf, with);
      changed |= now != child;
      replaced.add(now);
    }
    if (!changed) {
      return plan;
    }
    return (SparkPlan) plan.withNewChildren(CollectionConverters.asScala(replaced).toSeq());
  }

  /** Writes one partition of a store's rows: runs on the executors. */
  private static final class Writer
      implements Function2<Integer, Iterator<InternalRow>, Iterator<String>> {
    private static final long serialVersionUID = 1L;
    private final String table;
    private final String prefix;
    private final int groups;
    private final SerializableConfiguration conf;
    private final String kind;
    private final scala.collection.immutable.Seq<Attribute> keys;
    private final scala.collection.immutable.Seq<Attribute> values;
    private final scala.collection.immutable.Seq<Attribute> input;
    private final StructType keySchema;
    private final StructType valueSchema;

    Writer(
        String table,
        String prefix,
        int groups,
        SerializableConfiguration conf,
        String kind,
        scala.collection.immutable.Seq<Attribute> keys,
        scala.collection.immutable.Seq<Attribute> values,
        scala.collection.immutable.Seq<Attribute> input,
        StructType keySchema,
        StructType valueSchema) {
      this.table = table;
      this.prefix = prefix;
      this.groups = groups;
      this.conf = conf;
      this.kind = kind;
      this.keys = keys;
      this.values = values;
      this.input = input;
      this.keySchema = keySchema;
      this.valueSchema = valueSchema;
    }

    @Override
    public Iterator<String> call(Integer partition, Iterator<InternalRow> rows) throws Exception {
      @SuppressWarnings("unchecked")
      scala.collection.immutable.Seq<Expression> keyExprs =
          (scala.collection.immutable.Seq<Expression>) (scala.collection.immutable.Seq<?>) keys;
      @SuppressWarnings("unchecked")
      scala.collection.immutable.Seq<Expression> valueExprs =
          (scala.collection.immutable.Seq<Expression>) (scala.collection.immutable.Seq<?>) values;
      UnsafeProjection key = UnsafeProjection.create(keyExprs, input);
      UnsafeProjection hasher =
          UnsafeProjection.create(
              CollectionConverters.asScala(
                      List.of(GroupFiles.partitionHash(keySchema, keySchema.fields().length)))
                  .toSeq());
      boolean dedup = DEDUPLICATION.equals(kind);
      // dropDuplicates' value: one null field (Spark's own store holds the same).
      UnsafeRow empty =
          UnsafeProjection.create(valueSchema)
              .apply(new GenericInternalRow(valueSchema.fields().length))
              .copy();
      UnsafeProjection value = dedup ? null : UnsafeProjection.create(valueExprs, input);
      GroupFiles files =
          new GroupFiles(
              new Path(table),
              partition,
              prefix,
              GroupFiles.writeConf(
                  new Configuration(conf.value()),
                  GroupFiles.fileSchema(keySchema, valueSchema)),
              groups);
      Set<UnsafeRow> seen = new HashSet<>();
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        UnsafeRow k = key.apply(row);
        if (dedup) {
          if (seen.contains(k)) {
            continue;
          }
          k = k.copy();
          seen.add(k);
        }
        int hash = hasher.apply(k).getInt(0);
        files.write(hash, k, dedup ? empty : value.apply(row));
      }
      List<String> out = new ArrayList<>();
      for (Map<String, Object> file : files.finish()) {
        out.add(CutLog.JSON.writeValueAsString(file));
      }
      return out.iterator();
    }
  }
}
