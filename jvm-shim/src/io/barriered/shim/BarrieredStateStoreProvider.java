package io.barriered.shim;

import java.util.concurrent.locks.ReentrantReadWriteLock;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.ReadStateStore;
import org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.StateSchemaProvider;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreInstanceMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.collection.immutable.Seq;

/**
 * Spark's RocksDB state store provider, with every store's state captured at barriered
 * checkpoint cuts.
 *
 * <p>Every call goes to a {@link RocksDBStateStoreProvider}. Write stores are wrapped in a
 * {@link CapturingStateStore}, whose {@code commit()} exports the store per key group when
 * the micro-batch being committed is the cut batch of a barriered checkpoint (see {@link
 * CutExporter}). Read stores are handed out unwrapped: RocksDB's upgrade of a read store to
 * a write store needs its own class.
 */
public final class BarrieredStateStoreProvider implements StateStoreProvider {

  private final RocksDBStateStoreProvider delegate = new RocksDBStateStoreProvider();
  private boolean unloaded = false;
  private ReentrantReadWriteLock maintenanceLock;
  private CutExporter exporter;
  /** A restored version-0 store handed out as a read store, awaiting its upgrade. */
  private StateStore loaded;
  /**
   * Whether this is the store of {@code barriered.keyed}'s operator (grouped by the one
   * column {@value #KEYED_KEY}): it snapshots itself into the {@code state} table and
   * restores from it, so it is neither captured nor loaded here (one copy of its state).
   */
  private boolean keyed;

  /**
   * The grouping column of {@code barriered.keyed}'s applyInPandasWithState: the slot of the
   * key group ({@code barriered.datasource.columns.SLOT}).
   */
  static final String KEYED_KEY = "_slot";

  public BarrieredStateStoreProvider() {
    StateStoreProvider.$init$(this);
    SparkVersionCheck.require();
  }

  @Override
  public void init(
      StateStoreId stateStoreId,
      StructType keySchema,
      StructType valueSchema,
      KeyStateEncoderSpec keyStateEncoderSpec,
      boolean useColumnFamilies,
      StateStoreConf storeConf,
      Configuration hadoopConf,
      boolean useMultipleValuesPerKey,
      Option<StateSchemaProvider> stateSchemaProvider) {
    delegate.init(
        stateStoreId,
        keySchema,
        valueSchema,
        keyStateEncoderSpec,
        useColumnFamilies,
        storeConf,
        hadoopConf,
        useMultipleValuesPerKey,
        stateSchemaProvider);
    keyed = keySchema.fields().length == 1 && KEYED_KEY.equals(keySchema.fields()[0].name());
    exporter =
        new CutExporter(
            stateStoreId,
            keySchema,
            valueSchema,
            keyStateEncoderSpec,
            useColumnFamilies || useMultipleValuesPerKey,
            new Configuration(hadoopConf));
  }

  @Override
  public StateStoreId stateStoreId() {
    return delegate.stateStoreId();
  }

  @Override
  public void close() {
    delegate.close();
  }

  @Override
  public StateStore getStore(
      long version, Option<String> uniqueId, boolean forceSnapshotOnCommit, boolean loadEmpty) {
    RestoredWatermark.require(exporter.thisBatch(), exporter.conf());
    StateStore store = delegate.getStore(version, uniqueId, forceSnapshotOnCommit, loadEmpty);
    if (keyed) {
      return store;
    }
    if (version == 0) {
      restoreInto(store);
    }
    return new CapturingStateStore(store, exporter);
  }

  /**
   * Version 0 of a restored query's store starts from the restored checkpoint: a write
   * store is opened, loaded with the rows this partition owns, and handed out as the read
   * store; {@link #upgradeReadStoreToWriteStore} then hands the same store back.
   */
  @Override
  public ReadStateStore getReadStore(long version, Option<String> uniqueId) {
    RestoredWatermark.require(exporter.thisBatch(), exporter.conf());
    if (version == 0 && !keyed) {
      CutLog.Batch batch = exporter.thisBatch();
      JsonNode entry = StateLoader.entry(exporter, batch);
      if (entry != null) {
        StateStore store = delegate.getStore(0, uniqueId, false, false);
        StateLoader.load(store, exporter, entry, batch.partitions);
        loaded = store;
        return store;
      }
    }
    return delegate.getReadStore(version, uniqueId);
  }

  @Override
  public StateStore upgradeReadStoreToWriteStore(
      ReadStateStore readStore, long version, Option<String> uniqueId, boolean forceSnapshot) {
    if (readStore != null && readStore == loaded) {
      loaded = null;
      return new CapturingStateStore((StateStore) readStore, exporter);
    }
    StateStore store =
        delegate.upgradeReadStoreToWriteStore(readStore, version, uniqueId, forceSnapshot);
    return keyed ? store : new CapturingStateStore(store, exporter);
  }

  private void restoreInto(StateStore store) {
    CutLog.Batch batch = exporter.thisBatch();
    JsonNode entry = StateLoader.entry(exporter, batch);
    if (entry != null) {
      StateLoader.load(store, exporter, entry, batch.partitions);
    }
  }

  @Override
  public void doMaintenance() {
    delegate.doMaintenance();
  }

  @Override
  public void doSnapshotMaintenance() {
    delegate.doSnapshotMaintenance();
  }

  @Override
  public void doCleanupMaintenance() {
    delegate.doCleanupMaintenance();
  }

  /**
   * RocksDB's metrics plus {@link CapturingStateStore#CAPTURED}: the query progress then
   * shows, per state operator, that its stores are captured at barriered cuts.
   */
  @Override
  @SuppressWarnings("unchecked")
  public Seq<StateStoreCustomMetric> supportedCustomMetrics() {
    return (Seq<StateStoreCustomMetric>)
        (Seq<?>) delegate.supportedCustomMetrics().appended(CapturingStateStore.CAPTURED);
  }

  @Override
  public Seq<StateStoreInstanceMetric> supportedInstanceMetrics() {
    return delegate.supportedInstanceMetrics();
  }

  @Override
  public void setUnloaded() {
    delegate.setUnloaded();
    StateStoreProvider.super.setUnloaded();
  }

  @Override
  public boolean unloaded() {
    return unloaded;
  }

  @Override
  public void unloaded_$eq(boolean value) {
    unloaded = value;
  }

  @Override
  public ReentrantReadWriteLock maintenanceLock() {
    return maintenanceLock;
  }

  @Override
  public void
      org$apache$spark$sql$execution$streaming$state$StateStoreProvider$_setter_$maintenanceLock_$eq(
          ReentrantReadWriteLock lock) {
    maintenanceLock = lock;
  }
}
