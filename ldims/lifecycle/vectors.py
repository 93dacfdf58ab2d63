"""The vectors of a document's completed version (the vector segments, ``indexer.vectors``):
written by the embed stage after the version is completed and indexed, one row per chunk
with the filters' facts, replacing the version's earlier vectors at once; removed after the
document's row (a delete task; a lost one is the reconciler's orphan sweep). Until a
version's vectors are written, its earlier ones stay out of search (their version differs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from indexer import IndexedDocument, day_number
from indexer.vectors import NO_DAY, VectorRow, VectorStore, VectorStoreBusy
from ldims.errors import TransientError


def replace_vectors(
    store: VectorStore,
    fingerprint: str,
    dim: int,
    written: Iterable[tuple[IndexedDocument, Sequence[int], np.ndarray]],
) -> None:
    """Write each version's vectors (its chunks' numbers and their vectors) in one commit,
    replacing whatever the document had; ``VectorStoreBusy`` or ``OSError`` when it cannot."""
    with store.writer(fingerprint, dim) as writer:
        for document, chunks, vectors in written:
            writer.replace(document.document_id, vector_rows(document, chunks), vectors)


def delete_vectors(store: VectorStore, document_ids: list[str]) -> None:
    """Remove every vector of ``document_ids`` (a store with no model yet holds none)."""
    fingerprint = store.fingerprint()
    if not document_ids or fingerprint is None:
        return
    try:
        with store.writer(fingerprint, store.dim() or 0) as writer:
            for document_id in document_ids:
                writer.delete(document_id)
    except VectorStoreBusy as exc:
        raise TransientError("VECTORS_BUSY", str(exc)) from exc


def vector_rows(document: IndexedDocument, chunks: Sequence[int]) -> list[VectorRow]:
    day = day_number(document.created_at) if document.created_at else NO_DAY
    return [
        VectorRow(
            document_id=document.document_id,
            chunk=number,
            version=document.version,
            tenant=document.tenant,
            collection=document.collection,
            document_type=document.document_type,
            submitter=document.submitter,
            day=day,
        )
        for number in chunks
    ]
