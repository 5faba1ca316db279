package io.barriered.shim;

/** Prints the provider's paths for the arguments: root operator participant checkpoint epoch. */
public final class SnapshotPathsCheck {
  public static void main(String[] args) {
    String root = args[0];
    String operator = args[1];
    System.out.println(SnapshotPaths.operatorTable(root, operator));
    System.out.println(
        SnapshotPaths.ackFile(root, Long.parseLong(args[3]), args[2], Long.parseLong(args[4])));
    System.out.println(SnapshotPaths.storeRegistration(root, operator));
  }
}
