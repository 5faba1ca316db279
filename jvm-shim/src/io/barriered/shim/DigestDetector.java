package io.barriered.shim;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;

/**
 * Change detection by digest ({@code providerChangeDetection=digest}): a 64-bit digest and a
 * row count of every key group's rows, compared with those of the base checkpoint this store
 * exported in this JVM. It does not depend on seeing every write, at the price of reading the
 * whole store at every cut.
 */
final class DigestDetector {
  private static final int KEPT = 8;

  /** Digests per checkpoint id this store exported in this JVM (the newest {@link #KEPT}). */
  private final Map<Long, Digests> byCheckpoint =
      new LinkedHashMap<Long, Digests>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, Digests> eldest) {
          return size() > KEPT;
        }
      };

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

  /**
   * The key groups of {@code store} to write at {@code cut}: those whose digest differs from
   * the base's (all non-empty ones when the base is unknown here: {@code export.full}). Adds
   * every differing key group, emptied ones included, to {@code export.changed}.
   */
  boolean[] select(
      StateStore store, CutLog.Cut cut, UnsafeProjection hasher, CutExporter.Export export) {
    int groups = cut.maxParallelism;
    Digests now = new Digests(cut.epoch, cut.partitions, groups);
    try (StateStoreIterator<UnsafeRowPair> it = store.iterator("default")) {
      while (it.hasNext()) {
        UnsafeRowPair pair = it.next();
        int g = Math.floorMod(hasher.apply(pair.key()).getInt(0), groups);
        now.sums[g] += digest(pair.key(), pair.value());
        now.counts[g] += 1;
      }
    }
    Digests base;
    synchronized (byCheckpoint) {
      base = cut.base == null ? null : byCheckpoint.get(cut.base);
    }
    export.full =
        base == null
            || base.epoch != cut.epoch
            || base.partitions != cut.partitions
            || base.sums.length != groups;
    boolean[] write = new boolean[groups];
    List<Integer> changed = export.changed;
    for (int g = 0; g < groups; g++) {
      boolean differs =
          export.full
              ? now.counts[g] > 0
              : now.counts[g] != base.counts[g] || now.sums[g] != base.sums[g];
      if (differs) {
        changed.add(g);
        write[g] = now.counts[g] > 0;
      }
    }
    synchronized (byCheckpoint) {
      byCheckpoint.put(cut.id, now);
    }
    return write;
  }
}
