package io.barriered.shim;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Which micro-batch is the cut of which barriered checkpoint, read from Spark's offset log.
 *
 * <p>Spark writes {@code <checkpointLocation>/offsets/<batch>} before it runs the batch.
 * The barriered source's end offset of a cut batch holds {@code "cut": {"id": n, ...}} with
 * the snapshot path, the run's epoch and maxParallelism (added by the source for this
 * provider). The metadata line holds the query's {@code spark.sql.shuffle.partitions}. Every
 * offset of a restored query names the manifest of the store files to load
 * ({@code "restore": {"operators_manifest": ..., "watermark_ms": ...}}).
 */
final class CutLog {
  static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, Batch> CACHE =
      java.util.Collections.synchronizedMap(
          new LinkedHashMap<String, Batch>(16, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, Batch> eldest) {
              return size() > 64;
            }
          });

  /**
   * What one batch's offset says: its cut (or null) and, after a restore, the manifest and
   * the restored checkpoint's watermark (ms; null: none).
   */
  static final class Batch {
    final Cut cut;
    final String restoreManifest;
    final Long restoredWatermarkMs;
    final int partitions;

    Batch(Cut cut, String restoreManifest, Long restoredWatermarkMs, int partitions) {
      this.cut = cut;
      this.restoreManifest = restoreManifest;
      this.restoredWatermarkMs = restoredWatermarkMs;
      this.partitions = partitions;
    }
  }

  /** A checkpoint cut at one batch. */
  static final class Cut {
    final long id;
    final String snapshotPath;
    final long epoch;
    final int maxParallelism;
    final int partitions;
    final Long base;
    final String mode;
    final long batchId;
    /** How the key groups changed since the base are found: "writes" or "digest". */
    final String changeDetection;
    /**
     * The cut batch's watermark, ms: Spark's {@code batchWatermarkMs}, or in a restored query
     * the restored checkpoint's if higher (see {@link RestoredWatermark}).
     */
    final long watermarkMs;

    Cut(
        long id,
        String snapshotPath,
        long epoch,
        int maxParallelism,
        int partitions,
        Long base,
        String mode,
        long batchId,
        String changeDetection,
        long watermarkMs) {
      this.id = id;
      this.snapshotPath = snapshotPath;
      this.epoch = epoch;
      this.maxParallelism = maxParallelism;
      this.partitions = partitions;
      this.base = base;
      this.mode = mode;
      this.batchId = batchId;
      this.changeDetection = changeDetection;
      this.watermarkMs = watermarkMs;
    }
  }

  private CutLog() {}

  /**
   * What the offset of batch {@code batchId} of the query at {@code checkpointRoot} says.
   *
   * <p>A batch whose offset holds the same cut as the previous batch's is no cut: Spark
   * runs a no-data batch (a watermark passed, so stateful operators evict) with the
   * previous batch's offsets, which name that batch's cut again. Exporting there would
   * export the checkpoint a second time, after the evictions, and make that store version
   * the next checkpoint's base, so those removals would never reach a checkpoint.
   */
  static Batch read(Configuration conf, Path checkpointRoot, long batchId) {
    String key = checkpointRoot + "#" + batchId;
    Batch cached = CACHE.get(key);
    if (cached == null) {
      Path offsets = new Path(checkpointRoot, "offsets");
      cached = parse(conf, new Path(offsets, Long.toString(batchId)), batchId);
      if (cached.cut != null && batchId > 0) {
        Path previous = new Path(offsets, Long.toString(batchId - 1));
        Cut before = exists(conf, previous) ? parse(conf, previous, batchId - 1).cut : null;
        if (before != null && before.id == cached.cut.id) {
          cached =
              new Batch(null, cached.restoreManifest, cached.restoredWatermarkMs, cached.partitions);
        }
      }
      CACHE.put(key, cached);
    }
    return cached;
  }

  /**
   * The error for an offset log file that cannot be read. Unchecked I/O, not a state error:
   * Spark unwraps it, so a read interrupted by {@code query.stop()} (the rule of {@link
   * RestoredWatermark} reads on the query's thread) ends the query as stopped, not failed.
   */
  private static UncheckedIOException unreadable(Path file, IOException e) {
    return new UncheckedIOException("barriered: cannot read Spark's offset log " + file, e);
  }

  private static boolean exists(Configuration conf, Path file) {
    try {
      return file.getFileSystem(conf).exists(file);
    } catch (IOException e) {
      throw unreadable(file, e);
    }
  }

  private static Batch parse(Configuration conf, Path file, long batchId) {
    String text;
    try {
      FileSystem fs = file.getFileSystem(conf);
      try (InputStream in = fs.open(file)) {
        text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
      }
    } catch (IOException e) {
      throw unreadable(file, e);
    }
    String[] lines = text.split("\n");
    int partitions = -1;
    long watermarkMs = 0;
    JsonNode cutNode = null;
    String manifest = null;
    Long restoredWatermarkMs = null;
    for (int i = 1; i < lines.length; i++) {
      String line = lines[i].trim();
      if (!line.startsWith("{")) {
        continue;
      }
      JsonNode node;
      try {
        node = JSON.readTree(line);
      } catch (IOException e) {
        continue;
      }
      JsonNode confNode = node.path("conf").path("spark.sql.shuffle.partitions");
      if (!confNode.isMissingNode()) {
        partitions = Integer.parseInt(confNode.asText());
        watermarkMs = node.path("batchWatermarkMs").asLong(0);
        continue;
      }
      JsonNode restored = node.path("restore");
      if (node.has("positions") && restored.path("operators_manifest").isTextual()) {
        manifest = restored.path("operators_manifest").asText();
        JsonNode watermark = restored.path("watermark_ms");
        restoredWatermarkMs = watermark.asLong(0) > 0 ? watermark.asLong() : null;
      }
      if (node.has("positions") && node.path("cut").has("snapshot_path")) {
        cutNode = node.path("cut");
      }
    }
    Cut cut = null;
    if (cutNode != null) {
      JsonNode base = cutNode.path("base");
      cut =
          new Cut(
              cutNode.path("id").asLong(),
              cutNode.path("snapshot_path").asText(),
              cutNode.path("epoch").isNull() ? -1 : cutNode.path("epoch").asLong(),
              cutNode.path("max_parallelism").asInt(),
              partitions,
              base.isNumber() ? base.asLong() : null,
              cutNode.path("mode").asText(),
              batchId,
              cutNode.path("change_detection").asText("writes"),
              // a restored query's operators run at the restored watermark at least
              Math.max(watermarkMs, restoredWatermarkMs == null ? 0 : restoredWatermarkMs));
    }
    return new Batch(cut, manifest, restoredWatermarkMs, partitions);
  }
}
