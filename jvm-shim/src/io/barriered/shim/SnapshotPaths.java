package io.barriered.shim;

import org.apache.hadoop.fs.Path;

/**
 * The files of a snapshot path that the provider writes, named as the Python side's
 * {@code barriered.statestore.layout.SnapshotLayout} names them ({@code operator_table},
 * {@code ack_file}, {@code stores_dir}). {@code tests/unit/test_snapshot_paths.py} checks
 * that both give the same paths.
 */
final class SnapshotPaths {
  private SnapshotPaths() {}

  /** The Delta table of one Spark store's operator state: {@code operators/<name>}. */
  static Path operatorTable(String snapshotPath, String operator) {
    return new Path(new Path(snapshotPath, "operators"), operator);
  }

  /**
   * The acknowledgement of {@code participant} for one checkpoint, by the run of {@code
   * epoch} (negative: none): {@code _acks/<id>/<participant, / as ~>[.e<epoch>].json}.
   */
  static Path ackFile(String snapshotPath, long checkpointId, String participant, long epoch) {
    String name = participant.replace("/", "~") + (epoch < 0 ? "" : ".e" + epoch) + ".json";
    return new Path(new Path(new Path(snapshotPath, "_acks"), Long.toString(checkpointId)), name);
  }

  /** The registration of one Spark store: {@code _coordinator/stores/<name>.json}. */
  static Path storeRegistration(String snapshotPath, String operator) {
    return new Path(new Path(new Path(snapshotPath, "_coordinator"), "stores"), operator + ".json");
  }
}
