"""One way to pass storage settings (``barriered.files.storage``): what each client
gets from ``snapshotStorageOptions``, what is written (no secret), and the snapshot-path
files and Delta tables on the local S3 server (``tests/s3_server.py``) through them."""

from __future__ import annotations

import json
import logging
import pickle

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from barriered.config import BarrieredConf, resolve
from barriered.errors import ConfigError, SnapshotStoreError
from barriered.files import storage, storage_options
from barriered.files.fileio import (
    delete_tree,
    exists,
    filesystem,
    list_names,
    read_json,
    write_atomic,
    write_json,
)
from barriered.files.storage import REDACTED, StorageSettings
from barriered.statestore.delta_tables import append_rows, open_table
from barriered.statestore.layout import SnapshotLayout
from s3_server import S3Server

S3 = {
    "aws_endpoint_url": "http://127.0.0.1:9000",
    "AWS_REGION": "eu-west-1",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "very-secret",
    "AWS_SESSION_TOKEN": "token-secret",
    "AWS_ALLOW_HTTP": "true",
}


@pytest.fixture(autouse=True)
def _no_registered_settings() -> None:
    storage._REGISTERED.clear()


def test_s3_settings_reach_delta_rs_pyarrow_and_hadoop() -> None:
    settings = StorageSettings(S3)
    assert settings.endpoint == "http://127.0.0.1:9000"
    assert (settings.region, settings.access_key_id) == ("eu-west-1", "AKIAEXAMPLE")
    assert settings.allow_http and settings.path_style  # a custom endpoint: path style
    assert settings.delta_options()["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert settings.hadoop_conf("s3://bucket/snap") == {
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3a.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.endpoint.region": "eu-west-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.access.key": "AKIAEXAMPLE",
        "fs.s3a.secret.key": "very-secret",
        "fs.s3a.session.token": "token-secret",
        "fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
        ),
    }
    fs, path = settings.filesystem("s3://bucket/snap/_coordinator/config.json")
    assert isinstance(fs, pafs.S3FileSystem)
    assert path == "bucket/snap/_coordinator/config.json"
    assert fs.region == "eu-west-1"
    # AWS itself: virtual-hosted requests, no endpoint
    aws = StorageSettings({"AWS_REGION": "us-east-1"})
    assert not aws.path_style
    assert aws.hadoop_conf("s3a://b/p")["fs.s3a.path.style.access"] == "false"
    virtual = StorageSettings({**S3, "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"})
    assert not virtual.path_style


def test_azure_and_gcs_keys_map_to_hadoop() -> None:
    azure = StorageSettings(
        {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "azure-secret"}
    )
    assert azure.hadoop_conf("abfss://c@acct.dfs.core.windows.net/snap") == {
        "fs.azure.account.key.acct.dfs.core.windows.net": "azure-secret"
    }
    gcs = StorageSettings({"GOOGLE_SERVICE_ACCOUNT": "/keys/sa.json"})
    assert gcs.hadoop_conf("gs://b/snap") == {
        "google.cloud.auth.service.account.json.keyfile": "/keys/sa.json"
    }
    assert StorageSettings(S3).hadoop_conf("/local/snap") == {}


