package io.barriered.shim;

import java.io.IOException;
import java.io.InputStream;
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
 * ({@code "restore": {"operators_manifest": ...}}).
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

  /** What one batch's offset says: its cut (or null) and, after a restore, the manifest. */
  static final class Batch {
    final Cut cut;
    final String restoreManifest;
    final int partitions;

    Batch(Cut cut, String restoreManifest, int partitions) {
      this.cut = cut;
      this.restoreManifest = restoreManifest;
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

    Cut(
        long id,
        String snapshotPath,
        long epoch,
        int maxParallelism,
        int partitions,
        Long base,
        String mode,
        long batchId) {
      this.id = id;
      this.snapshotPath = snapshotPath;
      this.epoch = epoch;
      this.maxParallelism = maxParallelism;
      this.partitions = partitions;
      this.base = base;
      this.mode = mode;
      this.batchId = batchId;
    }
  }

  private CutLog() {}

  /** What the offset of batch {@code batchId} of the query at {@code checkpointRoot} says. */
  static Batch read(Configuration conf, Path checkpointRoot, long batchId) {
    String key = checkpointRoot + "#" + batchId;
    Batch cached = CACHE.get(key);
    if (cached == null) {
      Path file = new Path(new Path(checkpointRoot, "offsets"), Long.toString(batchId));
      cached = parse(conf, file, batchId);
      CACHE.put(key, cached);
    }
    return cached;
  }

  private static Batch parse(Configuration conf, Path file, long batchId) {
    String text;
    try {
      FileSystem fs = file.getFileSystem(conf);
      try (InputStream in = fs.open(file)) {
        text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
      }
    } catch (IOException e) {
      throw new IllegalStateException(
          "barriered: cannot read Spark's offset log " + file + " of batch " + batchId, e);
    }
    String[] lines = text.split("\n");
    int partitions = -1;
    Cut found = null;
    String manifest = null;
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
        continue;
      }
      JsonNode restored = node.path("restore").path("operators_manifest");
      if (node.has("positions") && restored.isTextual()) {
        manifest = restored.asText();
      }
      JsonNode cut = node.path("cut");
      if (node.has("positions") && cut.isObject() && cut.has("snapshot_path")) {
        JsonNode base = cut.path("base");
        found =
            new Cut(
                cut.path("id").asLong(),
                cut.path("snapshot_path").asText(),
                cut.path("epoch").isNull() ? -1 : cut.path("epoch").asLong(),
                cut.path("max_parallelism").asInt(),
                -1,
                base.isNumber() ? base.asLong() : null,
                cut.path("mode").asText(),
                batchId);
      }
    }
    Cut cut =
        found == null
            ? null
            : new Cut(
                found.id,
                found.snapshotPath,
                found.epoch,
                found.maxParallelism,
                partitions,
                found.base,
                found.mode,
                batchId);
    return new Batch(cut, manifest, partitions);
  }
}
