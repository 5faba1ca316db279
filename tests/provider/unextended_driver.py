"""A driver of tests/provider/test_provider_watermark.py whose session has the provider
but not its ``RestoredWatermark`` extension.

``python unextended_driver.py TMP CHECKPOINT RESTORE`` starts the windowed count of that
test on ``TMP/snap`` in checkpoint location ``TMP/CHECKPOINT`` (with
``restoreFrom=latest`` when RESTORE is 1) and waits for the query to end. It prints
``FAILED <message>`` (exit code 3) if loading or running it fails, else ``FINISHED``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession
from test_provider_watermark import _start

import barriered
from barriered.provider import PROVIDER_CLASS, jar_path


def main() -> int:
    tmp, checkpoint, restore = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
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
    try:
        _start(spark, tmp, checkpoint, 3, restore).awaitTermination(240)
    except Exception as exc:  # the refusal, as the source or Spark reports it
        print(f"FAILED {type(exc).__name__}: " + str(exc).replace("\n", " "), flush=True)
        return 3
    print("FINISHED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
