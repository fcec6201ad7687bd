"""How an object store is reached: its clients (obstore for metadata, pyarrow for Parquet), configured
from the settings, and what a failed request says (one line, never a credential)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from compaction_assets import settings
from compaction_assets.errors import StorageError, StoreUnreachableError, first_line

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

CONNECT_TIMEOUT = "5s"
REQUEST_TIMEOUT = "60s"
MAX_RETRIES = 3
RETRY_TIMEOUT = timedelta(seconds=20)


@dataclass
class RequestCounts:
    """Object-store requests made through one Storage (HEAD counts as a GET: it is billed as one)."""

    get: int = 0
    put: int = 0
    list: int = 0
    delete: int = 0

    def total(self) -> int:
        """All requests."""
        return self.get + self.put + self.list + self.delete

    def minus(self, before: RequestCounts) -> RequestCounts:
        """The requests made since `before` (a copy taken earlier)."""
        return RequestCounts(
            self.get - before.get, self.put - before.put, self.list - before.list, self.delete - before.delete
        )

    def copy(self) -> RequestCounts:
        """A snapshot of the counts."""
        return RequestCounts(self.get, self.put, self.list, self.delete)


def open_clients(scheme: str, bucket: str, location: str) -> tuple[Any, pafs.FileSystem]:
    """The obstore store and the pyarrow filesystem of a bucket, configured from the settings."""
    from obstore.store import from_url

    client_options: ClientConfig = {"connect_timeout": CONNECT_TIMEOUT, "timeout": REQUEST_TIMEOUT}
    retry: RetryConfig = {"max_retries": MAX_RETRIES, "retry_timeout": RETRY_TIMEOUT}
    try:
        if scheme == "s3":
            so = settings.current().object_store
            client_options["allow_http"] = so.allow_http
            store = from_url(f"s3://{bucket}", config=_s3_config(so), client_options=client_options, retry_config=retry)
            fs: pafs.FileSystem = pafs.S3FileSystem(
                access_key=so.access_key_id,
                secret_key=so.secret_access_key,
                session_token=so.session_token,
                region=so.region or "us-east-1",
                endpoint_override=so.endpoint_url,
                connect_timeout=5,
                request_timeout=60,
            )
        else:
            store = from_url(f"{scheme}://{bucket}", client_options=client_options, retry_config=retry)
            fs, _ = pafs.FileSystem.from_uri(location)
    except Exception as exc:
        raise store_error(location, exc, "") from None
    return store, fs


def _s3_config(so: settings.ObjectStoreSettings) -> S3Config:
    """obstore's S3 settings: those the settings give (an absent one left to obstore's own defaults)."""
    config: S3Config = {}
    if so.endpoint_url:
        config["endpoint"] = so.endpoint_url
    if so.access_key_id:
        config["access_key_id"] = so.access_key_id
    if so.secret_access_key:
        config["secret_access_key"] = so.secret_access_key
    if so.session_token:
        config["session_token"] = so.session_token
    if so.region:
        config["region"] = so.region
    return config


def store_error(location: str, exc: BaseException, key: str) -> StorageError:
    """The error of a failed request: a StoreUnreachableError when the store did not answer (a later try may
    succeed), else a StorageError; one line either way (`describe_error`)."""
    message = describe_error(location, exc, key)
    # "Error performing": the client's own retries ran out (a reset connection, 5xx answers), in the generic line
    generic = message.startswith(f"store {location}: {type(exc).__name__}")
    unanswered = " cannot reach " in message or (generic and "Error performing" in str(exc))
    return (StoreUnreachableError if unanswered else StorageError)(message)


def describe_error(location: str, exc: BaseException, key: str) -> str:
    """One line naming the store and what went wrong; never the raw response (it may echo request
    details) and never a credential."""
    name = type(exc).__name__
    text = str(exc)
    where = f" (object {key})" if key else ""
    if (
        name in ("PermissionDeniedError", "UnauthenticatedError")
        or "403" in text
        or "AccessDenied" in text
        or "InvalidAccessKeyId" in text
        or "SignatureDoesNotMatch" in text
    ):
        return (
            f"store {location}: access denied{where}; check the credentials "
            f"(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or the cloud's own variables)"
        )
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return f"store {location}: the bucket does not exist"
    if "connect" in text.lower() or "timed out" in text.lower() or "dns" in text.lower():
        endpoint = settings.current().object_store.endpoint_url or "the default endpoint"
        return f"store {location}: cannot reach {endpoint}{where}"
    if "Parquet" in text or "magic" in text.lower() or "footer" in text.lower() or "ArrowInvalid" in name:
        return f"store {location}: object {key or '?'} is not a readable Parquet file (truncated or corrupt)"
    return f"store {location}: {name}{where}: {first_line(exc, 200)}"
