package io.barriered.shim;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.ColumnarRule;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.streaming.operators.stateful.StatefulOperatorStateInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Option;
import scala.Product;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * A session extension ({@code spark.sql.extensions}) that starts a restored query's stateful
 * operators at the watermark of the checkpoint it was restored from.
 *
 * <p>Spark keeps the watermark in the checkpoint location's offset log; a query restored into a
 * new location starts at watermark 0. Its operators would then accept records that the
 * checkpoint's watermark had already made late, and re-create state it had evicted: an append
 * window emitted before the cut would be emitted again. Every offset of a restored query names
 * the cut batch's watermark ({@code restore.watermark_ms}, see {@link CutLog}); this rule,
 * run on every micro-batch's physical plan after Spark's own state rule, raises each stateful
 * operator's watermark for late events and for eviction to at least that value (the watermark
 * only moves forward, so a batch past it is left alone). Records older than the checkpoint's
 * watermark are dropped as Spark drops late records; nothing evicted comes back.
 */
public final class RestoredWatermark extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  private static final Logger LOG = LoggerFactory.getLogger(RestoredWatermark.class);
  private static final String LATE = "eventTimeWatermarkForLateEvents";
  private static final String EVICTION = "eventTimeWatermarkForEviction";
  /** The checkpoint location Spark gives a streaming query's plan for explain(). */
  private static final String EXPLAINED = "<unknown>";

  /**
   * Refuse a batch of a restored query (its offset names the restored checkpoint's watermark)
   * on a session without this extension: its operators would run below that watermark. The
   * source refuses such a restore when it is loaded; this catches a restored checkpoint
   * location restarted later on such a session. {@code conf}: the store's Hadoop
   * configuration, which holds the session's SQL configuration.
   */
  static void require(CutLog.Batch batch, Configuration conf) {
    if (batch == null || batch.restoredWatermarkMs == null) {
      return;
    }
    for (String name : conf.getTrimmedStrings("spark.sql.extensions")) {
      if (RestoredWatermark.class.getName().equals(name)) {
        return;
      }
    }
    throw new IllegalStateException(
        "barriered: this query was restored from a checkpoint whose watermark was "
            + batch.restoredWatermarkMs
            + " ms; its stateful operators start there only when spark.sql.extensions includes "
            + RestoredWatermark.class.getName()
            + " (without it they would accept records that watermark made late and emit"
            + " evicted windows again). barriered.with_state_store(builder) sets it; on a"
            + " cluster, add it to the Spark config next to the provider class");
  }

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectColumnar(
        new AbstractFunction1<SparkSession, ColumnarRule>() {
          @Override
          public ColumnarRule apply(SparkSession session) {
            return new Columnar(session);
          }
        });
    return BoxedUnit.UNIT;
  }

  private static final class Columnar extends ColumnarRule {
    private final Rule<SparkPlan> rule;

    Columnar(SparkSession session) {
      this.rule = new Raise(session);
    }

    @Override
    public Rule<SparkPlan> preColumnarTransitions() {
      return rule;
    }
  }

  private static final class Raise extends Rule<SparkPlan> {
    private final SparkSession session;

    Raise(SparkSession session) {
      this.session = session;
    }

    @Override
    public SparkPlan apply(SparkPlan plan) {
      if (!plan.exists(
          new AbstractFunction1<SparkPlan, Object>() {
            @Override
            public Object apply(SparkPlan node) {
              return index(node, LATE) >= 0;
            }
          })) {
        return plan; // no stateful operator with a watermark: a batch query, most plans
      }
      Configuration conf = session.sessionState().newHadoopConf();
      return (SparkPlan)
          plan.transformUp(
              new AbstractPartialFunction<SparkPlan, SparkPlan>() {
                @Override
                public boolean isDefinedAt(SparkPlan node) {
                  return index(node, LATE) >= 0;
                }

                @Override
                public SparkPlan apply(SparkPlan node) {
                  return raise(node, conf);
                }
              });
    }
  }

  /** The position of constructor argument {@code name} of {@code node}, or -1. */
  private static int index(Object node, String name) {
    if (!(node instanceof Product)) {
      return -1;
    }
    Product product = (Product) node;
    for (int i = 0; i < product.productArity(); i++) {
      if (name.equals(product.productElementName(i))) {
        return i;
      }
    }
    return -1;
  }

  private static SparkPlan raise(SparkPlan node, Configuration conf) {
    Product product = (Product) node;
    int info = index(node, "stateInfo");
    if (info < 0 || ((Option<?>) product.productElement(index(node, LATE))).isEmpty()) {
      return node; // no watermark on this operator's input: nothing to raise
    }
    Option<?> stateInfo = (Option<?>) product.productElement(info);
    if (stateInfo.isEmpty()) {
      return node;
    }
    StatefulOperatorStateInfo state = (StatefulOperatorStateInfo) stateInfo.get();
    if (state.checkpointLocation().startsWith(EXPLAINED)) {
      return node; // explain() of a streaming query: planned, never run, no offset log
    }
    Path root = new Path(state.checkpointLocation()).getParent();
    CutLog.Batch batch = CutLog.read(conf, root, state.storeVersion());
    Long restored = batch.restoredWatermarkMs;
    if (restored == null) {
      return node;
    }
    Object[] args = new Object[product.productArity()];
    boolean changed = false;
    for (int i = 0; i < args.length; i++) {
      args[i] = product.productElement(i);
      String name = product.productElementName(i);
      if ((LATE.equals(name) || EVICTION.equals(name)) && args[i] instanceof Option) {
        Option<?> current = (Option<?>) args[i];
        if (current.isDefined() && (Long) current.get() < restored) {
          args[i] = Option.apply(restored);
          changed = true;
        }
      }
    }
    if (!changed) {
      return node;
    }
    LOG.info(
        "barriered: batch {} operator {} ({}) starts at the restored checkpoint's watermark {}"
            + " ms",
        state.storeVersion(),
        state.operatorId(),
        node.nodeName(),
        restored);
    return (SparkPlan) node.makeCopy(args);
  }
}
