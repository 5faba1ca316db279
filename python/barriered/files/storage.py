"""Storage settings of object stores: one object for pyarrow, delta-rs and Hadoop.

``snapshotStorageOptions`` (a JSON object of strings, in delta-rs's names such as
``AWS_ENDPOINT_URL`` or ``AZURE_STORAGE_ACCOUNT_KEY``, any case) holds the endpoint,
region, credentials, path-style access and plain-HTTP permission of the store of the
snapshot path. :class:`StorageSettings` turns them into what each client takes: delta-rs's
storage options (:meth:`~StorageSettings.delta_options`), a pyarrow filesystem
(:meth:`~StorageSettings.filesystem`) and the JVM's Hadoop configuration
(:meth:`~StorageSettings.hadoop_conf`, ``fs.s3a.*``).

The settings belong to the path they were given for: a query's snapshot path (and the
paths the same query names in its store: the sink's output table, a restore's savepoint,
an input folder). Each process registers the settings it is handed for those paths
(:func:`register`): the driver and the source's workers from the session keys the source
receives, the sink's workers from the sink's, the keyed operator's workers from the
operator itself. Every file operation under a path then looks them up
(:func:`settings_for`): the settings of the longest registered path that holds it, so
no call site passes credentials around, and one query's endpoint or credentials never
serve another query's path (a query that gives none gets none, not those an earlier
query of the process registered for the same bucket). A path under no registered one
gets its store's settings only when every path registered for that store in this process
has the same ones (one query's input folder, read on an executor); otherwise, and for a
store without registered settings, each client's own defaults (environment variables,
instance profiles). Nothing writes them: :func:`redact_conf` is what
``_coordinator/config.json`` records, and the settings' ``repr`` shows no secret.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from barriered.errors import SnapshotStoreError
from barriered.files.storage_options import is_secret

#: What a secret's value is replaced with in everything written or logged.
REDACTED = "<redacted>"

_S3_SCHEMES = frozenset({"s3", "s3a"})
#: How pyarrow's S3 client retries a failed request (a 5xx answer, a reset connection):
#: 10 attempts with exponential backoff from 25 ms, about 25 s in all.
S3_ATTEMPTS = 10
#: delta-rs's retries (``object_store``'s names), unless the options set them: an
#: outage of the store of up to about half a minute delays a write instead of failing it.
DELTA_RETRIES = {
    "max_retries": "10",
    "retry_timeout": "60s",
    "backoff_config.init_backoff": "200ms",
    "backoff_config.max_backoff": "5s",
}
_AZURE_SCHEMES = frozenset({"abfs", "abfss", "az", "adl"})
_TRUE = frozenset({"true", "1", "yes"})


@dataclass(frozen=True)
class StorageSettings:
    """The settings of one object store, in delta-rs's option names (upper case).

    Parameters
    ----------
    options : Mapping[str, str]
        Options as delta-rs takes them; names in any case, values strings.
    """

    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        normalized = {str(k).upper(): str(v) for k, v in self.options.items()}
        object.__setattr__(self, "options", normalized)

    def __repr__(self) -> str:
        return f"StorageSettings({self.redacted()!r})"

    def _get(self, *names: str) -> str | None:
        return next((self.options[n] for n in names if n in self.options), None)

    # -- what the options say -------------------------------------------------------------

    @property
    def endpoint(self) -> str | None:
        """The S3 endpoint URL (``AWS_ENDPOINT_URL``), or None for AWS's own."""
        return self._get("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_S3_ENDPOINT")

    @property
    def region(self) -> str | None:
        """The S3 region (``AWS_REGION``)."""
        return self._get("AWS_REGION", "AWS_DEFAULT_REGION")

    @property
    def access_key_id(self) -> str | None:
        """``AWS_ACCESS_KEY_ID``."""
        return self._get("AWS_ACCESS_KEY_ID")

    @property
    def secret_access_key(self) -> str | None:
        """``AWS_SECRET_ACCESS_KEY``."""
        return self._get("AWS_SECRET_ACCESS_KEY")

    @property
    def session_token(self) -> str | None:
        """``AWS_SESSION_TOKEN`` of temporary credentials."""
        return self._get("AWS_SESSION_TOKEN", "AWS_TOKEN")

    @property
    def allow_http(self) -> bool:
        """``AWS_ALLOW_HTTP``: plain HTTP to the endpoint (a local server)."""
        return (self._get("AWS_ALLOW_HTTP") or "").lower() in _TRUE

    @property
    def path_style(self) -> bool:
        """Path-style requests (``http://endpoint/bucket/key``): unless
        ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST`` is true, whenever an endpoint is set (as
        S3-compatible servers need), virtual-hosted style on AWS's own endpoint."""
        virtual = self._get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST")
        if virtual is not None:
            return virtual.lower() not in _TRUE
        return self.endpoint is not None

    def redacted(self) -> dict[str, str]:
        """The options with every secret's value replaced by :data:`REDACTED`."""
        return {k: REDACTED if is_secret(k) else v for k, v in sorted(self.options.items())}

    # -- what each client takes -----------------------------------------------------------

    def delta_options(self) -> dict[str, str]:
        """The storage options of delta-rs (``DeltaTable``, ``write_deltalake``), with
        :data:`DELTA_RETRIES` unless they set their own."""
        if not self.options:
            return {}
        named = {
            (k.lower() if k.lower() in DELTA_RETRIES else k): v for k, v in self.options.items()
        }
        return {**DELTA_RETRIES, **named}

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem of ``uri``'s store and the path inside it.

        Raises
        ------
        SnapshotStoreError
            When pyarrow cannot open the store (the message names the URI, never a
            secret).
        """
        parts = urlsplit(uri)
        scheme = parts.scheme.lower()
        try:
            if scheme in _S3_SCHEMES and self.options:
                return _s3(self._frozen()), f"{parts.netloc}{parts.path}".rstrip("/")
            name = self._get("AZURE_STORAGE_ACCOUNT_NAME")
            if scheme in _AZURE_SCHEMES and name:
                key = self._get("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY")
                azure = pafs.AzureFileSystem(account_name=name, account_key=key)
                return azure, f"{parts.netloc.split('@')[0]}{parts.path}".rstrip("/")
            result: tuple[pafs.FileSystem, str] = pafs.FileSystem.from_uri(uri)
            return result
        except (pa.ArrowInvalid, OSError) as exc:
            hint = (
                ""
                if self.options or scheme in ("", "file")
                else " (no storage settings were given for this path, so the client's "
                "defaults, the environment's, were used: set "
                "spark.sql.streaming.barriered.snapshotStorageOptions for the query that "
                "names it; another query's settings never serve it)"
            )
            raise SnapshotStoreError(f"cannot open storage for {uri!r}{hint}: {exc}") from exc

    def hadoop_conf(self, uri: str) -> dict[str, str]:
        """The Hadoop configuration that gives the JVM (the state store provider's
        ``s3a`` or ``abfs`` filesystem) the same store as ``uri``: ``fs.s3a.*`` for
        ``s3://`` and ``s3a://`` (``s3://`` mapped to ``S3AFileSystem``),
        ``fs.azure.account.key.<account>.dfs.core.windows.net`` for Azure,
        ``google.cloud.auth.service.account.json.keyfile`` for GCS."""
        scheme = urlsplit(uri).scheme.lower()
        conf: dict[str, str] = {}
        if scheme in _S3_SCHEMES:
            conf["fs.s3.impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"
            if self.endpoint:
                conf["fs.s3a.endpoint"] = self.endpoint
                conf["fs.s3a.connection.ssl.enabled"] = str(
                    not self.endpoint.startswith("http://")
                ).lower()
            if self.region:
                conf["fs.s3a.endpoint.region"] = self.region
            conf["fs.s3a.path.style.access"] = str(self.path_style).lower()
            if self.access_key_id and self.secret_access_key:
                conf["fs.s3a.access.key"] = self.access_key_id
                conf["fs.s3a.secret.key"] = self.secret_access_key
                provider = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
                if self.session_token:
                    conf["fs.s3a.session.token"] = self.session_token
                    provider = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
                conf["fs.s3a.aws.credentials.provider"] = provider
        elif scheme in _AZURE_SCHEMES:
            name = self._get("AZURE_STORAGE_ACCOUNT_NAME")
            key = self._get("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY")
            if name and key:
                conf[f"fs.azure.account.key.{name}.dfs.core.windows.net"] = key
        elif scheme == "gs":
            keyfile = self._get("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH")
            if keyfile:
                conf["google.cloud.auth.service.account.json.keyfile"] = keyfile
        return conf

    def s3_client(self, uri: str) -> ConditionalS3 | None:
        """A client that can PUT an object only when its key is absent, for ``s3://``
        and ``s3a://`` URIs (None for other stores)."""
        if urlsplit(uri).scheme.lower() not in _S3_SCHEMES:
            return None
        return _conditional_s3(self._frozen())

    def _frozen(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.options.items()))

    def _store_identity(self) -> tuple[tuple[str, str], ...]:
        """The options that say which store and credentials (not how often to retry):
        a layout sent to a worker registers delta-rs's options, retries included."""
        retries = {name.upper() for name in DELTA_RETRIES}
        return tuple(sorted((k, v) for k, v in self.options.items() if k not in retries))


