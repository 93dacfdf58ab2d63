"""Where the embed stage keeps a document's vectors until the last of its chunks is embedded.

A document too long for one embed task is embedded in slices, over several tasks (and
workers); its vectors reach the vector store only when every chunk is done, in one replace.
Meanwhile each finished slice is a file here, so no work is lost when a task stops (out of
time, killed, the store busy) — the next task takes the document up where it stopped.

Layout, under ``DATA_DIR/embed-scratch``: a folder per document (a hash of its key), in it a
folder per (version, model) — ``<sha256>-<model hash>`` — holding ``meta.json`` (document,
version, model and a digest of the texts embedded), ``p<first chunk>.npy`` (the vectors of
consecutive chunks from there) and ``failed.json`` (chunks given up, with the reason). Files
are written whole and renamed into place. A version whose texts changed (a new title) starts
over. The folder goes when the vectors are in the store; the other versions' folders of a
document go when it is next embedded, and the reconciler's sweep removes those of documents
deleted, replaced or embedded meanwhile (:func:`sweep`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

META = "meta.json"
FAILED = "failed.json"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def digest(texts: Iterable[str]) -> str:
    """A digest of the passages a document's vectors are made of."""
    hashed = hashlib.sha256()
    for text in texts:
        hashed.update(text.encode("utf-8", "surrogatepass"))
        hashed.update(b"\x00")
    return hashed.hexdigest()


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(temporary)
    os.replace(temporary, path)


@dataclass
class Progress:
    """One version's finished slices (for one model), in its scratch folder (made when the
    first is kept: a document embedded within one task never touches the disk)."""

    folder: Path
    meta: dict[str, str]
    parts: dict[int, np.ndarray] = field(default_factory=dict)  # first chunk -> vectors
    failed: dict[int, str] = field(default_factory=dict)  # chunk -> reason
    unsaved: set[int] = field(default_factory=set)  # parts not on disk yet

    def done(self) -> int:
        """Chunks done from the first on (embedded or given up), without a gap."""
        position = 0
        while True:
            if position in self.failed:
                position += 1
            elif position in self.parts and len(self.parts[position]):
                position += len(self.parts[position])
            else:
                return position

    def add(self, first: int, vectors: np.ndarray) -> None:
        """The vectors of chunks ``first…`` (kept on disk by :meth:`flush`)."""
        if len(vectors):
            self.parts[first] = np.ascontiguousarray(vectors, dtype=np.float32)
            self.unsaved.add(first)

    def flush(self) -> None:
        """Keep the parts added since on disk."""
        for first in sorted(self.unsaved):
            self._make()
            _save_npy_atomically(self.folder / f"p{first:09d}.npy", self.parts[first])
        self.unsaved.clear()

    def _make(self) -> None:
        if not (self.folder / META).exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            data = json.dumps(self.meta).encode()
            _write_atomically(self.folder / META, lambda path: path.write_bytes(data))

    def give_up(self, chunk: int, reason: str) -> None:
        """Mark ``chunk`` as having no vector, for ``reason``."""
        self.failed[chunk] = reason
        self._make()
        data = json.dumps({str(k): v for k, v in sorted(self.failed.items())}).encode()
        _write_atomically(self.folder / FAILED, lambda path: path.write_bytes(data))

    def vectors(self, count: int) -> tuple[list[int], np.ndarray | None]:
        """The chunks of ``0…count-1`` that have vectors, and their vectors in that order
        (None when there are none)."""
        # The walk of done(): a part saved twice from different chunks (two tasks on one
        # document after a claim ran out) is taken once.
        chunks: list[int] = []
        parts: list[np.ndarray] = []
        position = 0
        while position < count:
            if position in self.failed:
                position += 1
            elif position in self.parts:
                part = self.parts[position][: count - position]
                chunks += range(position, position + len(part))
                parts.append(part)
                position += len(part)
            else:
                break
        if not parts:
            return [], None
        return chunks, np.concatenate(parts)


def _save_npy_atomically(path: Path, vectors: np.ndarray) -> None:
    def save(temporary: Path) -> None:
        # Through a file: np.save given a name not ending in .npy would add it.
        with open(temporary, "wb") as file:
            np.save(file, vectors, allow_pickle=False)

    _write_atomically(path, save)


class Scratch:
    """The scratch folders of the embed stage, under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _folder(self, document_id: str, sha256: str, fingerprint: str) -> Path:
        return self.root / _hash(document_id) / f"{sha256[:64]}-{_hash(fingerprint)[:16]}"

    def open(self, document_id: str, sha256: str, fingerprint: str, texts: str) -> Progress:
        """The progress of this version and model (``texts``: the digest of its passages);
        a folder of other texts, and the document's other versions' folders, are removed."""
        folder = self._folder(document_id, sha256, fingerprint)
        meta = {"document": document_id, "sha256": sha256, "model": fingerprint, "texts": texts}
        for other in _children(folder.parent):
            if other != folder:
                shutil.rmtree(other, ignore_errors=True)
        try:
            found = json.loads((folder / META).read_text())
        except FileNotFoundError:
            return Progress(folder, meta)
        except ValueError:
            found = None
        if found != meta:
            shutil.rmtree(folder, ignore_errors=True)
            return Progress(folder, meta)
        return _load(folder, meta)

    def remove(self, document_id: str) -> None:
        """Remove every scratch folder of ``document_id``."""
        shutil.rmtree(self.root / _hash(document_id), ignore_errors=True)

    def remove_version(self, progress: Progress) -> None:
        shutil.rmtree(progress.folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            progress.folder.parent.rmdir()  # only when empty

    def kept(self) -> list[tuple[Path, dict[str, str]]]:
        """Every version folder with its meta (for the sweep); folders without one are left
        out (being made, or left by a crash: :func:`sweep` removes those when old)."""
        found = []
        for folder in (child for parent in _children(self.root) for child in _children(parent)):
            try:
                found.append((folder, json.loads((folder / META).read_text())))
            except (FileNotFoundError, ValueError):
                found.append((folder, {}))
        return found


def _children(folder: Path) -> list[Path]:
    try:
        return [child for child in folder.iterdir() if child.is_dir()]
    except FileNotFoundError:
        return []


def _load(folder: Path, meta: dict[str, str]) -> Progress:
    progress = Progress(folder, meta)
    for path in folder.glob("p*.npy"):
        try:
            progress.parts[int(path.stem[1:])] = np.load(path, allow_pickle=False)
        except (ValueError, OSError):
            log.warning("unreadable embed scratch file %s removed", path.name)
            path.unlink(missing_ok=True)
    with contextlib.suppress(FileNotFoundError, ValueError):
        failed = json.loads((folder / FAILED).read_text())
        progress.failed = {int(chunk): str(reason) for chunk, reason in failed.items()}
    return progress


def sweep(scratch: Scratch, still_needed: Callable[[dict[str, str]], bool], age: float) -> int:
    """Remove the version folders ``still_needed`` rejects (given its meta), and those
    without a meta older than ``age`` seconds; how many."""
    removed = 0
    for folder, meta in scratch.kept():
        if meta:
            keep = still_needed(meta)
        else:
            try:
                keep = time.time() - folder.stat().st_mtime < age
            except FileNotFoundError:
                continue
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                folder.parent.rmdir()
            removed += 1
    return removed
