"""Storage access for the log store: one interface for local folders and object stores (S3, GCS, Azure).

The commit rule is the same everywhere: whatever must appear once (a manifest version, a lease) is
*created only if absent*, atomically, and the loser learns it lost. On a local filesystem that is a hard
link of a fully written temporary file (atomic, fails if the target exists). On an object store it is a
conditional PUT (`If-None-Match: *` on S3, `ifGenerationMatch=0` on GCS, `If-None-Match: *` on Azure)
through `obstore`; a lease is renewed or taken over with a conditional replace (`If-Match: <etag>`), so
two writers that both saw an expired lease cannot both take it. A refused create or replace reads the
object back: holding exactly the bytes sent, it is this writer's own write whose reply was lost (the
client retried a PUT that had landed), not another writer's.

Object metadata goes through `obstore`; Parquet data through pyarrow's filesystem for the same store.
Every request to an object store is counted (`counts`), so the cost of an operation can be reported.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from compaction_assets import settings
from compaction_assets.errors import StorageError
from compaction_assets.store.object_clients import RequestCounts, describe_error, open_clients
from compaction_assets.store.parquet_files import read_folder, read_parquet_file

OBJECT_SCHEMES = ("s3", "gs", "az", "abfs", "abfss")


@dataclass(frozen=True)
class Version:
    """What a conditional replace compares against: an object's e-tag, or a local file's content."""

    token: Any


@dataclass
class Storage:
    root: str  # path as pyarrow sees it: a local absolute path, or "bucket/prefix"
    scheme: str  # "" for local
    fs: pafs.FileSystem
    location: str = ""  # the store as the user named it (for messages)
    bucket: str = ""
    store: Any = None  # the obstore store of the bucket (object stores only)
    counts: RequestCounts = field(default_factory=RequestCounts)

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
        return cls(root, parsed.scheme, fs, location=location, bucket=bucket, store=store)

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

    def _key(self, path: str) -> str:
        if not (path == self.bucket or path.startswith(self.bucket + "/")):
            raise StorageError(f"store {self.location}: path {path!r} is outside bucket {self.bucket!r}")
        return path[len(self.bucket) + 1 :]

    def _fail(self, exc: BaseException, path: str) -> StorageError:
        return StorageError(describe_error(self.location, exc, self._key(path) if path else ""))

    # --- reads -------------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        if self.local:
            return os.path.exists(path)
        return self._head(path) is not None

    def _head(self, path: str) -> dict | None:
        import obstore
        from obstore.exceptions import NotFoundError

        self.counts.get += 1
        try:
            return obstore.head(self.store, self._key(path))
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as exc:
            raise self._fail(exc, path) from None

    def read_bytes(self, path: str) -> bytes:
        """A whole file; FileNotFoundError when it does not exist."""
        return self.read_versioned(path)[0]

    def read_versioned(self, path: str) -> tuple[bytes, Version]:
        """A whole file and the version a conditional replace compares against."""
        if self.local:
            with open(path, "rb") as fh:
                data = fh.read()
            return data, Version(data)
        import obstore
        from obstore.exceptions import NotFoundError

        self.counts.get += 1
        try:
            result = obstore.get(self.store, self._key(path))
            data = bytes(result.bytes())
            return data, Version(result.meta.get("e_tag"))
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(path) from None
        except Exception as exc:
            raise self._fail(exc, path) from None

    def list_dir(self, path: str) -> list[str]:
        """Names (not paths) of the entries of a folder; [] when it does not exist."""
        if self.local:
            try:
                return sorted(os.listdir(path))
            except FileNotFoundError:
                return []
        import obstore

        self.counts.list += 1
        key = self._key(path).strip("/")
        try:
            result = obstore.list_with_delimiter(self.store, key + "/" if key else None)
        except Exception as exc:
            raise self._fail(exc, path) from None
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in result["common_prefixes"]]
        names += [o["path"].rsplit("/", 1)[-1] for o in result["objects"]]
        return sorted(set(names))

    def is_dir(self, path: str) -> bool:
        if self.local:
            return os.path.isdir(path)
        return bool(self.list_dir(path))

    def mtime_ms(self, path: str) -> int | None:
        if self.local:
            try:
                return int(os.stat(path).st_mtime * 1000)
            except FileNotFoundError:
                return None
        meta = self._head(path)
        return None if meta is None else int(meta["last_modified"].timestamp() * 1000)

    def list_files_recursive(self, path: str) -> list[str]:
        if self.local:
            out = []
            for dirpath, _, files in os.walk(path):
                out += [os.path.join(dirpath, f) for f in files]
            return sorted(out)
        return sorted(p for p, _ in self._list_objects(path))

    def list_files_with_mtime(self, path: str) -> list[tuple[str, int]]:
        """Files under a folder with their modification time in ms (one listing on an object store)."""
        if self.local:
            out = []
            for f in self.list_files_recursive(path):
                m = self.mtime_ms(f)
                if m is not None:
                    out.append((f, m))
            return out
        return self._list_objects(path)

    def _list_objects(self, path: str) -> list[tuple[str, int]]:
        import obstore

        key = self._key(path).strip("/")
        out = []
        try:
            for chunk in obstore.list(self.store, key + "/" if key else None):
                self.counts.list += 1
                out += [(f"{self.bucket}/{o['path']}", int(o["last_modified"].timestamp() * 1000)) for o in chunk]
        except Exception as exc:
            raise self._fail(exc, path) from None
        return out

    # --- Parquet -------------------------------------------------------------------------------
    def read_parquet(self, path: str, columns: list[str] | None = None, schema=None):
        """A Parquet file, or a folder of them (a side table's parts), as an Arrow table: its `columns`,
        as `schema` types them when given. A missing, truncated or corrupt object is a StorageError."""
        if self.local:
            if os.path.isdir(path):
                return read_folder(self, path, columns, schema)
            return read_parquet_file(path, columns, schema)
        self.counts.get += 2  # footer and data (small files: one ranged GET each)
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
            raise self._fail(exc, path) from None

    def write_parquet(self, path: str, table, **options: Any) -> None:
        """Write an Arrow table as one Parquet file (visible whole or not at all on an object store)."""
        import pyarrow.parquet as pq

        if self.local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            pq.write_table(table, path, **options)
            return
        self.counts.put += 1
        try:
            pq.write_table(table, path, filesystem=self.fs, **options)
        except Exception as exc:
            raise self._fail(exc, path) from None

    # --- writes ------------------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        if self.local:
            os.makedirs(path, exist_ok=True)
        # Object stores have no folders: a key's prefix exists once an object is under it.

    def _tmp_name(self, path: str) -> str:
        head, _, tail = path.rpartition("/")
        return f"{head}/.tmp-{uuid.uuid4().hex}-{tail}"

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write a whole file so that readers see the old content or the new, never a part."""
        if not self.local:
            self._put(path, data, "overwrite")
            return
        tmp = self._tmp_name(path)
        self._write_local(tmp, data)
        os.replace(tmp, path)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create `path` with `data` unless it exists; True when this call created it."""
        return self.create_versioned(path, data) is not None

    def create_versioned(self, path: str, data: bytes) -> Version | None:
        """Create `path` with `data` unless it exists; its version when this call created it, else None."""
        if not self.local:
            etag = self._put(path, data, "create")
            return self._holds_exactly(path, data) if etag is None else Version(etag)
        tmp = self._tmp_name(path)
        self._write_local(tmp, data)
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return self._holds_exactly(path, data)
            return Version(data)
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def replace_if_unchanged(self, path: str, data: bytes, expected: Version) -> Version | None:
        """Replace `path` with `data` only if it is still at version `expected`; its new version, or None."""
        if not self.local:
            result = self._put(path, data, {"e_tag": expected.token})
            return self._holds_exactly(path, data) if result is None else Version(result)
        with self._local_compare(path, expected) as unchanged:
            if unchanged:
                self.write_atomic(path, data)
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
        with self._local_compare(path, expected) as unchanged:
            if unchanged:
                os.unlink(path)
            return unchanged

    @staticmethod
    @contextmanager
    def _local_compare(path: str, expected: Version):
        """Whether the local file is still at version `expected`, held under an exclusive flock of a
        sidecar (which every conditional writer of this path takes) until the block ends."""
        with open(path + ".cas", "a+b") as guard:
            fcntl.flock(guard.fileno(), fcntl.LOCK_EX)
            try:
                with open(path, "rb") as fh:
                    unchanged = fh.read() == expected.token
            except FileNotFoundError:
                unchanged = False
            yield unchanged

    def _put(self, path: str, data: bytes, mode: Any) -> str | None:
        """An object PUT; its e-tag, or None when its condition (create / if-match) did not hold."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        self.counts.put += 1
        try:
            result = obstore.put(self.store, self._key(path), data, mode=mode)
        except (AlreadyExistsError, PreconditionError):
            return None
        except Exception as exc:
            raise self._fail(exc, path) from None
        return result.get("e_tag") or ""

    def _write_local(self, path: str, data: bytes) -> None:
        with open(path, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def delete(self, path: str) -> None:
        """Delete a file or a folder tree; a missing path is fine."""
        if self.local:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                for p in (path, path + ".cas"):
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
            return
        import obstore

        keys = [self._key(p) for p, _ in self._list_objects(path)]
        keys.append(self._key(path))
        try:
            for i in range(0, len(keys), 1000):
                self.counts.delete += 1
                obstore.delete(self.store, keys[i : i + 1000])
        except FileNotFoundError:
            pass
        except Exception as exc:
            if "not found" not in str(exc).lower():
                raise self._fail(exc, path) from None


def remove_empty_dirs(top: str) -> None:
    """Remove the empty folders under `top` (a local folder), deepest first."""
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        if dirpath != top and not os.listdir(dirpath):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