class ConditionalS3:
    """``PutObject`` with ``If-None-Match: *`` through boto3 (pyarrow's S3 client has no
    conditional request), with the settings' endpoint, region, credentials and
    addressing style."""

    def __init__(self, settings: StorageSettings) -> None:
        import boto3
        from botocore.config import Config

        kwargs: dict[str, Any] = {
            "config": Config(
                s3={"addressing_style": "path" if settings.path_style else "virtual"},
                retries={"max_attempts": S3_ATTEMPTS, "mode": "standard"},
            )
        }
        if settings.endpoint:
            kwargs["endpoint_url"] = settings.endpoint
        if settings.region:
            kwargs["region_name"] = settings.region
        if settings.access_key_id and settings.secret_access_key:
            kwargs["aws_access_key_id"] = settings.access_key_id
            kwargs["aws_secret_access_key"] = settings.secret_access_key
            if settings.session_token:
                kwargs["aws_session_token"] = settings.session_token
        self._client = boto3.client("s3", **kwargs)

    def put_if_absent(self, bucket: str, key: str, data: bytes) -> bool:
        """PUT ``data`` unless ``key`` exists; True when this request created it."""
        from botocore.exceptions import ClientError

        try:
            self._client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                return False
            raise OSError(f"S3 PutObject of s3://{bucket}/{key}: {code or exc}") from exc
        return True


