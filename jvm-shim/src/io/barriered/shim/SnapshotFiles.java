package io.barriered.shim;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Set;
import java.util.UUID;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.util.HadoopOutputFile;
import org.apache.parquet.io.LocalOutputFile;
import org.apache.parquet.io.OutputFile;

/**
 * Creates the provider's files under the snapshot path: store files, acknowledgements,
 * registrations.
 *
 * <p>On the local file system Hadoop's {@code create} and {@code mkdirs} set each new
 * file's and folder's permission by running {@code chmod} in a child process when Hadoop's
 * native library is absent (as in the pyspark package), about 10 ms per file and another
 * for its {@code .crc}. Local files are therefore written with {@code java.nio} (no
 * checksum file; the readers, delta-rs and Spark, need none); any other file system goes
 * through Hadoop.
 *
 * <p>{@link #replace} makes a file appear whole: on a file system with atomic rename (local,
 * HDFS) a temporary file is renamed over it; on an object store ({@code s3a}, {@code gs},
 * {@code abfs}: no atomic rename, where a rename is a copy and a delete) the file is
 * written in place, since an object becomes visible only whole, when its upload completes.
 */
final class SnapshotFiles {
  private SnapshotFiles() {}

  /** Schemes of Hadoop's object-store file systems: no atomic rename, atomic uploads. */
  private static final Set<String> OBJECT_STORES =
      Set.of("s3a", "s3", "gs", "abfs", "abfss", "wasb", "wasbs", "oss");

  /** The local path of {@code path}, or null when it is on another file system. */
  private static java.nio.file.Path local(Path path, Configuration conf) throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    if (!"file".equals(fs.getScheme())) {
      return null;
    }
    return Paths.get(fs.makeQualified(path).toUri());
  }

  /** A new file for a Parquet writer (its folders created). */
  static OutputFile outputFile(Path path, Configuration conf) throws IOException {
    java.nio.file.Path file = local(path, conf);
    if (file == null) {
      return HadoopOutputFile.fromPath(path, conf);
    }
    Files.createDirectories(file.getParent());
    return new LocalOutputFile(file);
  }

  /** Write {@code bytes} to {@code target}, replacing it at once (a temporary file renamed). */
  static void replace(Path target, byte[] bytes, Configuration conf) throws IOException {
    java.nio.file.Path file = local(target, conf);
    String tmpName = "." + target.getName() + "." + UUID.randomUUID() + ".tmp";
    if (file != null) {
      Files.createDirectories(file.getParent());
      java.nio.file.Path tmp = file.resolveSibling(tmpName);
      Files.write(tmp, bytes);
      Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
      return;
    }
    FileSystem fs = target.getFileSystem(conf);
    if (OBJECT_STORES.contains(fs.getScheme())) {
      try (OutputStream out = fs.create(target, true)) {
        out.write(bytes);
      }
      return;
    }
    fs.mkdirs(target.getParent());
    Path tmp = new Path(target.getParent(), tmpName);
    try (OutputStream out = fs.create(tmp, true)) {
      out.write(bytes);
    }
    fs.delete(target, false);
    if (!fs.rename(tmp, target)) {
      throw new IOException("rename " + tmp + " -> " + target + " failed");
    }
  }
}