def test_secrets_are_redacted_in_what_is_written_and_in_repr() -> None:
    names = ["AWS_SECRET_ACCESS_KEY", "aws_session_token", "AZURE_STORAGE_ACCOUNT_KEY"]
    names += ["AZURE_STORAGE_SAS_KEY", "GOOGLE_SERVICE_ACCOUNT_KEY", "AZURE_CLIENT_SECRET"]
    assert all(storage_options.is_secret(n) for n in names)
    assert not any(storage_options.is_secret(n) for n in ["AWS_ACCESS_KEY_ID", "AWS_REGION"])
    settings = StorageSettings(S3)
    assert "very-secret" not in repr(settings) and "token-secret" not in repr(settings)
    assert settings.redacted()["AWS_SECRET_ACCESS_KEY"] == REDACTED
    assert settings.redacted()["AWS_ACCESS_KEY_ID"] == "AKIAEXAMPLE"
    conf = resolve({}, {"snapshotPath": "s3://b/snap", "snapshotStorageOptions": json.dumps(S3)})
    written = storage.redact_conf(conf.to_dict())
    assert "very-secret" not in json.dumps(written) and "token-secret" not in json.dumps(written)
    recorded = BarrieredConf(**written).storage_options  # config.json reads back valid
    assert recorded["aws_endpoint_url"] == "http://127.0.0.1:9000"
    assert recorded["AWS_SECRET_ACCESS_KEY"] == REDACTED
    layout = SnapshotLayout.at("s3://b/snap", conf.storage_options)
    assert "very-secret" not in repr(layout)


def test_a_bad_storage_setting_is_refused_without_showing_it() -> None:
    for bad in ('{"AWS_SECRET_ACCESS_KEY": "very-secret"', '{"AWS_SECRET_ACCESS_KEY": 1}'):
        with pytest.raises(ConfigError, match="snapshotStorageOptions") as caught:
            resolve({"spark.sql.streaming.barriered.snapshotStorageOptions": bad})
        assert "very-secret" not in str(caught.value) and "not shown" in str(caught.value)


def test_each_path_keeps_the_settings_registered_for_it() -> None:
    storage._REGISTERED.clear()
    assert storage.store_of("s3://b/snap/x") == "s3://b"
    assert storage.store_of("/tmp/x") is None and storage.store_of("file:///tmp/x") is None
    storage.register("s3://b/snap", {**S3, "AWS_REGION": "eu-west-1"})
    # what config.json reads back (secrets redacted) never replaces the registered secret
    storage.register("s3://b/snap", {**S3, "AWS_SECRET_ACCESS_KEY": REDACTED, "AWS_REGION": "x"})
    found = storage.settings_for("s3://b/snap/state/part-0.parquet")
    assert found.secret_access_key == "very-secret" and found.region == "x"
    # the only settings this process has for the bucket: its other paths (an input folder
    # read on an executor) get them
    assert storage.settings_for("s3://b/out/table").secret_access_key == "very-secret"
    assert storage.settings_for("s3://other/snap").options == {}
    assert storage.delta_options("s3://b/t", {"aws_region": "y"})["AWS_REGION"] == "y"
    layout = SnapshotLayout.at("s3://b/snap")  # no options given: the registered ones
    assert layout.storage_options["AWS_SECRET_ACCESS_KEY"] == "very-secret"
    # a layout sent to a Python worker registers them there (as in a new process)
    sent = pickle.dumps(layout)
    storage._REGISTERED.clear()
    assert pickle.loads(sent) == layout
    assert storage.settings_for("s3://b/snap/x").secret_access_key == "very-secret"


def test_one_querys_settings_never_serve_another_querys_path() -> None:
    """Issue 36, case 6: a query on ``s3://b/second`` without storage options wrote
    through the endpoint and credentials an earlier query of the process had registered
    for ``s3://b/first`` (settings were kept per bucket)."""
    storage._REGISTERED.clear()
    SnapshotLayout.at("s3://b/first", S3)
    second = SnapshotLayout.at("s3://b/second", {})  # the second query gives none
    assert second.storage_options == {}
    assert storage.settings_for("s3://b/second/_coordinator/config.json").options == {}
    assert storage.settings_for("s3://b/first/state").secret_access_key == "very-secret"
    # a path neither query named, in a bucket two queries registered differently: none
    assert storage.settings_for("s3://b/elsewhere").options == {}
    # a query giving other settings for a path replaces them there, and only there
    storage.register("s3://b/first", {"AWS_REGION": "us-east-2"})
    assert storage.settings_for("s3://b/first/x").options == {"AWS_REGION": "us-east-2"}
    assert storage.registered("s3://b/first/x") is not None
    assert storage.registered("s3://b/third") is None


