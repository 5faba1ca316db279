"""A driver of tests/provider/test_provider_watermark.py whose session has the provider
but not its ``RestoredWatermark`` extension.

``python unextended_driver.py TMP`` restores the windowed count of that test from
``TMP/snap`` into the checkpoint location ``TMP/ck-unextended`` and waits for the query
to end. It prints ``FAILED <message>`` (exit code 3) if the query fails, else
``FINISHED`` (exit code 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession
from test_provider_watermark import _start

import barriered
from barriered.provider import PROVIDER_CLASS, jar_path


def main() -> int:
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.jars", jar_path())
        .config("spark.sql.streaming.stateStore.providerClass", PROVIDER_CLASS)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    barriered.install(spark)
    query = _start(spark, Path(sys.argv[1]), "ck-unextended", 3, restore=True)
    try:
        query.awaitTermination(240)
    except Exception as exc:  # the refusal, as Spark reports it
        print("FAILED " + str(exc).replace("\n", " "), flush=True)
        return 3
    print("FINISHED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
