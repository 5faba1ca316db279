"""The storage options a store's clients take, and which of them are secrets.

``snapshotStorageOptions`` uses delta-rs's names (object_store's keys): a name no client
takes, such as a misspelt secret key, would be ignored by every client (an "S3 error"
later, the credentials silently those of the environment), so it is refused
(:func:`check_option_names`); a secret's value is never written or logged
(:func:`is_secret`).
"""

from __future__ import annotations

from collections.abc import Mapping

from barriered.errors import ConfigError
from barriered.spelling import closest

#: Parts of an option's name that make its value a secret (credentials, keys, tokens).
_SECRET_PARTS = ("SECRET", "TOKEN", "PASSWORD", "SAS", "_KEY")

#: Every option name the stores' clients take (object_store's keys, with and without
#: their store's prefix, and delta-rs's own), upper case: a name not among them, such as
#: a misspelt secret key, would be ignored by every client (an "S3 error" later, the
#: credentials silently those of the environment), so it is refused.
_CLIENT_NAMES = [
    "ALLOW_HTTP",
    "ALLOW_INVALID_CERTIFICATES",
    "CONNECT_TIMEOUT",
    "DEFAULT_CONTENT_TYPE",
    "HTTP1_ONLY",
    "HTTP2_ONLY",
    "HTTP2_KEEP_ALIVE_INTERVAL",
    "HTTP2_KEEP_ALIVE_TIMEOUT",
    "HTTP2_KEEP_ALIVE_WHILE_IDLE",
    "HTTP2_MAX_FRAME_SIZE",
    "POOL_IDLE_TIMEOUT",
    "POOL_MAX_IDLE_PER_HOST",
    "PROXY_URL",
    "PROXY_CA_CERTIFICATE",
    "PROXY_EXCLUDES",
    "RANDOMIZE_ADDRESSES",
    "TIMEOUT",
    "USER_AGENT",
    "SKIP_SIGNATURE",
    "DISABLE_TAGGING",
]
_AWS_NAMES = [
    "ACCESS_KEY_ID",
    "SECRET_ACCESS_KEY",
    "DEFAULT_REGION",
    "REGION",
    "BUCKET",
    "BUCKET_NAME",
    "ENDPOINT",
    "ENDPOINT_URL",
    "S3_ENDPOINT",
    "SESSION_TOKEN",
    "TOKEN",
    "VIRTUAL_HOSTED_STYLE_REQUEST",
    "S3_EXPRESS",
    "IMDSV1_FALLBACK",
    "METADATA_ENDPOINT",
    "UNSIGNED_PAYLOAD",
    "CHECKSUM_ALGORITHM",
    "CONTAINER_CREDENTIALS_RELATIVE_URI",
    "CONTAINER_CREDENTIALS_FULL_URI",
    "CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "COPY_IF_NOT_EXISTS",
    "CONDITIONAL_PUT",
    "SERVER_SIDE_ENCRYPTION",
    "SSE_KMS_KEY_ID",
    "SSE_BUCKET_KEY_ENABLED",
    "SSE_CUSTOMER_KEY_BASE64",
    "REQUEST_PAYER",
    "S3_LOCKING_PROVIDER",
    "S3_ALLOW_UNSAFE_RENAME",
    "FORCE_CREDENTIAL_LOAD",
    "S3_ASSUME_ROLE_ARN",
    "IAM_ROLE_ARN",
    "ROLE_ARN",
    "S3_ROLE_SESSION_NAME",
    "IAM_ROLE_SESSION_NAME",
    "ROLE_SESSION_NAME",
    "PROFILE",
    "WEB_IDENTITY_TOKEN_FILE",
    "S3_POOL_IDLE_TIMEOUT_SECONDS",
    "STS_POOL_IDLE_TIMEOUT_SECONDS",
    "S3_GET_INTERNAL_SERVER_ERROR_RETRIES",
    "EC2_METADATA_DISABLED",
    "EC2_METADATA_TIMEOUT",
    "REQUEST_CHECKSUM_CALCULATION",
    "SSO_ENDPOINT",
    "CONFIG_FILE",
    "SHARED_CREDENTIALS_FILE",
    "ENDPOINT_URL_DYNAMODB",
    "ENDPOINT_URL_STS",
]
_AZURE_NAMES = [
    "STORAGE_ACCOUNT_NAME",
    "STORAGE_ACCOUNT_KEY",
    "STORAGE_ACCESS_KEY",
    "STORAGE_MASTER_KEY",
    "STORAGE_CLIENT_ID",
    "CLIENT_ID",
    "STORAGE_CLIENT_SECRET",
    "CLIENT_SECRET",
    "STORAGE_TENANT_ID",
    "TENANT_ID",
    "STORAGE_AUTHORITY_ID",
    "AUTHORITY_ID",
    "STORAGE_AUTHORITY_HOST",
    "AUTHORITY_HOST",
    "STORAGE_SAS_KEY",
    "STORAGE_SAS_TOKEN",
    "STORAGE_TOKEN",
    "STORAGE_USE_EMULATOR",
    "STORAGE_ENDPOINT",
    "ENDPOINT",
    "MSI_ENDPOINT",
    "IDENTITY_ENDPOINT",
    "OBJECT_ID",
    "MSI_RESOURCE_ID",
    "FEDERATED_TOKEN_FILE",
    "USE_FABRIC_ENDPOINT",
    "USE_AZURE_CLI",
    "CONTAINER_NAME",
    "FABRIC_TOKEN_SERVICE_URL",
    "FABRIC_WORKLOAD_HOST",
    "FABRIC_SESSION_TOKEN",
    "FABRIC_CLUSTER_IDENTIFIER",
]
_GOOGLE_NAMES = [
    "SERVICE_ACCOUNT",
    "SERVICE_ACCOUNT_PATH",
    "SERVICE_ACCOUNT_KEY",
    "BUCKET",
    "BUCKET_NAME",
    "APPLICATION_CREDENTIALS",
    "EXTERNAL_ACCOUNT_AUDIENCE",
]
_OTHER_NAMES = [
    "MAX_RETRIES",
    "RETRY_TIMEOUT",
    "BACKOFF_CONFIG.INIT_BACKOFF",
    "BACKOFF_CONFIG.MAX_BACKOFF",
    "BACKOFF_CONFIG.BASE",
    "DELTA_DYNAMO_TABLE_NAME",
    "MOUNT_ALLOW_UNSAFE_RENAME",
    "ACCOUNT_NAME",
    "ACCOUNT_KEY",
    "ACCESS_KEY",
    "MASTER_KEY",
    "SAS_KEY",
    "SAS_TOKEN",
    "BEARER_TOKEN",
    "USE_EMULATOR",
]
STORAGE_OPTION_NAMES: frozenset[str] = frozenset(
    [
        *_CLIENT_NAMES,
        *_OTHER_NAMES,
        *(f"{prefix}_{name}" for prefix in ("AWS", "AZURE", "GOOGLE") for name in _CLIENT_NAMES),
        *(f"AWS_{name}" for name in _AWS_NAMES),
        *(f"AZURE_{name}" for name in _AZURE_NAMES),
        *(f"GOOGLE_{name}" for name in _GOOGLE_NAMES),
        *_AWS_NAMES,
        *_AZURE_NAMES,
        *_GOOGLE_NAMES,
    ]
)