def test_misspelt_storage_options_are_refused_naming_them_not_their_values() -> None:
    """Issue 36: a misspelt secret-key option was accepted and ended in "Generic S3
    error"; a misspelt option name is now refused where the options are given."""
    options = {**S3, "AWS_SECRET_ACESS_KEY": "very-secret", "aws_regoin": "x"}
    with pytest.raises(ConfigError) as caught:
        resolve({}, {"snapshotPath": "s3://b/s", "snapshotStorageOptions": json.dumps(options)})
    assert str(caught.value).startswith(
        "spark.sql.streaming.barriered.snapshotStorageOptions: unknown storage option(s) "
        "'AWS_SECRET_ACESS_KEY' (did you mean 'AWS_SECRET_ACCESS_KEY'?), 'aws_regoin' (did "
        "you mean 'AWS_REGION'?): no client of the store takes them"
    )
    assert "very-secret" not in str(caught.value)
    for known in ("AWS_S3_ALLOW_UNSAFE_RENAME", "max_retries", "azure_storage_sas_token"):
        storage_options.check_option_names({known: "x"}, "here")  # delta-rs's own names pass


def test_plain_http_needs_allow_http() -> None:
    settings = StorageSettings({k: v for k, v in S3.items() if k != "AWS_ALLOW_HTTP"})
    with pytest.raises(SnapshotStoreError, match="AWS_ALLOW_HTTP=true") as caught:
        settings.filesystem("s3://bucket/snap")
    assert "very-secret" not in str(caught.value)


@pytest.mark.s3
def test_snapshot_path_files_and_tables_on_the_s3_server(
    s3_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    """The handshake files (write, read, list, delete) and a Delta table under an
    ``s3://`` snapshot path, through the settings registered for the bucket: the objects
    are in the bucket, and no log line holds the secret key."""
    caplog.set_level(logging.DEBUG)
    root = s3_server.uri("unit-storage")
    layout = SnapshotLayout.at(root, s3_server.storage_options)
    assert isinstance(filesystem(root)[0], pafs.S3FileSystem)
    write_json(layout.operator_file("op"), {"operator": "op"})
    write_atomic(layout.control_file, b'{"requests":[]}')
    assert read_json(layout.operator_file("op")) == {"operator": "op"}
    assert read_json(layout.operator_file("none"), default=7) == 7
    assert list_names(layout.operators_dir) == ["op.json"]
    assert exists(layout.control_file)
    append_rows(layout.owners_table, [{"epoch": 1}], pa.schema([("epoch", pa.int64())]))
    table = open_table(layout.owners_table)  # the registered options, none given
    assert table is not None and table.to_pyarrow_table().to_pylist() == [{"epoch": 1}]
    keys = s3_server.keys("unit-storage/")
    assert "unit-storage/_coordinator/operators/op.json" in keys
    assert "unit-storage/_coordinator/control.json" in keys
    assert "unit-storage/_owners/_delta_log/00000000000000000000.json" in keys
    assert not [k for k in keys if k.rsplit("/", 1)[-1].startswith(".")]  # no temporary
    delete_tree(root)
    assert s3_server.keys("unit-storage/") == []
    assert s3_server.secret_key not in caplog.text


def test_a_path_no_query_named_gets_the_one_query_s_settings_retries_aside() -> None:
    """On an executor the snapshot path is registered twice, by the pickled layout
    (delta-rs's options, with the retries) and by the keyed operator (the options as
    given): the same store and credentials, so the input folder in that bucket, which
    no query registered there, gets them."""
    storage._REGISTERED.clear()
    layout = SnapshotLayout.at("s3://b/snap", S3)
    pickle.loads(pickle.dumps(layout))
    storage.register("s3://b/snap/sub", S3)
    assert storage.settings_for("s3://b/events/a/part-0.json").secret_access_key == "very-secret"
