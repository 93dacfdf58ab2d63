"""The proxy toolset's core (proxy seed §6–§8): five tools through which a model reads what it
is allowed to of a document, and nothing more — the one path the MCP tools and the
``/internal/mcp/execute`` envelope both take.

Every call, in order: the arguments are validated, the document id made canonical (the one rule
of :func:`ldims.documents.validate_document_id`, surrounding whitespace dropped), and that id
alone is what limits, audit and lookup use; the caller's scope checked (``proxy``, which
``read`` implies); the call admitted by the limiter (calls a minute, calls on the document in
this generation, generations an hour); ``doc_local_search`` also takes a slot of the searches'
admission (the same per-tenant and per-key shares as every other search,
:mod:`ldims.admission`) for its query's embedding and its search, and stops at
``LDIMS_SEARCH_TIMEOUT_SECONDS``; the tool runs on the caller's document (another tenant's is
not found, as an unknown one); every text is masked (PII, secrets) before anything else
rewrites it — snippets are highlighted on the masked text (:mod:`ldims.proxy.highlight`) — and
cut to ``DOC_CHUNK_LIMIT_TOKENS`` at a sentence end, then to what the generation's output
budget still grants; a last pass masks every string of the result once more (idempotent: it
finds nothing unless a tool forgot a field); one audit record is written, whatever the outcome.

Results use the seed's snake_case fields; ``meta`` carries ``masked`` (count per kind),
``truncated`` and ``rate_limit`` (what this generation used of its limits).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Annotated, Any

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from indexer import DocumentIndex, SearchOverdue, index_terms
from indexer.deadline import deadline_in
from indexer.passages import DenseChunks
from ldims.caller import Caller
from ldims.catalog import Document
from ldims.errors import InvalidInput, LdimsError, NotFound, SearchTimeout
from ldims.proxy.audit import AuditEntry, AuditTrail
from ldims.proxy.errors import (
    AccessDenied,
    RateLimitExceeded,
    ToolError,
    UnknownTool,
    envelope_code,
)
from ldims.proxy.highlight import WIDE_CHARS, masked_snippet
from ldims.proxy.limits import Grant, Limiter, Usage
from ldims.proxy.masking import mask
from ldims.proxy.store import ProxyStore
from ldims.proxy.tokens import count_tokens, trim_to_tokens

DOC_TOOLS = ("read_doc_section", "read_doc_pages", "read_doc_metadata", "doc_local_search")
TOOLS = (*DOC_TOOLS, "list_available_tools")
MAX_LOCAL_RESULTS = 5
MAX_SECTIONS_LISTED = 200
SNIPPET_CHARS = 240
# Characters of a text kept per token of DOC_CHUNK_LIMIT_TOKENS before masking and counting
# (o200k_base averages ~4 characters a token in English, fewer in Russian and Chinese).
PRECUT_CHARS_PER_TOKEN = 16
MAX_TRACE_CHARS = 128
# Fields of a result that are ids, times or the caller's own input, never document text: the
# last masking pass leaves them as they are (a document id may be all digits).
UNMASKED_FIELDS = frozenset({"doc_id", "section_id", "created_at", "format", "meta", "tools"})
REQUIRED_SCOPE = "proxy"  # 'read' implies it (ldims.caller.IMPLIED)


def canonical_doc_id(raw: str) -> str:
    """The one id a document is counted, audited and found by: ``raw`` without surrounding
    whitespace (Unicode's too), which must then be a valid document id — so no spelling of an
    id (a space, a no-break space, ``%20``) reaches a document under a limit of its own."""
    # Imported on use: the settings import ldims.proxy (its mask kinds) while ldims.documents
    # may still be loading.
    from ldims.documents import validate_document_id

    text = raw.strip()
    try:
        return validate_document_id(text)
    except InvalidInput as exc:
        raise ValueError(exc.message) from None


DocId = Annotated[
    str,
    Field(min_length=1, max_length=64, description="The document's id"),
    AfterValidator(canonical_doc_id),
]


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class SectionArguments(_Arguments):
    doc_id: DocId
    section_id: Annotated[str, Field(min_length=1, max_length=128)]


class PagesArguments(_Arguments):
    doc_id: DocId
    page_start: Annotated[int, Field(ge=1, le=1_000_000)]
    page_end: Annotated[int, Field(ge=1, le=1_000_000)]


class MetadataArguments(_Arguments):
    doc_id: DocId


class LocalSearchArguments(_Arguments):
    doc_id: DocId
    query: Annotated[str, Field(min_length=1, max_length=1000)]
    max_results: Annotated[int, Field(ge=1, le=MAX_LOCAL_RESULTS)] = MAX_LOCAL_RESULTS


class NoArguments(_Arguments):
    pass


ARGUMENTS: dict[str, type[_Arguments]] = {
    "read_doc_section": SectionArguments,
    "read_doc_pages": PagesArguments,
    "read_doc_metadata": MetadataArguments,
    "doc_local_search": LocalSearchArguments,
    "list_available_tools": NoArguments,
}


@dataclass(frozen=True)
class ProxyConfig:
    chunk_limit_tokens: int = 1500
    max_pages: int = 5
    mask_kinds: frozenset[str] | None = None  # None: every kind
    snippet_chars: int = SNIPPET_CHARS
    keyword_weight: float = 1.0  # of in-document hybrid search, as of the documents' search
    dense_weight: float = 1.0
    search_seconds: float = 10.0  # LDIMS_SEARCH_TIMEOUT_SECONDS: embedding and search of a query


# A query's embedding and the model's fingerprint; None: no model, or it did not answer.
QueryVector = Callable[[str], "tuple[np.ndarray, str] | None"]
# A search slot of the caller's share for the block, in this thread (waiting its turn, else
# TooManyRequests): ``SearchAdmission.slot`` of the documents' search, so that in-document
# searches count against the same shares as every other search of the process.
Admission = Callable[[Caller], AbstractContextManager[None]]


def unlimited(caller: Caller) -> AbstractContextManager[None]:
    """No admission: for a proxy that never searches (tests of the other tools)."""
    return contextlib.nullcontext()


@dataclass
class _Output:
    """What a tool produced: its result, and the texts in it to mask, cut and count."""

    result: dict[str, Any]
    masked: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    bytes: int = 0
    truncated: bool = False


class Proxy:
    def __init__(
        self,
        store: ProxyStore,
        limiter: Limiter,
        audit: AuditTrail,
        config: ProxyConfig,
        index: Callable[[], DocumentIndex],
        admission: Admission,
        query_vector: QueryVector = lambda text: None,
    ) -> None:
        self.store = store
        self.limiter = limiter
        self.audit = audit
        self.config = config
        self.index = index  # the documents core's index, opened on first use
        self.admission = admission
        self.query_vector = query_vector
        self._tools: dict[str, Callable[[Caller, Any, str, str], _Output]] = {
            "read_doc_section": self._read_section,
            "read_doc_pages": self._read_pages,
            "read_doc_metadata": self._read_metadata,
            "doc_local_search": self._local_search,
            "list_available_tools": self._list_tools,
        }

    def call(
        self,
        caller: Caller,
        tool: str,
        arguments: dict[str, Any] | None,
        trace_id: str | None = None,
    ) -> dict[str, Any]:
        """Run ``tool`` for ``caller`` in the generation ``trace_id`` (None: the caller's
        default generation); its result, or an ``LdimsError`` with the seed's code."""
        started = time.perf_counter()
        doc_id = _doc_id_of(arguments)  # canonical, for the audit of a call refused early
        generation = _generation(trace_id)
        usage = Usage()
        output: _Output | None = None
        try:
            run = self._tools.get(tool)
            if run is None:
                raise UnknownTool(f"No tool named {tool[:64]!r}.", tools=list(TOOLS))
            if not caller.allows(REQUIRED_SCOPE):
                raise AccessDenied(
                    "The API key lacks the 'proxy' (or 'read') scope.", scope=REQUIRED_SCOPE
                )
            parsed = _parse(tool, arguments)
            doc_id = getattr(parsed, "doc_id", None)  # the canonical id, from here on
            usage = self.limiter.admit(_principal(caller), generation, doc_id)
            output = run(caller, parsed, generation, doc_id or "")
        except LdimsError as exc:
            self._audit(caller, tool, doc_id, trace_id, envelope_code(exc), usage, output, started)
            raise
        self._mask_strings(output.result, output.masked)  # last: nothing rewrites text after it
        output.result["meta"] = {
            "masked": output.masked,
            "truncated": output.truncated,
            "rate_limit": self._state(usage, output),
        }
        self._audit(caller, tool, doc_id, trace_id, "ok", usage, output, started)
        return output.result

    # --- the tools ---------------------------------------------------------------------------
    def _read_section(
        self, caller: Caller, args: SectionArguments, generation: str, doc_id: str
    ) -> _Output:
        view = self.store.view(caller, args.doc_id)
        section = next((s for s in view.sections if s.id == args.section_id), None)
        if section is None:
            raise NotFound(
                f"Document {args.doc_id} has no section {args.section_id!r}; "
                "read_doc_metadata lists its sections.",
                doc_id=args.doc_id,
                section_id=args.section_id,
            )
        if section.damaged:
            raise ToolError(
                f"Section {section.id!r} of document {args.doc_id} is damaged.",
                doc_id=args.doc_id,
                section_id=section.id,
            )
        return self._text_result(
            caller,
            generation,
            doc_id,
            section.text,
            {
                "section_id": section.id,
                "heading": section.heading,
                "page_start": section.page_start,
                "page_end": section.page_end,
            },
        )

    def _read_pages(
        self, caller: Caller, args: PagesArguments, generation: str, doc_id: str
    ) -> _Output:
        if args.page_end < args.page_start:
            raise InvalidInput(
                "page_end must not be before page_start.", field="page_end", doc_id=args.doc_id
            )
        wanted = args.page_end - args.page_start + 1
        if wanted > self.config.max_pages:
            raise RateLimitExceeded(
                f"At most {self.config.max_pages} pages a call (MCP_PROXY_MAX_PAGES); "
                f"{wanted} were asked for.",
                limit="pages_per_call",
                maxPages=self.config.max_pages,
            )
        view = self.store.view(caller, args.doc_id)
        count = len(view.pages)
        if args.page_start > count:
            raise NotFound(
                f"Document {args.doc_id} has {count} page(s).",
                doc_id=args.doc_id,
                page_count=count,
            )
        last = min(args.page_end, count)
        text = "\n\n".join(
            f"--- page {number} ---\n{view.pages[number - 1]}"
            for number in range(args.page_start, last + 1)
        )
        return self._text_result(
            caller,
            generation,
            doc_id,
            text,
            {"page_start": args.page_start, "page_end": last, "page_count": count},
        )

    def _read_metadata(
        self, caller: Caller, args: MetadataArguments, generation: str, doc_id: str
    ) -> _Output:
        view = self.store.view(caller, args.doc_id)
        document = view.document
        sections = [
            {
                "section_id": section.id,
                "heading": section.heading,
                "level": section.level,
                "page_start": section.page_start,
                "page_end": section.page_end,
            }
            for section in view.sections[:MAX_SECTIONS_LISTED]
        ]
        result: dict[str, Any] = {
            "doc_id": document.public_id,
            "title": document.title or document.name,
            "format": document.format,
            "language": view.language,
            "page_count": len(view.pages),
            "tags": list(view.tags),
            "product_version": view.product_version,
            "document_version": view.document_version,
            "version": document.version,
            "collection": document.collection,
            "document_type": document.document_type,
            "created_at": document.created_at.isoformat(),
            "sections": sections,
            "sections_total": len(view.sections),
        }
        # Every string of it is masked by _structured_result, before it is counted.
        return self._structured_result(caller, generation, doc_id, result, "sections", {})

    def _local_search(
        self, caller: Caller, args: LocalSearchArguments, generation: str, doc_id: str
    ) -> _Output:
        # The record is enough: the search reads the index, not the stored extraction.
        document = self.store.completed(caller, args.doc_id)
        within = self.config.search_seconds
        # One slot of the caller's share and one deadline for the query's embedding and the
        # search: without them a tenant's flood of these took CPU and threads from everyone.
        with self.admission(caller), deadline_in(within):
            end = time.monotonic() + within
            try:
                dense = self._dense_chunks(document, args.query)
                # A wide window (the whole chunk, as a rule), masked before the snippet is cut
                # and marked (see ldims.proxy.highlight): marks must never split a value.
                hits, total = self.index().search_document(
                    document.id,
                    document.version,
                    args.query,
                    args.max_results,
                    max(WIDE_CHARS, self.config.snippet_chars),
                    within=_left(end),
                    dense=dense,
                )
            except SearchOverdue:
                raise SearchTimeout(timeoutSeconds=within) from None
        terms = list(index_terms(args.query)[0])
        masked: dict[str, int] = {}
        wide_counts: dict[str, int] = {}

        def masked_text(text: str) -> str:
            return self._masked(text, wide_counts)

        snippets = [
            masked_snippet(hit.snippet, terms, self.config.snippet_chars, masked_text)
            for hit in hits
        ]
        for text in snippets:  # what the snippets still hold of what was masked
            for kind, count in _counts_in(text, wide_counts).items():
                masked[kind] = masked.get(kind, 0) + count
        result: dict[str, Any] = {
            "doc_id": document.public_id,
            "results": [
                {
                    "page": hit.page,
                    "line_start": hit.line_start,
                    "line_end": hit.line_end,
                    "score": hit.score,
                    "snippet": text,
                }
                for hit, text in zip(hits, snippets, strict=True)
            ],
            "total_matches": total,
            "ranked_by": (
                "bm25 over the document's indexed chunks, its own statistics"
                + ("" if dense is None else ", fused with the chunks' vector similarity")
            ),
        }
        return self._structured_result(caller, generation, doc_id, result, "results", masked)

    def _dense_chunks(self, document: Document, query: str) -> DenseChunks | None:
        """The document's chunks by the cosine of their vectors with the query's, when its
        vectors of this version and of the configured model exist (else: words alone)."""
        if not document.vectors_model or document.vectors_sha256 != document.sha256:
            return None
        vectors_of = self.index().vectors
        if vectors_of is None:
            return None
        found = self.query_vector(query)
        if found is None or found[1] != document.vectors_model:
            return None
        vector, fingerprint = found
        chunks, scores = vectors_of.document_scores(
            document.id, document.version, vector, fingerprint
        )
        if not chunks.size:
            return None
        return DenseChunks(chunks, scores, self.config.keyword_weight, self.config.dense_weight)

    def _list_tools(
        self, caller: Caller, args: NoArguments, generation: str, doc_id: str
    ) -> _Output:
        return _Output({"tools": list(DOC_TOOLS)})

    # --- text out: masked, cut to the call's and the generation's budget ----------------------
    def _masked(self, text: str, counts: dict[str, int]) -> str:
        masked = mask(text, self.config.mask_kinds)
        for kind, count in masked.counts.items():
            counts[kind] = counts.get(kind, 0) + count
        return masked.text

    def _mask_strings(self, value: Any, counts: dict[str, int]) -> Any:
        """``value`` with every string in it masked, in place for dicts and lists (but for
        :data:`UNMASKED_FIELDS`)."""
        if isinstance(value, str):
            return self._masked(value, counts)
        if isinstance(value, dict):
            for key, item in value.items():
                if key not in UNMASKED_FIELDS:
                    value[key] = self._mask_strings(item, counts)
        elif isinstance(value, list):
            value[:] = [self._mask_strings(item, counts) for item in value]
        return value

    def _text_result(
        self,
        caller: Caller,
        generation: str,
        doc_id: str,
        text: str,
        fields: dict[str, Any],
    ) -> _Output:
        masked: dict[str, int] = {}
        # A long text (a 3 MB page) is first cut, at a line end, to what can hold the token
        # limit many times over, so masking and counting never run over megabytes. What the
        # pre-cut leaves at its end (perhaps half an e-mail address) lies far past the token
        # cut that follows and never reaches the answer.
        bound = self.config.chunk_limit_tokens * PRECUT_CHARS_PER_TOKEN
        precut = len(text) > bound
        if precut:
            line_end = text.rfind("\n", 0, bound)
            text = text[: line_end if line_end > bound // 2 else bound]
        clean = self._masked(text, masked)
        if "heading" in fields:
            fields["heading"] = self._masked(fields["heading"], masked)
        cut = trim_to_tokens(clean, self.config.chunk_limit_tokens)
        if precut and not cut.truncated:  # only whitespace-like text is this sparse: cut more
            cut = trim_to_tokens(cut.text, max(cut.tokens - 64, 0))
        grant = self._grant(caller, generation, doc_id, cut.tokens, len(cut.text.encode()))
        final = cut
        if grant.tokens < cut.tokens or grant.bytes < len(cut.text.encode()):
            final = trim_to_tokens(cut.text, grant.tokens)
            while len(final.text.encode()) > grant.bytes and final.tokens > 0:
                final = trim_to_tokens(final.text, max(final.tokens * 9 // 10, 0))
        size = len(final.text.encode())
        self.limiter.refund(
            _principal(caller), generation, doc_id, grant.tokens - final.tokens, grant.bytes - size
        )
        if not final.text and cut.text:  # what is left of the budget holds no whole sentence
            self._spent(caller, generation, doc_id)
        result = {"text": final.text, **fields, "tokens": final.tokens}
        returned = _counts_in(final.text, masked)
        output = _Output(result, returned, final.tokens, size, cut.truncated or final.truncated)
        # The whole text's tokens, when it was counted (not after a pre-cut).
        output.result["tokens_total"] = None if precut else cut.original_tokens
        return output

    def _structured_result(
        self,
        caller: Caller,
        generation: str,
        doc_id: str,
        result: dict[str, Any],
        list_key: str,
        masked: dict[str, int],
    ) -> _Output:
        """A result of many short texts, each masked first: counted as its JSON; what the budget
        does not grant is dropped from the end of its ``list_key`` list, never cut mid-item."""
        self._mask_strings(result, masked)
        body = json.dumps(result, ensure_ascii=False)
        tokens, size = count_tokens(body), len(body.encode())
        grant: Grant = self._grant(caller, generation, doc_id, tokens, size)
        truncated = False
        items = result[list_key]
        while items and (tokens > grant.tokens or size > grant.bytes):
            items.pop()
            truncated = True
            body = json.dumps(result, ensure_ascii=False)
            tokens, size = count_tokens(body), len(body.encode())
        if tokens > grant.tokens or size > grant.bytes:
            self.limiter.refund(_principal(caller), generation, doc_id, grant.tokens, grant.bytes)
            self._spent(caller, generation, doc_id)
        self.limiter.refund(
            _principal(caller), generation, doc_id, grant.tokens - tokens, grant.bytes - size
        )
        return _Output(result, masked, tokens, size, truncated)

    def _spent(self, caller: Caller, generation: str, doc_id: str) -> None:
        retry = self.limiter.retry_after(_principal(caller), generation, doc_id or "-")
        raise RateLimitExceeded(
            "The output budget is spent (MCP_RATE_LIMIT_TOKEN_OUTPUT / "
            f"MCP_PROXY_MAX_OUTPUT_BYTES / MCP_PROXY_DOC_BYTES_PER_HOUR); retry in {retry} s.",
            limit="output_per_generation",
            retryAfterSeconds=retry,
        )

    def _grant(self, caller: Caller, generation: str, doc_id: str, tokens: int, size: int) -> Grant:
        if tokens <= 0 and size <= 0:  # nothing to return (an empty page): nothing to reserve
            return Grant(0, 0, Usage())
        return self.limiter.grant(_principal(caller), generation, doc_id or "-", tokens, size)

    def _state(self, usage: Usage, output: _Output) -> dict[str, Any]:
        limits = self.limiter.limits
        return {
            "document_calls": usage.calls_on_document,
            "document_calls_limit": limits.calls_per_document,
            "output_tokens_limit": limits.token_output,
            "output_bytes_limit": limits.output_bytes,
            "returned_tokens": output.tokens,
            "returned_bytes": output.bytes,
        }

    def _audit(
        self,
        caller: Caller,
        tool: str,
        doc_id: str | None,
        trace_id: str | None,
        outcome: str,
        usage: Usage,
        output: _Output | None,
        started: float,
    ) -> None:
        self.audit.record(
            AuditEntry(
                tenant=caller.tenant,
                tool=tool[:64],
                outcome=outcome,
                transport=caller.transport,
                doc_id=doc_id,
                user_id=caller.user,
                key_id=caller.key_id,
                trace_id=(trace_id or "")[:MAX_TRACE_CHARS] or None,
                tokens=output.tokens if output else 0,
                bytes=output.bytes if output else 0,
                masked=output.masked if output else {},
                rate_state={"document_calls": usage.calls_on_document},
                latency_ms=(time.perf_counter() - started) * 1000,
            )
        )


def _left(end: float) -> float:
    """Seconds left before ``end`` (a monotonic time); past it, the search stops at once."""
    left = end - time.monotonic()
    if left <= 0:
        raise SearchOverdue
    return left


def _counts_in(text: str, masked: dict[str, int]) -> dict[str, int]:
    """The masked counts of what a cut text still holds (its placeholders, at most the
    count masked in the whole text: a placeholder may have been in the document already)."""
    counts = {kind: min(count, text.count(f"[{kind.upper()}]")) for kind, count in masked.items()}
    return {kind: count for kind, count in counts.items() if count}


def _parse(tool: str, arguments: dict[str, Any] | None) -> Any:
    try:
        return ARGUMENTS[tool].model_validate(arguments or {})
    except ValidationError as exc:
        problems = [
            {"field": ".".join(map(str, error["loc"])) or "arguments", "issue": error["msg"]}
            for error in exc.errors(include_url=False, include_input=False)
        ]
        raise InvalidInput(
            f"Invalid arguments for {tool}: " + "; ".join(p["field"] for p in problems) + ".",
            problems=problems,
        ) from None


def _doc_id_of(arguments: dict[str, Any] | None) -> str | None:
    """The canonical id of the arguments' ``doc_id``; None when there is no valid one."""
    doc_id = (arguments or {}).get("doc_id")
    if not isinstance(doc_id, str) or len(doc_id) > 256:
        return None
    try:
        return canonical_doc_id(doc_id)
    except ValueError:
        return None


def _generation(trace_id: str | None) -> str:
    """The generation a call belongs to: its trace id, else the caller's default one (all
    calls without a trace id share it, so leaving it out gains nothing)."""
    if trace_id is None or not trace_id.strip():
        return "-"
    if len(trace_id) > MAX_TRACE_CHARS:
        raise InvalidInput(
            f"trace_id is longer than {MAX_TRACE_CHARS} characters.", field="trace_id"
        )
    return trace_id.strip()


def _principal(caller: Caller) -> str:
    """Whom limits count against: the key (or the tenant without keys), and the user a
    trusted service acts for."""
    who = caller.key_id or f"tenant:{caller.tenant}"
    return f"{who}/{caller.tenant}/{caller.user or '-'}"
