"""No checkpoint stays pending without bound, on real Spark.

A checkpoint whose participants cannot all acknowledge (here: the keyed operator's
registration edited under the running query to twice its key groups, a registration that
no longer matches the operator) is aborted with what it waited for in ``_checkpoints``,
and an ``availableNow`` run whose last checkpoint did not complete fails naming that
reason instead of ending as if it had (issue 36: the run ended without an error, its
checkpoints pending forever and its output never committed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.listener import StreamingQueryListener

from barriered.statestore import checkpoints_table
from barriered.statestore.layout import SnapshotLayout
from runs import MODES, start

pytestmark = pytest.mark.spark


class EditRegistration(StreamingQueryListener):
    """At the query's first progress (after barriered's listener registered the operator),
    make the registration claim twice the key groups the operator runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done = False

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        if not self.done and self.path.exists():
            registration = json.loads(self.path.read_text())
            registration["max_parallelism"] *= 2
            self.path.write_text(json.dumps(registration))
            self.done = True

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def test_an_available_now_run_whose_last_checkpoint_cannot_complete_fails_naming_why(
    session: Any, tmp_path: Path
) -> None:
    snap = tmp_path / "snap"
    editor = EditRegistration(snap / "_coordinator" / "operators" / "running_totals.json")
    session.streams.addListener(editor)
    try:
        query = start(session, tmp_path, {**MODES["aligned"], "tolerableCheckpointFailures": "5"})
        with pytest.raises(StreamingQueryException) as error:
            query.awaitTermination(180)
    finally:
        session.streams.removeListener(editor)
    assert editor.done
    message = str(error.value)
    found = re.search(
        r"CheckpointError: checkpoint (\d+), the last of this availableNow run on snapshot "
        r"path '([^']+)', was aborted: (the final checkpoint of an availableNow run: its cut "
        r"batch \d+ ended with 8/16 acknowledgements, missing keyed operator 'running_totals' "
        r"key group\(s\) 8-15, and no later batch can bring them)\. What the run read after ",
        message,
    )
    assert found is not None, message
    assert "the run fails instead of ending" in message
    last, reason = int(found.group(1)), found.group(3)
    rows = {
        r["checkpoint_id"]: r for r in checkpoints_table.read_rows(SnapshotLayout.at(str(snap)))
    }
    assert rows[last]["status"] == "aborted" and rows[last]["failure_reason"] == reason
    # the checkpoints it left behind are aborted too, none is left pending
    assert all(r["status"] in ("completed", "aborted") for r in rows.values())
