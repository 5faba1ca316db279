"""Storage settings belong to the query that gives them, on real Spark and the local S3
server: a query on another path of the same bucket that gives none gets none (issue 36,
case 6: its operator registration landed in the bucket through the endpoint and
credentials an earlier query of the session had configured), and a misspelt storage
option is refused by ``load()`` naming it, before anything is written."""

from __future__ import annotations

import json
from typing import Any

import pytest

import barriered
from barriered.errors import ConfigError
from barriered.examples import RunningTotals
from barriered.files import storage
from barriered.statestore.layout import SnapshotLayout
from runs import PREFIX, SOURCE

pytestmark = [pytest.mark.spark, pytest.mark.s3]


def load(session: Any, snap: str, options: dict[str, str] | None) -> Any:
    reader = session.readStream.format("barriered").options(**SOURCE)
    if options is not None:
        reader = reader.option("snapshotStorageOptions", json.dumps(options))
    return reader.option("snapshotPath", snap).load()


def test_a_query_without_storage_options_never_uses_another_querys(
    session: Any, s3_server: Any
) -> None:
    """The second query reaches the store with the environment's defaults (here: AWS's
    own endpoint, which this machine cannot reach): refused at load(), nothing written,
    instead of writing through the first query's endpoint and credentials."""
    first, second = s3_server.uri("per-path", "first"), s3_server.uri("per-path", "second")
    session.conf.unset(PREFIX + "snapshotStorageOptions")
    barriered.keyed(load(session, first, s3_server.storage_options), "user_id")
    with pytest.raises(Exception) as refused:  # the second query gives no storage options
        barriered.keyed(load(session, second, None), "user_id").process(RunningTotals())
    assert (
        f"cannot open storage for '{second}/_coordinator/config.json' (no storage settings "
        "were given for this path, so the client's defaults, the environment's, were used"
    ) in str(refused.value)
    assert SnapshotLayout.at(second).storage_options == {}
    assert storage.settings_for(first + "/state").endpoint == s3_server.endpoint
    assert s3_server.keys("per-path/") == []
    assert s3_server.secret_key not in str(refused.value)


def test_a_misspelt_storage_option_is_refused_at_load_naming_it(
    session: Any, s3_server: Any
) -> None:
    snap = s3_server.uri("misspelt", "snap")
    options = dict(s3_server.storage_options)
    options["AWS_SECRET_ACESS_KEY"] = options.pop("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ConfigError) as refused:
        barriered.keyed(load(session, snap, options), "user_id").process(RunningTotals())
    assert (
        "snapshotStorageOptions: unknown storage option(s) 'AWS_SECRET_ACESS_KEY' (did you "
        "mean 'AWS_SECRET_ACCESS_KEY'?)"
    ) in str(refused.value)
    assert s3_server.secret_key not in str(refused.value)
    assert s3_server.keys("misspelt/") == []
