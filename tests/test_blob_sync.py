"""Originals of a batch are made durable at once: ``commit(durable=False)`` skips the file's own
fsync, ``BlobStore.sync`` (syncfs) covers them all before their rows are recorded."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ldims.blobs import BlobStore


def _store(store: BlobStore, body: bytes, durable: bool) -> str:
    writer = store.writer(1 << 20)
    writer.write(body)
    return writer.commit(durable=durable).sha256


def test_a_batch_is_synced_once_not_per_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BlobStore(tmp_path / "blobs")
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    one = _store(store, b"durable on its own", durable=True)
    assert len(fsyncs) == 1
    batch = [_store(store, f"file {n}".encode(), durable=False) for n in range(20)]
    assert len(fsyncs) == 1  # none of the batch's
    store.sync()
    for number, sha256 in enumerate(batch):
        assert store.path(sha256).read_bytes() == f"file {number}".encode()
        assert sha256 == hashlib.sha256(f"file {number}".encode()).hexdigest()
    assert store.exists(one)


def test_sync_of_a_store_not_yet_written(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "new")
    store.sync()
    assert (tmp_path / "new").is_dir() and store.stored() == {}