@functools.lru_cache(maxsize=16)
def _conditional_s3(options: tuple[tuple[str, str], ...]) -> ConditionalS3:
    return ConditionalS3(StorageSettings(dict(options)))


@functools.lru_cache(maxsize=16)
def _s3(options: tuple[tuple[str, str], ...]) -> pafs.S3FileSystem:
    """One pyarrow S3 filesystem per distinct settings (its connections are reused)."""
    settings = StorageSettings(dict(options))
    kwargs: dict[str, Any] = {}
    if settings.access_key_id and settings.secret_access_key:
        kwargs.update(access_key=settings.access_key_id, secret_key=settings.secret_access_key)
        if settings.session_token:
            kwargs["session_token"] = settings.session_token
    if settings.region:
        kwargs["region"] = settings.region
    if settings.endpoint:
        endpoint = urlsplit(settings.endpoint)
        if endpoint.scheme == "http" and not settings.allow_http:
            raise SnapshotStoreError(
                f"the endpoint {settings.endpoint!r} is plain HTTP: set AWS_ALLOW_HTTP=true "
                "in snapshotStorageOptions to allow it"
            )
        kwargs["endpoint_override"] = endpoint.netloc or settings.endpoint
        kwargs["scheme"] = endpoint.scheme or "https"
    kwargs["force_virtual_addressing"] = not settings.path_style
    kwargs["retry_strategy"] = pafs.AwsDefaultS3RetryStrategy(max_attempts=S3_ATTEMPTS)
    # a file smaller than one part (every JSON file, most snapshot files) is one PUT, not
    # a multipart upload's three requests; a failed open is then reported at close,
    # which every writer here reaches (``with``)
    kwargs["allow_delayed_open"] = True
    return pafs.S3FileSystem(**kwargs)


# -- the settings each process was handed, by path -----------------------------------------

#: Store (``scheme://authority``) -> registered path (no trailing ``/``) -> its settings.
_REGISTERED: dict[str, dict[str, StorageSettings]] = {}
_LOCK = threading.Lock()


