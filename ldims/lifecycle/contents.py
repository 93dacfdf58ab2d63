"""A content's files: its original (``ldims.blobs``) and its extraction (``ldims.extracts``),
both named by the content's sha256 and shared by every document row that holds those bytes.

- An original is written as its bytes arrive (:func:`receive_original`: an upload's parts, a
  folder's file, a fetched URL's body), hashed and counted on the way, and named by its hash
  when complete; a row names it only once it is stored (durable: its own fsync, or one
  :meth:`~ldims.blobs.BlobStore.sync` for a batch).
- An extraction is written once per content by the extract stage (:func:`keep_extraction`).
- Both go together, and only when no row refers to their content any more
  (:func:`discard_unreferenced`: a delete, a new version, a refused upload, ``ldims check
  --repair``); a crash between a row's removal and this leaves orphans that the reconciler's
  sweep (``ldims check``'s code) removes after an hour's grace.
"""

from __future__ import annotations

from collections.abc import Iterable

from ldims.blobs import BlobStore, BlobWriter
from ldims.catalog import Catalog, Document
from ldims.extracts import ExtractStore
from ldims.text import ExtractionResult


def receive_original(blobs: BlobStore, max_bytes: int) -> BlobWriter:
    """A writer for an original arriving in pieces (past ``max_bytes``: 413)."""
    return blobs.writer(max_bytes)


def keep_extraction(extracts: ExtractStore, sha256: str, result: ExtractionResult) -> None:
    """The extraction of content ``sha256``, stored for every later stage and reader."""
    extracts.save(sha256, result)


def discard_unreferenced(
    catalog: Catalog, blobs: BlobStore, extracts: ExtractStore, sha256s: Iterable[str]
) -> list[str]:
    """Remove the originals (and their extractions) of ``sha256s`` that no document row refers
    to, checked in one catalog query; the ones removed. The one place a content's files go: a
    delete, a new version, a refused upload, ``ldims check --repair``."""
    wanted = set(sha256s)
    if not wanted:
        return []
    with catalog.session() as session:
        rows = session.query(Document.sha256).filter(Document.sha256.in_(sorted(wanted)))
        in_use = {sha256 for (sha256,) in rows}
    gone = sorted(wanted - in_use)
    for sha256 in gone:
        blobs.delete(sha256)
        extracts.delete(sha256)
    return gone
