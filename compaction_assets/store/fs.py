"""Storage access for the log store: one interface for local folders and object stores (S3, GCS, Azure).

The commit rule is the same everywhere: whatever must appear once (a manifest version, a lease) is
*created only if absent*, atomically, and the loser learns it lost. On a local filesystem that is a hard
link of a fully written temporary file (atomic, fails if the target exists). On an object store it is a
conditional PUT (`If-None-Match: *` on S3, `ifGenerationMatch=0` on GCS, `If-None-Match: *` on Azure)
through `obstore`; a lease is renewed or taken over with a conditional replace (`If-Match: <etag>`), so
two writers that both saw an expired lease cannot both take it. A refused create or replace reads the
object back: holding exactly the bytes sent, it is this writer's own write whose reply was lost (the
client retried a PUT that had landed), not another writer's.

Object metadata goes through `obstore` (`object_requests`); Parquet data through pyarrow's filesystem for
the same store; a local folder's files through `local_files`. Every request to an object store is counted
(`counts`), so the cost of an operation can be reported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from compaction_assets import settings
from compaction_assets.errors import StorageError
from compaction_assets.store import local_files
from compaction_assets.store.object_clients import RequestCounts, open_clients
from compaction_assets.store.object_requests import ObjectRequests

OBJECT_SCHEMES = ("s3", "gs", "az", "abfs", "abfss")


@dataclass(frozen=True)
class Version:
    """What a conditional replace compares against: an object's e-tag, or a local file's content."""

    token: Any


@dataclass
class Storage:
    """A local folder or an object store's bucket and prefix, with the operations the log store makes on it."""

    root: str  # path as pyarrow sees it: a local absolute path, or "bucket/prefix"
    scheme: str  # "" for local
    fs: pafs.FileSystem
    location: str = ""  # the store as the user named it (for messages)
    bucket: str = ""
    store: Any = None  # the obstore store of the bucket (object stores only)
    counts: RequestCounts | None = None  # an object store's requests (a local folder's operations make none)

    @classmethod
    def open(cls, location: str) -> Storage:
        """A local folder (a path or file://) or an object store (s3://, gs://, az://, abfs://)."""
        location = str(location)
        parsed = urlparse(location)
        if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
            path = parsed.path if parsed.scheme == "file" else location
            return cls(os.path.abspath(path), "", pafs.LocalFileSystem(), location=location)
        if parsed.scheme not in OBJECT_SCHEMES:
            raise StorageError(
                f"store {location}: unsupported scheme {parsed.scheme!r} "
                f"(use a local path or one of {', '.join(s + '://' for s in OBJECT_SCHEMES)})"
            )
        bucket = parsed.netloc
        if not bucket:
            raise StorageError(f"store {location}: no bucket in the URI (expected {parsed.scheme}://BUCKET/PREFIX)")
        root = (bucket + "/" + parsed.path.strip("/")).rstrip("/")
        store, fs = open_clients(parsed.scheme, bucket, location)
        return cls(root, parsed.scheme, fs, location=location, bucket=bucket, store=store, counts=RequestCounts())

    @property
    def local(self) -> bool:
        return self.scheme == ""

    def join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *[p.strip("/") for p in parts if p]])

    def uri(self, path: str) -> str:
        """The full URI of a path of this storage (file:// for local)."""
        return "file://" + path if self.local else f"{self.scheme}://{path}"

    def spark_uri(self, path: str) -> str:
        """The URI Spark's Hadoop filesystems accept for a path of this storage (s3a:// for S3)."""
        if self.local:
            return "file://" + path
        scheme = {"s3": "s3a", "gs": "gs"}.get(self.scheme, self.scheme)
        return f"{scheme}://{path}"

    def filesystem_spec(self) -> tuple[str, str | None, dict[str, Any]]:
        """What a Python worker needs to open this storage's pyarrow filesystem: the driver's S3
        settings travel with the task (Python workers may have been started before they were set);
        without them the workers use their own environment or instance credentials."""
        if self.local:
            return ("local", None, {})
        so = settings.current().object_store
        return (
            self.scheme,
            self.bucket,
            {
                "endpoint_url": so.endpoint_url,
                "region": so.region,
                "access_key": so.access_key_id,
                "secret_key": so.secret_access_key,
                "session_token": so.session_token,
            },
        )

    @property
    def _objects(self) -> ObjectRequests:
        """The requests to this storage's bucket (object stores only), counted in `counts`."""
        if self.counts is None:  # a Storage made without `open`: its requests counted from its first
            self.counts = RequestCounts()
        return ObjectRequests(self.location, self.bucket, self.store, self.counts)

    # --- reads -------------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        if self.local:
            return os.path.exists(path)
        return self._objects.head(path) is not None

    def read_bytes(self, path: str) -> bytes:
        """A whole file; FileNotFoundError when it does not exist."""
        return self.read_versioned(path)[0]

    def read_versioned(self, path: str) -> tuple[bytes, Version]:
        """A whole file and the version a conditional replace compares against."""
        if self.local:
            with open(path, "rb") as fh:
                data = fh.read()
            return data, Version(data)
        data, etag = self._objects.get(path)
        return data, Version(etag)

    def list_dir(self, path: str) -> list[str]:
        """Names (not paths) of the entries of a folder; [] when it does not exist."""
        if self.local:
            try:
                return sorted(os.listdir(path))
            except FileNotFoundError:
                return []
        return self._objects.list_names(path)

    def is_dir(self, path: str) -> bool:
        if self.local:
            return os.path.isdir(path)
        return bool(self.list_dir(path))

    def mtime_ms(self, path: str) -> int | None:
        if self.local:
            return local_files.mtime_ms(path)
        meta = self._objects.head(path)
        return None if meta is None else int(meta["last_modified"].timestamp() * 1000)

    def list_files_recursive(self, path: str) -> list[str]:
        if self.local:
            return local_files.files_under(path)
        return sorted(p for p, _ in self._objects.list_objects(path))

    def list_files_with_mtime(self, path: str) -> list[tuple[str, int]]:
        """Files under a folder with their modification time in ms (one listing on an object store)."""
        if self.local:
            return local_files.files_with_mtime(path)
        return self._objects.list_objects(path)

    def list_files_with_sizes(self, path: str) -> list[tuple[str, int, int]]:
        """Files under a folder with their modification time in ms and their size in bytes (one listing on
        an object store)."""
        if self.local:
            return local_files.files_with_sizes(path)
        return self._objects.list_object_stats(path)

    # --- Parquet -------------------------------------------------------------------------------
    def read_parquet(self, path: str, columns: list[str] | None = None, schema=None):
        """A Parquet file, or a folder of them (a side table's parts), as an Arrow table: its `columns`,
        as `schema` types them when given. A missing, truncated or corrupt object is a StorageError."""
        if self.local:
            if os.path.isdir(path):
                return read_folder(self, path, columns, schema)
            return read_parquet_file(path, columns, schema)
        objects = self._objects
        objects.counts.get += 2  # footer and data (small files: one ranged GET each)
        try:
            try:
                source = self.fs.open_input_file(path)
            except (FileNotFoundError, IsADirectoryError):  # no such object: a folder of parts, or nothing
                return read_folder(self, path, columns, schema)
            with source:
                return read_parquet_file(source, columns, schema)
        except StorageError:
            raise
        except Exception as exc:
            raise objects.fail(exc, path) from None

    def write_parquet(self, path: str, table, **options: Any) -> None:
        """Write an Arrow table as one Parquet file (visible whole or not at all on an object store)."""
        import pyarrow.parquet as pq

        if self.local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            pq.write_table(table, path, **options)
            return
        objects = self._objects
        objects.counts.put += 1
        try:
            pq.write_table(table, path, filesystem=self.fs, **options)
        except Exception as exc:
            raise objects.fail(exc, path) from None

    # --- writes ------------------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        if self.local:
            os.makedirs(path, exist_ok=True)
        # Object stores have no folders: a key's prefix exists once an object is under it.

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write a whole file so that readers see the old content or the new, never a part."""
        if self.local:
            local_files.write_atomic(path, data)
        else:
            self._objects.put(path, data, "overwrite")

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create `path` with `data` unless it exists; True when this call created it."""
        return self.create_versioned(path, data) is not None

    def create_versioned(self, path: str, data: bytes) -> Version | None:
        """Create `path` with `data` unless it exists; its version when this call created it, else None."""
        if self.local:
            return Version(data) if local_files.create_exclusive(path, data) else self._holds_exactly(path, data)
        etag = self._objects.put(path, data, "create")
        return self._holds_exactly(path, data) if etag is None else Version(etag)

    def replace_if_unchanged(self, path: str, data: bytes, expected: Version) -> Version | None:
        """Replace `path` with `data` only if it is still at version `expected`; its new version, or None."""
        if not self.local:
            result = self._objects.put(path, data, {"e_tag": expected.token})
            return self._holds_exactly(path, data) if result is None else Version(result)
        with local_files.holding(path, expected.token) as unchanged:
            if unchanged:
                local_files.write_atomic(path, data)
                return Version(data)
        return self._holds_exactly(path, data)

    def _holds_exactly(self, path: str, data: bytes) -> Version | None:
        """The version of `path` when it holds exactly `data`, else None. A refused conditional write may be
        this writer's own: a PUT that landed but whose reply was lost is retried by the client and then
        refused (exists / e-tag moved). Every body written so names its writer or its commit time, so the same
        bytes are this write's (or one with the very same effect); a failed read-back is a StorageError."""
        try:
            found, version = self.read_versioned(path)
        except FileNotFoundError:
            return None
        return version if found == data else None

    def delete_if_unchanged(self, path: str, expected: Version) -> bool:
        """Delete `path` if it is still at version `expected` (best effort on object stores, whose
        deletes are unconditional: the caller has just read it)."""
        if not self.local:
            self.delete(path)
            return True
        with local_files.holding(path, expected.token) as unchanged:
            if unchanged:
                os.unlink(path)
            return unchanged

    def delete(self, path: str) -> None:
        """Delete a file or a folder tree; a missing path is fine."""
        if self.local:
            local_files.delete(path)
        else:
            self._objects.delete_tree(path)


