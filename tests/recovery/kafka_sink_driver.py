"""One Spark driver of tests/recovery/test_kafka_sink_recovery.py, run as its own process.

``python kafka_sink_driver.py SNAP CHECKPOINT_PARENT BOOTSTRAP TOPIC KIND MODE`` runs the
availableNow query of ``runs.SOURCE`` through ``barriered.keyed`` (KIND ``append`` or
``update``, :mod:`kafka_sink_runs`) into the ``barriered-kafka`` sink publishing to
TOPIC, with the checkpoint settings of ``runs.MODES[MODE]`` (its own local[2] session, 2
shuffle partitions). The test arms a blocking fault first and SIGKILLs this process once
the fault fired (or releases it: a zombie). Prints ``STARTED`` and ``ENDED``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kafka_sink_runs import FORMAT, as_records, kafka_query
from runs import MODES, SOURCE, driver_session, run_until_killed, start


def main() -> int:
    snap, parent, bootstrap, topic, kind, mode = sys.argv[1:7]
    spark = driver_session("kafka-sink-driver")
    processor, sink = kafka_query(kind, bootstrap, topic)
    query = start(
        spark,
        Path(parent),
        MODES[mode],
        SOURCE,
        snap,
        "ck-crashed",
        processor,
        sink,
        sink_format=FORMAT,
        output=as_records,
    )
    return run_until_killed(query)


if __name__ == "__main__":
    sys.exit(main())
