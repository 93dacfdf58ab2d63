"""The dense and hybrid parts of ``bench/retrieval.py``: vectors for an IR set's index, the
dense and hybrid searches over them, and the cross-language check on XQuAD.

Vectors are made as the embed stage makes them (``workers.embed.embed_documents``: the title
and the chunk's text, batched by tokens) and written to a ``VectorStore`` beside the index.
A dense or hybrid query's latency includes embedding the query (no cache: every query is
new), as a user's first search pays it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from relevance import SERVER_DEFAULTS

from indexer import (
    DocumentIndex,
    IndexedDocument,
    QueryUnprocessable,
    SearchRequest,
    SearchResults,
)
from indexer.embedding import Embedder
from indexer.vectors import VectorStore
from workers.embed import embed_documents

MAX_TOKENS = 4096


@dataclass
class Vectors:
    """An index's vectors of one model, and what making them cost."""

    model: str
    chunks: int
    seconds: float  # wall, one thread
    cpu_seconds: float


def attach_vectors(
    index: DocumentIndex, documents: Sequence[IndexedDocument], embedder: Embedder, folder: Path
) -> Vectors:
    """Embed ``documents``' chunks into a store in ``folder`` and search ``index`` with it."""
    store = VectorStore(folder)
    started, cpu = time.perf_counter(), time.process_time()
    embedded = embed_documents(embedder, documents, MAX_TOKENS)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    with store.writer(embedder.fingerprint, embedder.dim) as writer:
        for document, (rows, vectors) in zip(documents, embedded, strict=True):
            writer.replace(document.document_id, rows, vectors)
    index.vectors = store
    chunks = sum(len(document.chunks) for document in documents)
    return Vectors(embedder.fingerprint, chunks, seconds, cpu_seconds)


@dataclass
class Ranked:
    rankings: dict[str, list[str]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    unprocessable: int = 0
    empty: int = 0
    without_vectors: int = 0


def run_semantic(
    index: DocumentIndex,
    queries: Sequence[tuple[str, str]],
    tenant: str,
    mode: str,
    embedder: Embedder,
    limit: int,
) -> Ranked:
    """Every query in ``mode`` (dense or hybrid), its vector made anew each time."""
    ranked = Ranked()
    search(index, tenant, queries[0][1], mode, embedder, limit)  # warm-up, not counted
    for query_id, text in queries:
        started = time.perf_counter()
        try:
            found = search(index, tenant, text, mode, embedder, limit)
        except QueryUnprocessable:
            ranked.latencies.append(time.perf_counter() - started)
            ranked.unprocessable += 1
            ranked.rankings[query_id] = []
            continue
        ranked.latencies.append(time.perf_counter() - started)
        ranked.empty += not found.hits
        ranked.without_vectors = max(ranked.without_vectors, found.without_vectors)
        ranked.rankings[query_id] = [hit.document_id for hit in found.hits]
    return ranked


def search(
    index: DocumentIndex,
    tenant: str,
    text: str,
    mode: str,
    embedder: Embedder,
    limit: int,
) -> SearchResults:
    """One search as the server runs it (100 candidates a list, the calibrated scores and
    their floor), the query's vector made now."""
    request = SearchRequest(
        tenant=tenant,
        query=text,
        mode=mode,  # type: ignore[arg-type]
        limit=limit,
        vector=embedder.query(text),
        fingerprint=embedder.fingerprint,
        **SERVER_DEFAULTS,
    )
    return index.search(request)


@dataclass
class CrossLanguage:
    """English questions against the Russian and Chinese paragraphs of XQuAD in one index."""

    model: str
    mode: str
    items: int
    both: int  # the Russian and the Chinese paragraph in the top 10
    ru: int
    zh: int


def cross_language(
    work: Path,
    english: Sequence[tuple[str, str]],
    paragraphs: dict[str, Sequence[tuple[str, str, str]]],
    gold: Callable[[str, str], str],
    make_document: Callable[[str, str, str], IndexedDocument],
    embedders: dict[str, Embedder],
    sample: int,
    tenant: str,
) -> list[CrossLanguage]:
    """For ``sample`` English questions (a fixed random sample), whether dense and hybrid
    search put the Russian and the Chinese paragraph of the same item (``gold(query_id,
    language)``) in the top 10, the paragraphs indexed without their titles (XQuAD's titles
    are English in every language: they would match the English words)."""
    documents = [
        make_document(doc_id, "", text)
        for language in ("ru", "zh")
        for doc_id, _, text in paragraphs[language]
    ]
    index = DocumentIndex(work / "cross-language")
    with index.batch() as batch:
        for document in documents:
            batch.replace(document)
    chosen = random.Random(42).sample(list(english), min(sample, len(english)))
    outcomes = []
    try:
        for name, embedder in embedders.items():
            attach_vectors(index, documents, embedder, work / f"cross-language-{name}")
            for mode in ("dense", "hybrid"):
                ru = zh = both = 0
                for query_id, text in chosen:
                    try:
                        found = search(index, tenant, text, mode, embedder, 10)
                    except QueryUnprocessable:
                        continue
                    top = {hit.document_id for hit in found.hits}
                    in_ru, in_zh = gold(query_id, "ru") in top, gold(query_id, "zh") in top
                    ru += in_ru
                    zh += in_zh
                    both += in_ru and in_zh
                outcomes.append(CrossLanguage(name, mode, len(chosen), both, ru, zh))
    finally:
        index.close()
    return outcomes
