package io.barriered.shim;

import java.util.BitSet;

/** Scenarios of {@link ChangeTracker}; run by tests/unit/test_change_tracker.py. */
public final class ChangeTrackerCheck {
  private ChangeTrackerCheck() {}

  private static CutLog.Cut cut(long id, Long base, long epoch, int partitions, int groups) {
    return new CutLog.Cut(id, "/snap", epoch, groups, partitions, base, "aligned", id, "writes", 0);
  }

  private static CutLog.Cut cut(long id, Long base) {
    return cut(id, base, 7, 2, 16);
  }

  private static BitSet bits(int... groups) {
    BitSet out = new BitSet();
    for (int g : groups) {
      out.set(g);
    }
    return out;
  }

  private static void same(String what, BitSet expected, BitSet got) {
    if (expected == null ? got != null : !expected.equals(got)) {
      throw new AssertionError(what + ": expected " + expected + ", got " + got);
    }
  }

  private static ChangeTracker.Touched write(ChangeTracker t, int... groups) {
    ChangeTracker.Touched touched = t.open();
    for (int g : groups) {
      touched.bits.set(g);
    }
    return touched;
  }

  public static void main(String[] args) {
    ChangeTracker t = new ChangeTracker();
    ChangeTracker.Touched first = t.open();
    if (first.tracking()) {
      throw new AssertionError("a store opened before the first export cannot be tracked");
    }
    same("no base export: unknown", null, t.changedSince(cut(1, null), 0, first));
    t.committed(1, first);
    t.exported(cut(1, null), 1);

    t.committed(2, write(t, 3));
    same("versions since the base plus the cut batch's writes", bits(3, 5),
        t.changedSince(cut(2, 1L), 2, write(t, 5)));
    t.committed(3, write(t, 5));
    t.exported(cut(2, 1L), 3);

    write(t, 9); // opened, written, aborted: never committed
    t.committed(4, write(t, 1));
    same("an aborted store's writes do not count", bits(1),
        t.changedSince(cut(3, 2L), 4, write(t)));

    t.committed(5, write(t, 2));
    t.committed(5, write(t, 4)); // the batch ran again from version 4 (a task retry)
    same("a recommitted version replaces the old one", bits(1, 4),
        t.changedSince(cut(3, 2L), 5, write(t)));
    same("from an older base: every version since", bits(1, 3, 4, 5),
        t.changedSince(cut(3, 1L), 5, write(t)));

    same("versions committed elsewhere: unknown", null, t.changedSince(cut(3, 2L), 7, write(t)));
    same("another run: unknown", null, t.changedSince(cut(3, 2L, 8, 2, 16), 5, write(t)));
    same("other partitions: unknown", null, t.changedSince(cut(3, 2L, 7, 3, 16), 5, write(t)));
    same("other key groups: unknown", null, t.changedSince(cut(3, 2L, 7, 2, 32), 5, write(t)));
    same("a base never exported here: unknown", null, t.changedSince(cut(3, 99L), 5, write(t)));
    same("a store older than the base: unknown", null, t.changedSince(cut(3, 2L), 2, write(t)));

    t.committed(3, write(t, 6)); // the query went back to version 2: the rest is stale
    same("history after a recommit is dropped", null, t.changedSince(cut(3, 2L), 5, write(t)));
    System.out.println("ok");
  }
}
