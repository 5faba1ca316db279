package io.barriered.shim;

import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;

/** Refuses to run on a Spark other than the one this jar was compiled against. */
final class SparkVersionCheck {
  static final String RESOURCE = "/io/barriered/shim/build.properties";

  private SparkVersionCheck() {}

  /** The Spark version this jar was compiled against (recorded by the build). */
  static String builtFor() {
    Properties props = new Properties();
    try (InputStream in = SparkVersionCheck.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException("barriered shim jar has no " + RESOURCE + ": rebuild it");
      }
      props.load(in);
    } catch (IOException e) {
      throw new IllegalStateException("cannot read " + RESOURCE, e);
    }
    return props.getProperty("spark.version");
  }

  /** The running Spark's version. */
  static String running() {
    try {
      Object module = Class.forName("org.apache.spark.package$").getField("MODULE$").get(null);
      return (String) module.getClass().getMethod("SPARK_VERSION").invoke(module);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("cannot read the running Spark version", e);
    }
  }

  static void require() {
    String built = builtFor();
    String now = running();
    if (!built.equals(now)) {
      throw new IllegalStateException(
          "barriered state store provider was compiled against Spark "
              + built
              + " but this is Spark "
              + now
              + ": it uses Spark internals (private[sql]) that change between versions. Rebuild the"
              + " jar against this Spark (jvm-shim/build.sh) or use Spark "
              + built);
    }
  }
}
