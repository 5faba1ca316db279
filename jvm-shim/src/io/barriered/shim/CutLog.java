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
 * provider). The metadata line holds the query's {@code spark.sql.shuffle.partitions}.
 */
final class CutLog {
  static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, Cut> CACHE =
      java.util.Collections.synchronizedMap(
          new LinkedHashMap<String, Cut>(16, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, Cut> eldest) {
              return size() > 64;
            }
          });
  private static final Cut NONE = new Cut(-1, null, -1, -1, -1, null, null, -1);

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

  /** The cut of batch {@code batchId} of the query at {@code checkpointRoot}, or null. */
  static Cut read(Configuration conf, Path checkpointRoot, long batchId) {
    String key = checkpointRoot + "#" + batchId;
    Cut cached = CACHE.get(key);
    if (cached == null) {
      cached = parse(conf, new Path(new Path(checkpointRoot, "offsets"), Long.toString(batchId)), batchId);
      CACHE.put(key, cached);
    }
    return cached == NONE ? null : cached;
  }

  private static Cut parse(Configuration conf, Path file, long batchId) {
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
    Cut found = NONE;
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
    if (found == NONE) {
      return NONE;
    }
    return new Cut(
        found.id,
        found.snapshotPath,
        found.epoch,
        found.maxParallelism,
        partitions,
        found.base,
        found.mode,
        batchId);
  }
}
