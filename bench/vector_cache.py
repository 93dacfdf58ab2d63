"""An on-disk cache of a model's vectors for the benchmarks: a text is embedded once per
model and machine, so a quality run that needs the same corpora again (the retrieval
benchmark's partial-vector rows, the calibration fit) pays the model once.

Vectors are kept by ``sha1(kind + text)`` in one SQLite file per model fingerprint under
``bench/.cache/`` (not in git). What a benchmark *times* must not come from here: the
embedding benchmarks use the model itself.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import numpy as np

from indexer.embedding import Embedder

CACHE = Path(__file__).resolve().parent / ".cache"


class CachedEmbedder:
    """``embedder`` with its passage and query vectors kept on disk."""

    def __init__(self, embedder: Embedder, folder: Path = CACHE) -> None:
        self.embedder = embedder
        self.fingerprint = embedder.fingerprint
        folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha1(embedder.fingerprint.encode()).hexdigest()[:16]
        self._db = sqlite3.connect(folder / f"vectors-{name}.sqlite3", check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS v (key BLOB PRIMARY KEY, vector BLOB)")
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @property
    def dim(self) -> int:
        return self.embedder.dim

    def tokens(self, text: str) -> int:
        return self.embedder.tokens(text)

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._vectors("p", texts, self.embedder.passages)

    def query(self, text: str) -> np.ndarray:
        return self._vectors("q", [text], lambda texts: np.vstack([self.embedder.query(texts[0])]))[
            0
        ]

    def _vectors(self, kind: str, texts: list[str], embed) -> np.ndarray:  # type: ignore[no-untyped-def]
        keys = [hashlib.sha1((kind + "\0" + text).encode()).digest() for text in texts]
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            for first in range(0, len(keys), 500):
                part = keys[first : first + 500]
                marks = ",".join("?" * len(part))
                for key, blob in self._db.execute(
                    f"SELECT key, vector FROM v WHERE key IN ({marks})", part
                ):
                    found[bytes(key)] = np.frombuffer(blob, dtype=np.float32)
        missing = [i for i, key in enumerate(keys) if key not in found]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            made = np.asarray(embed([texts[i] for i in missing]), dtype=np.float32)
            with self._lock:
                self._db.executemany(
                    "INSERT OR REPLACE INTO v VALUES (?, ?)",
                    [(keys[i], made[n].tobytes()) for n, i in enumerate(missing)],
                )
                self._db.commit()
            for n, i in enumerate(missing):
                found[keys[i]] = made[n]
        return (
            np.vstack([found[key] for key in keys]) if keys else np.zeros((0, self.dim), np.float32)
        )
