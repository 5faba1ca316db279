package io.barriered.shim;

import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointInfo;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomSumMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.collection.Iterator;
import scala.collection.immutable.Set;

/**
 * A write store that forwards everything to RocksDB's and, in {@code commit()}, hands the
 * uncommitted store to the {@link CutExporter} first (it exports only at a cut batch), then
 * commits, then publishes the acknowledgement: an acknowledgement always names a committed
 * store version. Every write marks its key's key group in a {@link ChangeTracker.Touched}
 * (once the provider instance exported a first cut), which the commit records.
 */
final class CapturingStateStore implements StateStore {
  /**
   * A custom metric every captured store reports (1 per store instance and batch): its
   * name in a state operator's progress tells the coordinator the operator is captured.
   */
  static final StateStoreCustomMetric CAPTURED =
      new StateStoreCustomSumMetric(
          "barrieredCapturedStores", "state store instances captured at barriered cuts");

  private final StateStore delegate;
  private final CutExporter exporter;
  private final ChangeTracker.Touched touched;
  private final UnsafeProjection hasher;

  CapturingStateStore(StateStore delegate, CutExporter exporter) {
    this.delegate = delegate;
    this.exporter = exporter;
    this.touched = exporter.tracker().open();
    this.hasher = touched.tracking() ? exporter.newHasher() : null;
  }

  private void touch(UnsafeRow key) {
    if (hasher != null) {
      touched.bits.set(Math.floorMod(hasher.apply(key).getInt(0), touched.groups));
    }
  }

  private void touchAll() {
    if (hasher != null) {
      touched.bits.set(0, touched.groups);
    }
  }

  @Override
  public long commit() {
    CutExporter.Export export = exporter.export(delegate, touched);
    long began = System.nanoTime();
    long version = delegate.commit();
    exporter.tracker().committed(version, touched);
    if (export != null) {
      export.commitMillis = (System.nanoTime() - began) / 1_000_000;
      exporter.acknowledge(export);
      exporter.exported(export, version);
    }
    return version;
  }

  @Override
  public StateStoreId id() {
    return delegate.id();
  }

  @Override
  public long version() {
    return delegate.version();
  }

  @Override
  public UnsafeRow get(UnsafeRow key, String colFamilyName) {
    return delegate.get(key, colFamilyName);
  }

  @Override
  public Iterator<UnsafeRow> multiGet(UnsafeRow[] keys, String colFamilyName) {
    return delegate.multiGet(keys, colFamilyName);
  }

  @Override
  public boolean keyExists(UnsafeRow key, String colFamilyName) {
    return delegate.keyExists(key, colFamilyName);
  }

  @Override
  public Iterator<UnsafeRow> valuesIterator(UnsafeRow key, String colFamilyName) {
    return delegate.valuesIterator(key, colFamilyName);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> prefixScan(UnsafeRow prefixKey, String colFamilyName) {
    return delegate.prefixScan(prefixKey, colFamilyName);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> prefixScanWithMultiValues(
      UnsafeRow prefixKey, String colFamilyName) {
    return delegate.prefixScanWithMultiValues(prefixKey, colFamilyName);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> rangeScan(
      Option<UnsafeRow> start, Option<UnsafeRow> end, String colFamilyName) {
    return delegate.rangeScan(start, end, colFamilyName);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> rangeScanWithMultiValues(
      Option<UnsafeRow> start, Option<UnsafeRow> end, String colFamilyName) {
    return delegate.rangeScanWithMultiValues(start, end, colFamilyName);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> iterator(String colFamilyName) {
    return delegate.iterator(colFamilyName);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> iteratorWithMultiValues(String colFamilyName) {
    return delegate.iteratorWithMultiValues(colFamilyName);
  }

  @Override
  public Set<String> allColumnFamilyNames() {
    return delegate.allColumnFamilyNames();
  }

  @Override
  public void registerColFamily(
      String colFamilyName,
      StructType keySchema,
      StructType valueSchema,
      KeyStateEncoderSpec keyStateEncoderSpec,
      boolean useMultipleValuesPerKey,
      boolean isInternal) {
    delegate.registerColFamily(
        colFamilyName,
        keySchema,
        valueSchema,
        keyStateEncoderSpec,
        useMultipleValuesPerKey,
        isInternal);
  }

  @Override
  public boolean removeColFamilyIfExists(String colFamilyName) {
    touchAll();
    return delegate.removeColFamilyIfExists(colFamilyName);
  }

  @Override
  public void createColFamilyIfAbsent(
      String colFamilyName,
      StructType keySchema,
      StructType valueSchema,
      KeyStateEncoderSpec keyStateEncoderSpec,
      boolean useMultipleValuesPerKey,
      boolean isInternal) {
    delegate.createColFamilyIfAbsent(
        colFamilyName,
        keySchema,
        valueSchema,
        keyStateEncoderSpec,
        useMultipleValuesPerKey,
        isInternal);
  }

  @Override
  public void put(UnsafeRow key, UnsafeRow value, String colFamilyName) {
    touch(key);
    delegate.put(key, value, colFamilyName);
  }

  @Override
  public void putList(UnsafeRow key, UnsafeRow[] values, String colFamilyName) {
    touch(key);
    delegate.putList(key, values, colFamilyName);
  }

  @Override
  public void remove(UnsafeRow key, String colFamilyName) {
    touch(key);
    delegate.remove(key, colFamilyName);
  }

  @Override
  public void deleteRange(UnsafeRow beginKey, UnsafeRow endKey, String colFamilyName) {
    touchAll();
    delegate.deleteRange(beginKey, endKey, colFamilyName);
  }

  @Override
  public void merge(UnsafeRow key, UnsafeRow value, String colFamilyName) {
    touch(key);
    delegate.merge(key, value, colFamilyName);
  }

  @Override
  public void mergeList(UnsafeRow key, UnsafeRow[] values, String colFamilyName) {
    touch(key);
    delegate.mergeList(key, values, colFamilyName);
  }

  @Override
  public void abort() {
    delegate.abort();
  }

  @Override
  public void release() {
    delegate.release();
  }

  @Override
  public StateStoreMetrics metrics() {
    StateStoreMetrics m = delegate.metrics();
    return new StateStoreMetrics(
        m.numKeys(),
        m.memoryUsedBytes(),
        m.customMetrics().updated(CAPTURED, (Object) 1L),
        m.instanceMetrics());
  }

  @Override
  public StateStoreCheckpointInfo getStateStoreCheckpointInfo() {
    return delegate.getStateStoreCheckpointInfo();
  }

  @Override
  public boolean hasCommitted() {
    return delegate.hasCommitted();
  }
}
