"""The embedder and the vector store the settings name (the API's queries, the embed
worker's passages)."""

from __future__ import annotations

import functools
from pathlib import Path

from indexer.embedding import Embedder, fingerprint_of, load_embedder
from indexer.rerank import OnnxCrossEncoder, Reranker
from indexer.vectors import VectorStore
from ldims.settings import Settings


def embedder_for(settings: Settings) -> Embedder | None:
    """The configured embedder, loaded once per process and model; None when semantic search
    is off (``LDIMS_EMBEDDING_MODEL=none`` without an endpoint)."""
    if not settings.semantic_enabled:
        return None
    key = settings.embedding_api_key
    return _load(
        settings.embedding_model,
        settings.embedding_url,
        key.get_secret_value() if key else None,
        settings.embedding_timeout_seconds,
        settings.embedding_threads,
        settings.embedding_concurrency,
        settings.embedding_batch_timeout_seconds,
        settings.embedding_engine,
        settings.models_dir,
        settings.embedding_passage_max_tokens,
    )


@functools.cache
def _load(
    model: str,
    url: str | None,
    api_key: str | None,
    timeout: float,
    threads: int,
    calls: int,
    batch_timeout: float,
    engine: str,
    cache_dir: Path,
    max_tokens: int,
) -> Embedder:
    return load_embedder(
        model, url, api_key, timeout, threads, calls, batch_timeout, engine, cache_dir, max_tokens
    )


def fingerprint_for(settings: Settings) -> str | None:
    """The configured model's fingerprint (without loading it); None when semantic is off."""
    if not settings.semantic_enabled:
        return None
    return fingerprint_of(
        settings.embedding_model,
        settings.embedding_url,
        settings.embedding_engine,
        settings.embedding_passage_max_tokens,
    )


def vector_store(settings: Settings) -> VectorStore:
    """The vector store of ``settings`` (each process opens its own)."""
    return VectorStore(
        settings.vectors_dir,
        ann_min_rows=settings.vector_ann_min_rows,
        exact_max_rows=settings.vector_exact_max_rows,
    )


def reranker_for(settings: Settings) -> Reranker | None:
    """The configured cross-encoder (loaded once per process), None when there is none."""
    if settings.reranker_model is None or settings.reranker_tokenizer is None:
        return None
    return _reranker(settings.reranker_model, settings.reranker_tokenizer)


@functools.cache
def _reranker(model: Path, tokenizer: Path) -> Reranker:
    return OnnxCrossEncoder(model, tokenizer)
