package io.barriered.shim;

import java.util.BitSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

/**
 * The key groups each committed version of one store partition changed, recorded from
 * the store's own writes ({@code put}, {@code remove}, {@code merge}, ...), so that a cut
 * knows the key groups changed since its base checkpoint without digesting the store.
 *
 * <p>A store opened at version {@code v} and committed as {@code v+1} records the key
 * groups its writes touched as version {@code v+1} (an aborted store records nothing: a
 * retried task's writes count only once they commit). A recommitted version replaces the
 * later history. At a cut, the changed key groups are those of every version after the
 * version the base checkpoint exported, up to the store's, plus the cut batch's own: only
 * when that whole chain was recorded in this provider instance, for the same run (epoch),
 * partition count and maxParallelism. Otherwise (a new executor or provider instance, a
 * restored run, a bulk write whose keys are unknown) {@link #changedSince} answers null and
 * the exporter writes the whole partition: correct, only larger.
 */
final class ChangeTracker {
  private static final int KEPT_EXPORTS = 8;

  /** What this store partition exported at one checkpoint, and its committed version. */
  private static final class Exported {
    final long epoch;
    final int partitions;
    final int groups;
    final long version;

    Exported(long epoch, int partitions, int groups, long version) {
      this.epoch = epoch;
      this.partitions = partitions;
      this.groups = groups;
      this.version = version;
    }
  }

  /** Key groups touched by the writes of one open store; null bits: unknown (all). */
  static final class Touched {
    final int groups;
    final BitSet bits;

    Touched(int groups) {
      this.groups = groups;
      this.bits = groups > 0 ? new BitSet(groups) : null;
    }

    boolean tracking() {
      return bits != null;
    }
  }

  private int groups;
  private final TreeMap<Long, BitSet> committed = new TreeMap<>();
  private final Map<Long, Exported> exports =
      new LinkedHashMap<Long, Exported>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, Exported> eldest) {
          return size() > KEPT_EXPORTS;
        }
      };

  /** A record of the writes of a store opened now (untracked before the first export). */
  synchronized Touched open() {
    return new Touched(groups);
  }

  /** Store version {@code version} committed with the writes {@code touched}. */
  synchronized void committed(long version, Touched touched) {
    committed.tailMap(version, true).clear();
    if (groups > 0 && touched.tracking() && touched.groups == groups) {
      committed.put(version, (BitSet) touched.bits.clone());
    }
  }

  /**
   * The key groups changed since {@code cut}'s base checkpoint: every committed version
   * after the base's up to {@code storeVersion} (the version the store was opened at),
   * plus {@code touched}; null when that is not known here.
   */
  synchronized BitSet changedSince(CutLog.Cut cut, long storeVersion, Touched touched) {
    Exported base = cut.base == null ? null : exports.get(cut.base);
    if (base == null
        || !touched.tracking()
        || base.epoch != cut.epoch
        || base.partitions != cut.partitions
        || base.groups != cut.maxParallelism
        || touched.groups != cut.maxParallelism
        || storeVersion < base.version) {
      return null;
    }
    BitSet changed = (BitSet) touched.bits.clone();
    for (long v = base.version + 1; v <= storeVersion; v++) {
      BitSet bits = committed.get(v);
      if (bits == null) {
        return null;
      }
      changed.or(bits);
    }
    return changed;
  }

  /** {@code cut} was exported by the commit of store version {@code version}. */
  synchronized void exported(CutLog.Cut cut, long version) {
    if (groups != cut.maxParallelism) {
      committed.clear();
      exports.clear();
      groups = cut.maxParallelism;
    }
    exports.remove(cut.id);
    exports.put(cut.id, new Exported(cut.epoch, cut.partitions, cut.maxParallelism, version));
    long oldest = Long.MAX_VALUE;
    for (Exported e : exports.values()) {
      oldest = Math.min(oldest, e.version);
    }
    committed.headMap(oldest, true).clear();
  }
}
