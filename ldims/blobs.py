"""Content-addressed storage of originals: ``blobs/ab/cd/<sha256>``.

Bodies are streamed in chunks: hashed and counted while written to a temporary file in
the same folder tree, then renamed into place, so a file is never whole in memory and a
half-written one is never visible. Past ``max_bytes`` the write stops with 413.
"""

from __future__ import annotations

import contextlib
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

    def commit(self) -> StoredBlob:
        self._file.flush()
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
