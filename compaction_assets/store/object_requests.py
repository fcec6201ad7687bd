"""The requests `fs.Storage` makes to a bucket through `obstore`: each counted (`RequestCounts`), each failure
a StorageError that names the store and the object, never the raw response.

Paths here are as `Storage` names them ("bucket/prefix/..."); a request takes the object's key, the path
without its bucket. A conditional PUT (create, or replace if the e-tag still matches) answers None when
its condition did not hold, so the caller can read the object back and tell its own landed write from
another writer's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compaction_assets.errors import StorageError
from compaction_assets.store.object_clients import RequestCounts, store_error

if TYPE_CHECKING:
    from obstore import ObjectMeta

DELETE_BATCH = 1000  # keys per delete request (S3's limit)


@dataclass(frozen=True)
class ObjectRequests:
    """One bucket's requests: its obstore store, the store as the user named it (for messages), and the
    counts the requests add to (shared with the Storage that made this)."""

    location: str
    bucket: str
    store: Any
    counts: RequestCounts

    def key(self, path: str) -> str:
        """The object key of a path of the bucket; a StorageError for a path outside it."""
        if not (path == self.bucket or path.startswith(self.bucket + "/")):
            raise StorageError(f"store {self.location}: path {path!r} is outside bucket {self.bucket!r}")
        return path[len(self.bucket) + 1 :]

    def fail(self, exc: BaseException, path: str) -> StorageError:
        """The StorageError of a failed request about `path` (no path: about the store)."""
        return store_error(self.location, exc, self.key(path) if path else "")

    def head(self, path: str) -> ObjectMeta | None:
        """An object's metadata; None when there is no such object."""
        import obstore
        from obstore.exceptions import NotFoundError

        self.counts.get += 1
        try:
            return obstore.head(self.store, self.key(path))
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as exc:
            raise self.fail(exc, path) from None

    def get(self, path: str) -> tuple[bytes, str | None]:
        """A whole object and its e-tag; FileNotFoundError when there is no such object."""
        import obstore
        from obstore.exceptions import NotFoundError

        self.counts.get += 1
        try:
            result = obstore.get(self.store, self.key(path))
            return bytes(result.bytes()), result.meta.get("e_tag")
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(path) from None
        except Exception as exc:
            raise self.fail(exc, path) from None

    def list_names(self, path: str) -> list[str]:
        """Names of the objects and prefixes right under a prefix (one LIST)."""
        import obstore

        self.counts.list += 1
        key = self.key(path).strip("/")
        try:
            result = obstore.list_with_delimiter(self.store, key + "/" if key else None)
        except Exception as exc:
            raise self.fail(exc, path) from None
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in result["common_prefixes"]]
        names += [o["path"].rsplit("/", 1)[-1] for o in result["objects"]]
        return sorted(set(names))

    def list_objects(self, path: str) -> list[tuple[str, int]]:
        """Every object under a prefix, as (path, last modified in ms): a LIST a page of objects."""
        return [(p, mtime) for p, mtime, _ in self.list_object_stats(path)]

    def list_object_stats(self, path: str) -> list[tuple[str, int, int]]:
        """Every object under a prefix, as (path, last modified in ms, size in bytes): a LIST a page of objects."""
        import obstore

        key = self.key(path).strip("/")
        out = []
        try:
            for chunk in obstore.list(self.store, key + "/" if key else None):
                self.counts.list += 1
                out += [
                    (f"{self.bucket}/{o['path']}", int(o["last_modified"].timestamp() * 1000), int(o["size"]))
                    for o in chunk
                ]
        except Exception as exc:
            raise self.fail(exc, path) from None
        return out

    def put(self, path: str, data: bytes, mode: Any) -> str | None:
        """An object PUT; its e-tag, or None when its condition (create / if-match) did not hold."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        self.counts.put += 1
        try:
            result = obstore.put(self.store, self.key(path), data, mode=mode)
        except (AlreadyExistsError, PreconditionError):
            return None
        except Exception as exc:
            raise self.fail(exc, path) from None
        return result.get("e_tag") or ""

    def delete_tree(self, path: str) -> None:
        """Delete an object and every object under it as a prefix; a missing one is fine."""
        import obstore

        keys = [self.key(p) for p, _ in self.list_objects(path)]
        keys.append(self.key(path))
        try:
            for i in range(0, len(keys), DELETE_BATCH):
                self.counts.delete += 1
                obstore.delete(self.store, keys[i : i + DELETE_BATCH])
        except FileNotFoundError:
            pass
        except Exception as exc:
            if "not found" not in str(exc).lower():
                raise self.fail(exc, path) from None