def store_of(uri: str) -> str | None:
    """The store ``uri`` is in (``scheme://authority``), or None for a local path."""
    if "://" not in uri:
        return None
    parts = urlsplit(uri)
    return None if parts.scheme.lower() == "file" else f"{parts.scheme.lower()}://{parts.netloc}"


def _path_key(uri: str) -> str:
    return uri.rstrip("/")


def _lookup(paths: Mapping[str, StorageSettings], key: str) -> StorageSettings:
    """The settings of ``key``: those of the longest registered path holding it, else
    the store's when every registered path has the same ones, else none."""
    holding = [p for p in paths if key == p or key.startswith(p + "/")]
    if holding:
        return paths[max(holding, key=len)]
    distinct = {settings._store_identity(): settings for settings in paths.values()}
    return next(iter(distinct.values())) if len(distinct) == 1 else StorageSettings()


def register(uri: str, options: Mapping[str, str] | None) -> StorageSettings:
    """Remember ``options`` as the settings of path ``uri`` (and every path under it) in
    this process, replacing what was registered for it; a value :data:`REDACTED` (read
    back from ``config.json``) keeps the one ``uri`` had. None registers nothing.
    Returns the settings now in force for ``uri``."""
    given = {str(k).upper(): str(v) for k, v in (options or {}).items()}
    store = store_of(uri)
    if store is None:
        return StorageSettings({k: v for k, v in given.items() if v != REDACTED})
    key = _path_key(uri)
    with _LOCK:
        paths = _REGISTERED.setdefault(store, {})
        before = _lookup(paths, key)
        if options is None:
            return before
        kept = {
            k: before.options.get(k, REDACTED) if v == REDACTED else v for k, v in given.items()
        }
        settings = paths[key] = StorageSettings({k: v for k, v in kept.items() if v != REDACTED})
    return settings


def registered(uri: str) -> StorageSettings | None:
    """The settings registered in this process for path ``uri`` or a path holding it
    (None: none, and always for a local path, whose settings are never kept)."""
    store = store_of(uri)
    if store is None:
        return None
    key = _path_key(uri)
    with _LOCK:
        paths = _REGISTERED.get(store, {})
        holding = [p for p in paths if key == p or key.startswith(p + "/")]
        return paths[max(holding, key=len)] if holding else None


def settings_for(uri: str) -> StorageSettings:
    """The settings registered in this process for path ``uri`` (empty: none)."""
    store = store_of(uri)
    if store is None:
        return StorageSettings()
    with _LOCK:
        return _lookup(dict(_REGISTERED.get(store, {})), _path_key(uri))


def delta_options(uri: str, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """delta-rs's storage options for the table at ``uri``: the registered settings of
    its store, overridden by ``given``."""
    return {**settings_for(uri).delta_options(), **{k.upper(): v for k, v in (given or {}).items()}}


def redact_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` (:meth:`BarrieredConf.to_dict`) with the secrets of
    ``snapshot_storage_options`` replaced by :data:`REDACTED`: what ``config.json``
    records."""
    out = dict(conf)
    raw = out.get("snapshot_storage_options")
    if raw:
        options = {k: REDACTED if is_secret(k) else v for k, v in json.loads(raw).items()}
        out["snapshot_storage_options"] = json.dumps(options, sort_keys=True)
    return out


def configure_hadoop(spark: Any, uri: str) -> list[str]:
    """Set the Hadoop configuration of a classic session's JVM to the settings registered
    for ``uri``'s store (:meth:`StorageSettings.hadoop_conf`), so that the JVM state store
    provider and Spark itself reach the same store with the same credentials. The
    SparkContext's Hadoop configuration is copied into each query's (and broadcast to
    the executors) and written to no file. Returns the keys set (none for a local path,
    a store without settings, or a Spark Connect session, whose server has its own)."""
    settings = settings_for(uri)
    jsc = getattr(getattr(spark, "sparkContext", None), "_jsc", None) if settings.options else None
    if jsc is None:
        return []
    hadoop = jsc.hadoopConfiguration()
    conf = settings.hadoop_conf(uri)
    for key, value in conf.items():
        hadoop.set(key, value)
    return sorted(conf)
