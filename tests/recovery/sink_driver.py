"""One Spark driver of tests/recovery/test_sink_recovery.py, run as its own process.

``python sink_driver.py SNAP CHECKPOINT_PARENT OUT KIND MODE`` runs the availableNow query
of ``runs.SOURCE`` through ``barriered.keyed`` (KIND ``append``: ``RecordNumbers`` to
the sink in mode append; ``update``: ``RunningTotals`` merged by ``user_id``) into the
``barriered-delta`` sink at OUT, with the checkpoint settings of ``runs.MODES[MODE]``
(its own local[2] session, 2 shuffle partitions; the environment variable
``BARRIERED_TEST_CONF``, a JSON object, adds session keys; ``BARRIERED_TEST_SOURCE``, a
JSON object, replaces ``runs.SOURCE``'s options). The test arms a blocking fault first
and SIGKILLs this process (the driver) once the fault fired. It prints ``STARTED`` when
the query runs and ``ENDED`` if it ends on its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from runs import MODES, SOURCE, driver_session, run_until_killed, sink_query, start


def main() -> int:
    snap, parent, out, kind, mode = sys.argv[1:6]
    spark = driver_session("sink-driver", json.loads(os.environ.get("BARRIERED_TEST_CONF") or "{}"))
    processor, sink = sink_query(kind, out)
    source = json.loads(os.environ.get("BARRIERED_TEST_SOURCE") or "null") or SOURCE
    query = start(spark, Path(parent), MODES[mode], source, snap, "ck-crashed", processor, sink)
    return run_until_killed(query)


if __name__ == "__main__":
    sys.exit(main())
