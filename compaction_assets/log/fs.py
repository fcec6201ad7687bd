"""Storage access for the log store: local paths natively, other URIs through pyarrow's filesystems.

Commits rely on an exclusive create (a new manifest version either appears whole or not at all). On a
local filesystem that is a hard link of a fully written temporary file, which is atomic and fails if
the target exists. Object stores without conditional writes get a best-effort check instead; the
per-log lock is what keeps writers apart there.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from urllib.parse import urlparse

import pyarrow.fs as pafs


@dataclass(frozen=True)
class Storage:
    root: str            # path as the filesystem sees it (no scheme for local paths)
    scheme: str          # "" for local
    fs: pafs.FileSystem

    @classmethod
    def open(cls, location: str) -> "Storage":
        parsed = urlparse(str(location))
        if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
            path = parsed.path if parsed.scheme == "file" else str(location)
            return cls(os.path.abspath(path), "", pafs.LocalFileSystem())
        fs, path = pafs.FileSystem.from_uri(str(location))
        return cls(path.rstrip("/"), parsed.scheme, fs)

    @property
    def local(self) -> bool:
        return self.scheme == ""

    def join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *[p.strip("/") for p in parts if p]])

    def spark_uri(self, path: str) -> str:
        """The URI Spark's Hadoop filesystems accept for a path of this storage."""
        if self.local:
            return "file://" + path
        scheme = {"s3": "s3a", "gs": "gs"}.get(self.scheme, self.scheme)
        return f"{scheme}://{path}"

    # --- reads -------------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        if self.local:
            return os.path.exists(path)
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def read_bytes(self, path: str) -> bytes:
        if self.local:
            with open(path, "rb") as fh:
                return fh.read()
        with self.fs.open_input_stream(path) as fh:
            return fh.read()

    def list_dir(self, path: str) -> list[str]:
        """Names (not paths) of the entries of a folder; [] when it does not exist."""
        if self.local:
            try:
                return sorted(os.listdir(path))
            except FileNotFoundError:
                return []
        infos = self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return sorted(i.base_name for i in infos)

    def is_dir(self, path: str) -> bool:
        if self.local:
            return os.path.isdir(path)
        return self.fs.get_file_info(path).type == pafs.FileType.Directory

    def mtime_ms(self, path: str) -> int | None:
        if self.local:
            try:
                return int(os.stat(path).st_mtime * 1000)
            except FileNotFoundError:
                return None
        info = self.fs.get_file_info(path)
        return None if info.mtime is None else int(info.mtime.timestamp() * 1000)

    def list_files_recursive(self, path: str) -> list[str]:
        if self.local:
            out = []
            for dirpath, _, files in os.walk(path):
                out += [os.path.join(dirpath, f) for f in files]
            return sorted(out)
        infos = self.fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        return sorted(i.path for i in infos if i.type == pafs.FileType.File)

    # --- writes ------------------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        if self.local:
            os.makedirs(path, exist_ok=True)
        else:
            self.fs.create_dir(path, recursive=True)

    def _tmp_name(self, path: str) -> str:
        head, _, tail = path.rpartition("/")
        return f"{head}/.tmp-{uuid.uuid4().hex}-{tail}"

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write a whole file so that readers see the old content or the new, never a part."""
        tmp = self._tmp_name(path)
        self._write(tmp, data)
        if self.local:
            os.replace(tmp, path)
        else:
            self.fs.move(tmp, path)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create `path` with `data` unless it exists; True when this call created it."""
        tmp = self._tmp_name(path)
        self._write(tmp, data)
        try:
            if self.local:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
                return True
            if self.exists(path):
                return False
            self.fs.move(tmp, path)
            return True
        finally:
            if self.local:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass

    def _write(self, path: str, data: bytes) -> None:
        if self.local:
            with open(path, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        else:
            with self.fs.open_output_stream(path) as fh:
                fh.write(data)

    def delete(self, path: str) -> None:
        """Delete a file or a folder tree; a missing path is fine."""
        if self.local:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            return
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(path)
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(path)
