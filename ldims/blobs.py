"""Content-addressed storage of originals: ``blobs/ab/cd/<sha256>``.

Bodies are streamed in chunks: hashed and counted while written to a temporary file in
the same folder tree, then renamed into place, so a file is never whole in memory and a
half-written one is never visible. Past ``max_bytes`` the write stops with 413.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ldims.errors import PayloadTooLarge


@dataclass(frozen=True)
class StoredBlob:
    sha256: str
    size: int
    path: Path


class BlobWriter:
    """Receives one body chunk by chunk; ``commit`` names it by its hash."""

    def __init__(self, store: BlobStore, max_bytes: int) -> None:
        self._store = store
        self._max_bytes = max_bytes
        self._hash = hashlib.sha256()
        self.size = 0
        self.head = b""  # the first bytes, for type sniffing without re-reading the file
        store.tmp_dir.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=store.tmp_dir, prefix="upload-")
        self._file = os.fdopen(handle, "wb")
        self._tmp_path = Path(name)

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self._max_bytes:
            self.abort()
            raise PayloadTooLarge(
                f"The content is larger than the limit of {self._max_bytes} bytes.",
                limitBytes=self._max_bytes,
            )
        if len(self.head) < 8192:
            self.head += chunk[: 8192 - len(self.head)]
        self._hash.update(chunk)
        self._file.write(chunk)

    def commit(self, durable: bool = True) -> StoredBlob:
        """Name the body by its hash. ``durable=False``: without its own fsync — for a batch
        whose rows are recorded after one :meth:`BlobStore.sync` (a fsync each was half of
        a 3,000-file folder's first scan)."""
        self._file.flush()
        if durable:
            os.fsync(self._file.fileno())
        self._file.close()
        sha256 = self._hash.hexdigest()
        target = self._store.path(sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Same content already stored: keep that copy; rename is atomic either way.
        os.replace(self._tmp_path, target)
        return StoredBlob(sha256=sha256, size=self.size, path=target)

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self._tmp_path.unlink()


class BlobStore:
    """Originals on disk, named by sha256."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tmp_dir = root / "tmp"

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256[2:4] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def writer(self, max_bytes: int) -> BlobWriter:
        return BlobWriter(self, max_bytes)

    def sync(self) -> None:
        """Make every original written so far durable at once (the file system's ``syncfs``;
        ``sync`` where there is none): what a batch of ``commit(durable=False)`` needs before
        its rows say the originals are there."""
        self.root.mkdir(parents=True, exist_ok=True)
        syncfs = getattr(_libc(), "syncfs", None)
        if syncfs is None:
            os.sync()
            return
        handle = os.open(self.root, os.O_RDONLY)
        try:
            if syncfs(handle) != 0:
                error = ctypes.get_errno()
                raise OSError(error, os.strerror(error), str(self.root))
        finally:
            os.close(handle)

    def delete(self, sha256: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(sha256).unlink()

    def stored(self) -> dict[str, float]:
        """Every stored original's sha256 with its modification time (uploads in progress,
        under ``tmp/``, left out): ``ldims check``'s listing."""
        found: dict[str, float] = {}
        for path in self.root.glob("??/??/*"):
            if path != self.path(path.name):
                continue  # not a name of ours
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                found[path.name] = path.stat().st_mtime
        return found


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)