def check_option_names(options: Mapping[str, str], where: str) -> None:
    """Refuse storage options whose names no store client takes (a misspelt one).

    Parameters
    ----------
    options : Mapping[str, str]
        The options (names in any case); values are never shown.
    where : str
        The setting they were given as, for the message.

    Raises
    ------
    ConfigError
        Naming each unknown option, with the closest known name.
    """

    unknown = sorted(name for name in options if str(name).upper() not in STORAGE_OPTION_NAMES)
    if not unknown:
        return
    hints = []
    for name in unknown:
        match = closest(str(name).upper(), STORAGE_OPTION_NAMES)
        hints.append(f"{name!r}" + (f" (did you mean {match!r}?)" if match else ""))
    raise ConfigError(
        f"{where}: unknown storage option(s) {', '.join(hints)}: no client of the store "
        "takes them, so they would be ignored (a misspelt credential would leave the "
        "environment's in force). Use the names of delta-rs's storage options "
        "(AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        "AZURE_STORAGE_ACCOUNT_KEY, GOOGLE_SERVICE_ACCOUNT, ...); nothing was written"
    )


def is_secret(name: str) -> bool:
    """Whether the option ``name``'s value is a secret (``AWS_SECRET_ACCESS_KEY``,
    ``AWS_SESSION_TOKEN``, ``AZURE_STORAGE_ACCOUNT_KEY``, ``GOOGLE_SERVICE_ACCOUNT_KEY``;
    not ``AWS_ACCESS_KEY_ID``, which names the key)."""
    upper = name.upper()
    return any(part in upper for part in _SECRET_PARTS) and not upper.endswith("_ID")
