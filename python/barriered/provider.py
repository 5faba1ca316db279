"""The JVM state store provider (``jvm-shim/``): put it on a session builder.

Spark's own stateful operators (aggregations, ``dropDuplicates``, stream-stream joins,
``applyInPandasWithState``, session windows) keep their state in Spark's state store.
The provider :data:`PROVIDER_CLASS` is Spark's RocksDB provider with every store captured
at barriered checkpoint cuts (per key group, into Delta tables under the snapshot path;
see ``statestore/README.md``). Its jar is built from ``jvm-shim/`` at install time and
ships inside the package (``barriered/jars/``). A JVM jar must be on the classpath when
the JVM starts, so the provider is chosen on the session *builder*, before the session
exists: :func:`with_state_store`.

On Databricks, dedicated compute only: upload the jar (:func:`jar_path`) as a cluster
library and set ``spark.sql.streaming.stateStore.providerClass`` to :data:`PROVIDER_CLASS`
in the cluster's Spark config. Serverless and standard access mode allow no custom jars:
there only ``barriered.keyed`` state is captured and a query with a built-in stateful
operator is refused.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from typing import Any

import pyspark

from barriered.errors import ConfigError

log = logging.getLogger(__name__)

#: The provider class, for ``spark.sql.streaming.stateStore.providerClass``.
PROVIDER_CLASS = "io.barriered.shim.BarrieredStateStoreProvider"
#: The session extension (``spark.sql.extensions``) that starts a restored query's
#: stateful operators at the restored checkpoint's watermark.
EXTENSION_CLASS = "io.barriered.shim.RestoredWatermark"
#: The custom metric every captured store reports in the query progress.
CAPTURED_METRIC = "barrieredCapturedStores"
_JAR = Path(__file__).parent / "jars" / "barriered-shim.jar"
_BUILD_PROPERTIES = "io/barriered/shim/build.properties"


def jar_path() -> str:
    """Return the path of the provider's jar inside the installed package.

    Raises
    ------
    barriered.errors.ConfigError
        When the jar was not built (an install without a JDK): the message says how.
    """
    if not _JAR.is_file():
        raise ConfigError(
            f"the barriered state store provider's jar {str(_JAR)!r} is missing: it is built "
            "from jvm-shim/ at install time and needs a JDK 17 (javac). Run "
            "`jvm-shim/build.sh python3` in the source tree (or `make install`), then retry"
        )
    return str(_JAR)


def built_for() -> str:
    """Return the Spark version the jar was compiled against."""
    with zipfile.ZipFile(jar_path()) as jar:
        text = jar.read(_BUILD_PROPERTIES).decode("utf-8")
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "spark.version":
            return value.strip()
    raise ConfigError(f"{jar_path()!r} does not record its Spark version: rebuild it")


def check_version(running: str | None = None) -> None:
    """Refuse a Spark other than the one the jar was compiled against.

    Parameters
    ----------
    running : str, optional
        The Spark version to check (default: the installed pyspark's).

    Raises
    ------
    barriered.errors.ConfigError
        Naming both versions.
    """
    running = running or pyspark.__version__
    built = built_for()
    if built != running:
        raise ConfigError(
            f"the barriered state store provider was compiled against Spark {built}, but "
            f"this is Spark {running}: it uses Spark internals that change between versions. "
            "Rebuild it against this Spark (`jvm-shim/build.sh python3`, or reinstall "
            "spark-barriered) or use Spark " + built
        )


def with_state_store(builder: Any) -> Any:
    """Make a session builder use the barriered state store provider; return it.

    Adds the provider's jar to ``spark.jars`` and its session extension
    (:data:`EXTENSION_CLASS`) to ``spark.sql.extensions``, keeping those already set, and
    sets ``spark.sql.streaming.stateStore.providerClass``. Call it before
    ``getOrCreate()``: a running JVM cannot load them.

    Parameters
    ----------
    builder : SparkSession.Builder
        For example ``SparkSession.builder.master("local[2]")``.

    Returns
    -------
    SparkSession.Builder
        The same builder.

    Raises
    ------
    barriered.errors.ConfigError
        When the jar is missing or was compiled against another Spark version.

    Examples
    --------
    >>> spark = barriered.with_state_store(SparkSession.builder).getOrCreate()  # doctest: +SKIP
    """
    check_version()
    jar = jar_path()
    options = getattr(builder, "_options", {})
    log.info("state store provider %s from %s", PROVIDER_CLASS, jar)
    for key, value in (("spark.jars", jar), ("spark.sql.extensions", EXTENSION_CLASS)):
        values = [v for v in str(options.get(key, "")).split(",") if v]
        builder = builder.config(key, ",".join(values if value in values else [*values, value]))
    return builder.config("spark.sql.streaming.stateStore.providerClass", PROVIDER_CLASS)


def main() -> int:
    """``python -m barriered.provider``: print the jar's path, for a cluster's setup.

    The one line on stdout is the path of the jar inside the installed package (copy it
    to a Volume for a Databricks init script or cluster library); a line on stderr names
    the Spark version it was built for and the conf that chooses the provider. A missing
    jar is an error line and exit code 1.
    """
    import sys

    try:
        jar, built = jar_path(), built_for()
    except ConfigError as exc:
        print(f"barriered: error: {exc}", file=sys.stderr)
        return 1
    print(jar)
    print(
        f"built for Spark {built}; spark.sql.streaming.stateStore.providerClass={PROVIDER_CLASS}"
        f" and spark.sql.extensions={EXTENSION_CLASS}",
        file=sys.stderr,
    )
    return 0


__all__ = [
    "EXTENSION_CLASS",
    "PROVIDER_CLASS",
    "check_version",
    "jar_path",
    "main",
    "with_state_store",
]

if __name__ == "__main__":
    raise SystemExit(main())