# Parquet files read whole, or a folder of them, without `pyarrow.dataset`: `pq.read_table` goes through
# `pyarrow.dataset`, whose import pulls in pandas, though no read here needs it. A file is read with
# `pq.ParquetFile`; a folder (a side table's parts, as Spark or the driver wrote them) file by file.


def read_parquet_file(source, columns: list[str] | None = None, schema=None) -> Any:
    """One Parquet file (a path or an open file), or its `columns`, cast to `schema` when given."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(source).read(columns=columns)
    if schema is not None and not table.schema.equals(schema):
        table = table.select(list(schema.names)).cast(schema)
    return table


def read_folder(storage, path: str, columns: list[str] | None, schema) -> Any:
    """The Parquet files of a folder of `storage` (fs.Storage) as one table, in name order, each read as
    `storage.read_parquet` reads a file. Names that start with "." or "_" are a writer's markers and
    checksums, not data. An empty or missing folder goes to pyarrow's dataset reader, which says what it
    says about those."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [n for n in storage.list_dir(path) if not n.startswith((".", "_"))]
    if not names:
        return pq.read_table(path, columns=columns, schema=schema, filesystem=None if storage.local else storage.fs)
    parts = [storage.read_parquet(f"{path}/{n}", columns, schema) for n in names]
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)
