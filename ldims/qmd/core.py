"""The qmd core: qmd's six tools over the documents core — search, vsearch, query, get,
multi_get, status — for the MCP toolset, the ``qmd://`` resource and the CLI alike.

Every document of the tenant is a qmd file: ``collection/path``, the path being a folder
file's path under its folder or an uploaded document's name. Its text is the extracted text
(a Markdown or text file's own lines; another format's pages, a ``<!-- page N -->`` line in
place of the blank line between two pages, so line numbers stay those of search hits). What
is deliberately not as qmd 2.8.3 does it is listed in docs/mcp.md (qmd toolset).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rapidfuzz import process
from rapidfuzz.distance import Levenshtein
from sqlalchemy import func, or_, select
from wcmatch import glob

from indexer import qmd_title
from ldims.caller import Caller
from ldims.catalog import Catalog, Document, DocumentStatus, public_document_id, repository
from ldims.documents import Documents, explained
from ldims.documents.extract_text import (
    Window,
    read_extract,
    text_measures,
    text_pieces,
    window,
)
from ldims.errors import InvalidInput, LdimsError, QueryUnprocessable
from ldims.qmd.errors import FileNotFound, NoFilesMatched, NoVectors
from ldims.qmd.folders import TooManyPatterns, compile_glob
from ldims.qmd.library import ContextInfo, Library
from ldims.qmd.text import (
    SNIPPET_CHARS,
    add_line_numbers,
    decode_path,
    docid,
    docid_of,
    parse_file_argument,
    qmd_uri,
    snippet,
    with_context,
)
from ldims.settings import Settings
from ldims.text import ExtractionResult, joined, page_texts

DEFAULT_LIMIT = 10
MAX_LIMIT = 100
DEFAULT_MAX_BYTES = 10240  # the seed's (qmd 2.8.3: 65536)
SIMILAR_GET = (5, 5)  # (largest edit distance, how many): qmd's for get
SIMILAR_MULTI = (3, 3)  # and for a comma list's names
SIMILAR_SCAN = 20_000  # paths compared at most for suggestions (bounds one call's cost)
GLOB_SCAN = 50_000  # documents a multi_get glob is matched against at most
_GLOB_FLAGS = glob.GLOBSTAR | glob.BRACE | glob.DOTGLOB
Mode = Literal["keyword", "dense", "hybrid"]


@dataclass(frozen=True)
class QmdFile:
    """A document as qmd names it."""

    document_id: str
    collection: str
    path: str
    sha256: str | None
    status: str
    title: str | None
    format: str | None

    @property
    def display_path(self) -> str:
        return f"{self.collection}/{self.path}"

    @property
    def docid(self) -> str:
        return docid(self.sha256 or "")


@dataclass(frozen=True)
class SearchResult:
    docid: str
    file: str
    title: str
    score: float
    context: str | None
    snippet: str
    line: int
    # explain: why it ranks — vsearch/query: the calibrated evidence (as searchDocuments'),
    # search: FTS5's BM25 and the rank.
    explain: dict[str, object] | None = None


@dataclass(frozen=True)
class Resource:
    uri: str
    name: str
    title: str
    text: str
    mime_type: str = "text/markdown"


@dataclass(frozen=True)
class MultiGetEntry:
    """A file of ``multi_get``: its resource, or why it was skipped."""

    display_path: str
    resource: Resource | None = None
    skipped: str | None = None  # qmd's notice


@dataclass(frozen=True)
class MultiGet:
    errors: list[str]
    entries: list[MultiGetEntry]


@dataclass(frozen=True)
class CollectionStatus:
    name: str
    path: str | None
    pattern: str | None
    documents: int
    lastUpdated: str  # noqa: N815


@dataclass(frozen=True)
class EmbeddingBacklog:
    """The tenant's own documents still to embed, its recent rate and the time to done."""

    documents: int
    chunks: int
    failedDocuments: int  # noqa: N815
    chunksPerSecond: float | None  # noqa: N815
    etaSeconds: float | None  # noqa: N815
    summary: str


@dataclass(frozen=True)
class Status:
    totalDocuments: int  # noqa: N815
    needsEmbedding: int  # noqa: N815
    hasVectorIndex: bool  # noqa: N815
    collections: list[CollectionStatus]
    embeddingBacklog: EmbeddingBacklog | None = None  # noqa: N815  (None: vectors off)

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


class Qmd:
    """qmd's tools for one process (every call takes the caller: the tenant is in every
    query)."""

    def __init__(self, settings: Settings, catalog: Catalog, documents: Documents) -> None:
        self.settings = settings
        self.catalog = catalog
        self.documents = documents
        self.library = Library(settings, catalog, documents)

    # --- search ----------------------------------------------------------------------------
    def search(
        self,
        caller: Caller,
        query: str,
        mode: Mode = "keyword",
        limit: int = DEFAULT_LIMIT,
        min_score: float | None = None,
        collection: str | None = None,
        explain: bool = False,
    ) -> list[SearchResult]:
        """``search`` (keyword: FTS5's BM25 as qmd scores it), ``vsearch`` (dense) and
        ``query`` (hybrid): the best documents, each with its best chunk's snippet, scores 0..1
        at or over ``min_score`` — for vsearch and query the calibrated probability of
        relevance, and by default the server's floor (``LDIMS_SEARCH_MIN_SCORE``)."""
        _check_limit(limit)
        if min_score is not None and not 0.0 <= min_score <= 1.0:
            raise InvalidInput("minScore is from 0 to 1.", field="minScore")
        self.library.check_collection(caller, collection)
        if mode == "keyword":
            return self._bm25(caller, query, limit, min_score or 0.0, collection, explain)
        if mode == "dense":
            self._check_vectors(caller)
        # qmd's query: its position-aware blend when reranked.
        found, _notes = self.documents.search.ranked(
            caller,
            query,
            mode,
            limit,
            collection,
            rerank_blend="position",
            min_score=min_score,
            explain=explain,
        )
        if not found.hits:
            return []
        files = self._files_by_id(caller, [hit.document_id for hit in found.hits])
        contexts = self.library.contexts(caller)
        results = []
        for hit in found.hits:
            file = files.get(hit.document_id)
            if file is None:
                continue  # deleted since the index answered
            score = hit.score  # calibrated: 4 decimals, a weak result is not a flat 0
            line, excerpt = snippet(hit.text, hit.line_start, query, SNIPPET_CHARS)
            results.append(
                SearchResult(
                    docid=file.docid,
                    file=file.display_path,
                    title=qmd_title(file.title, file.path),
                    score=score,
                    context=self.library.context_of(contexts, file.collection, file.path),
                    snippet=excerpt,
                    line=line,
                    explain=explained(hit.explanation),
                )
            )
        return results

    def _bm25(
        self,
        caller: Caller,
        query: str,
        limit: int,
        min_score: float,
        collection: str | None,
        explain: bool = False,
    ) -> list[SearchResult]:
        """qmd's BM25 search: its FTS5 ranking and scores, snippets from the whole text."""
        try:
            found = self.documents.search.bm25(caller, query, limit, collection)
        except QueryUnprocessable:
            return []  # qmd: a query of nothing searchable (only "-words") finds nothing
        files = self._files_by_id(caller, [hit.document_id for hit in found])
        contexts = self.library.contexts(caller)
        results = []
        for rank, hit in enumerate(found, 1):
            file = files.get(hit.document_id)
            score = round(hit.score, 2)
            if file is None or score < min_score:
                continue
            why = {"bm25": round(hit.bm25, 4), "rank": rank, "score": score}
            line, excerpt = snippet(hit.body, hit.line_start, query, SNIPPET_CHARS)
            results.append(
                SearchResult(
                    docid=file.docid,
                    file=file.display_path,
                    title=qmd_title(file.title, file.path),
                    score=score,
                    context=self.library.context_of(contexts, file.collection, file.path),
                    snippet=excerpt,
                    line=line,
                    explain=why if explain else None,
                )
            )
        return results

    def _check_vectors(self, caller: Caller) -> None:
        fingerprint = self.documents.fingerprint
        if fingerprint is None:
            raise NoVectors(
                "Semantic search is off (LDIMS_EMBEDDING_MODEL=none): there is no vector index."
            )
        with self.catalog.session() as session:
            embedded = session.scalar(
                select(func.count()).where(
                    Document.tenant == caller.tenant,
                    Document.vectors_model == fingerprint,
                    Document.vectors_sha256 == Document.sha256,
                )
            )
        if not embedded:
            raise NoVectors()

    # --- get -------------------------------------------------------------------------------
    def get(
        self,
        caller: Caller,
        file: str,
        from_line: int | None = None,
        max_lines: int | None = None,
        line_numbers: bool = False,
        from_char: int = 0,
    ) -> Resource:
        """One document by path, ``#docid``, ``qmd://`` URI, ``path:120`` or ``path:120:40``
        (``from_char``: from that character of the first line) — at most
        ``LDIMS_MCP_MAX_CONTENT_CHARS`` characters, a longer part ending with the ``get``
        that reads on."""
        if from_char < 0:
            raise InvalidInput("fromChar is at least 0.", field="fromChar")
        argument = parse_file_argument(file, from_line, max_lines)
        found = self._find(caller, argument.lookup)
        if found is None:
            similar = self._similar(caller, argument.lookup, *SIMILAR_GET)
            message = f"Document not found: {file}"
            if similar:
                message += "\n\nDid you mean one of these?\n" + "\n".join(
                    f"  - {path}" for path in similar
                )
            raise FileNotFound(message, file=file, similarFiles=similar)
        contexts = self.library.contexts(caller)
        limit = self._room(contexts, found)
        part = self._window(
            caller,
            found,
            limit,
            argument.from_line or 1,
            from_char,
            argument.max_lines,
            line_numbers,
        )
        text = part.text + _continuation(found, part, argument.max_lines, line_numbers, limit)
        return self._resource(caller, found, text, contexts)

    def read_uri(self, caller: Caller, path: str) -> Resource:
        """The ``qmd://{+path}`` resource: the document line-numbered (qmd's), at most
        ``LDIMS_MCP_MAX_CONTENT_CHARS`` characters, a longer one ending with the ``get`` that
        reads on."""
        lookup = decode_path(path)
        if lookup.startswith("/") or ".." in lookup.split("/"):
            raise InvalidInput("A qmd:// path is collection/relative-path.", field="uri")
        found = self._find(caller, lookup)
        if found is None:
            raise FileNotFound(f"Document not found: {lookup}", file=lookup)
        contexts = self.library.contexts(caller)
        limit = self._room(contexts, found)
        part = self._window(caller, found, limit, numbered=True)
        text = part.text + _continuation(found, part, None, True, limit)
        return self._resource(caller, found, text, contexts)

    # --- multi_get -------------------------------------------------------------------------
    def multi_get(
        self,
        caller: Caller,
        pattern: str,
        max_lines: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        line_numbers: bool = False,
    ) -> MultiGet:
        """Documents by glob, comma list or docid; larger ones than ``max_bytes`` (characters,
        as qmd counts; never more than ``LDIMS_MCP_MAX_CONTENT_CHARS``) skipped with a notice;
        ``max_lines`` each, with qmd's truncation notice. The whole answer holds at most
        ``LDIMS_MCP_MAX_CONTENT_CHARS`` characters of text: the files past it are skipped
        with a notice too (each read alone by ``get``)."""
        if max_bytes < 1:
            raise InvalidInput("maxBytes is at least 1.", field="maxBytes")
        if max_lines is not None and max_lines < 1:
            raise InvalidInput("maxLines is at least 1.", field="maxLines")
        errors: list[str] = []
        listed = "," in pattern and not any(char in pattern for char in "*?{")
        if listed or docid_of(pattern):
            files = []
            names = [name.strip() for name in pattern.split(",") if name.strip()]
            if len(names) > MAX_LIMIT:
                raise InvalidInput(f"At most {MAX_LIMIT} names.", field="pattern")
            for name in names:
                file, error = self._resolve_name(caller, name)
                if file is None:
                    errors.append(error)
                else:
                    files.append(file)
        else:
            files = self._glob(caller, pattern)
            if not files:
                errors.append(f"No files matched pattern: {pattern}")
        if not files and not errors:
            raise NoFilesMatched(f"No files matched pattern: {pattern}", pattern=pattern)
        entries = []
        contexts = self.library.contexts(caller)  # once, not per file
        records = self._records(caller, files[:MAX_LIMIT])  # once, not per file
        answer = self.settings.mcp_max_content_chars
        per_file = min(max_bytes, answer)  # qmd's bound, within one read's
        for file in files[:MAX_LIMIT]:
            try:
                part = self._window(caller, file, per_file, record=records.get(file.document_id))
            except (LdimsError, OSError) as exc:  # the file's error, not the call's
                errors.append(f"{file.display_path}: {getattr(exc, 'message', None) or exc}")
                continue
            if part.next_line is not None:
                size = self._length(caller, file, records.get(file.document_id))
                reason = f"File too large ({round(size / 1024)}KB > {round(per_file / 1024)}KB)"
                entries.append(MultiGetEntry(file.display_path, skipped=_skipped(file, reason)))
                continue
            text = part.text
            if max_lines is not None:
                lines = text.split("\n")
                text = "\n".join(lines[:max_lines])
                if len(lines) > max_lines:
                    text += f"\n\n[... truncated {len(lines) - max_lines} more lines]"
            if line_numbers:
                text = add_line_numbers(text)
            resource = self._resource(caller, file, text, contexts)
            if len(resource.text) > answer:
                reason = f"the answer is full ({self.settings.mcp_max_content_chars} characters)"
                entries.append(MultiGetEntry(file.display_path, skipped=_skipped(file, reason)))
                continue
            answer -= len(resource.text)
            entries.append(MultiGetEntry(file.display_path, resource))
        if len(files) > MAX_LIMIT:
            errors.append(f"{len(files) - MAX_LIMIT} more files matched; narrow the pattern.")
        return MultiGet(errors, entries)

    # --- status ----------------------------------------------------------------------------
    def status(self, caller: Caller) -> Status:
        fingerprint = self.documents.fingerprint
        with self.catalog.session() as session:
            total = session.scalar(select(func.count()).where(Document.tenant == caller.tenant))
            needs = embedded = 0
            if fingerprint is not None:
                current = (Document.vectors_model == fingerprint) & (
                    Document.vectors_sha256 == Document.sha256
                )
                embedded = session.scalar(
                    select(func.count()).where(Document.tenant == caller.tenant, current)
                )
                needs = session.scalar(
                    select(func.count(func.distinct(Document.sha256))).where(
                        Document.tenant == caller.tenant,
                        Document.status.in_(
                            [
                                DocumentStatus.QUEUED.value,
                                DocumentStatus.PROCESSING.value,
                                DocumentStatus.COMPLETED.value,
                            ]
                        ),
                        or_(
                            Document.vectors_model.is_(None),
                            Document.vectors_model != fingerprint,
                            Document.vectors_sha256.is_(None),
                            Document.vectors_sha256 != Document.sha256,
                        ),
                    )
                )
        collections = []
        for info in self.library.collections(caller):
            updated = (
                info.last_updated.isoformat(timespec="milliseconds") if info.last_updated else ""
            )
            collections.append(
                CollectionStatus(
                    info.name,
                    info.path,
                    info.pattern,
                    info.documents,
                    updated.replace("+00:00", "Z"),
                )
            )
        collections.sort(key=lambda c: c.lastUpdated, reverse=True)
        found = self.documents.embedding_backlog(caller)
        backlog = (
            EmbeddingBacklog(
                found.documents,
                found.chunks,
                found.failed,
                found.chunks_per_second,
                found.eta_seconds,
                found.describe(),
            )
            if found is not None
            else None
        )
        return Status(int(total or 0), int(needs or 0), bool(embedded), collections, backlog)

    # --- finding files ---------------------------------------------------------------------
    def _find(self, caller: Caller, lookup: str) -> QmdFile | None:
        """qmd's lookup: a docid, a ``qmd://`` URI, ``collection/path``, a path in any
        collection, then a path ending in ``/lookup`` (whole segments only)."""
        lookup = lookup.strip()
        if not lookup:
            return None
        hexdigits = docid_of(lookup)
        if hexdigits is not None:
            found = self._query(caller, Document.sha256.like(f"{hexdigits}%"))
            if found:
                return found[0]
        if lookup.startswith("qmd://"):
            lookup = decode_path(lookup[len("qmd://") :])
        collection, _, path = lookup.partition("/")
        if path:
            found = self._query(caller, *_at(collection, path))
            if found:
                return found[0]
        found = self._query(caller, *_named(lookup))
        if found:
            return found[0]
        return self._suffix(caller, lookup)

    def _resolve_name(self, caller: Caller, name: str) -> tuple[QmdFile | None, str]:
        """A comma list's name as qmd resolves it (an ambiguous one is an error)."""
        hexdigits = docid_of(name)
        candidates: list[QmdFile] = []
        if hexdigits is not None:
            candidates = self._query(caller, Document.sha256.like(f"{hexdigits}%"))[:1]
        elif name.startswith("qmd://"):
            collection, _, path = decode_path(name[len("qmd://") :]).partition("/")
            candidates = self._query(caller, *_at(collection, path))
        else:
            collection, _, path = name.partition("/")
            if path:
                candidates = self._query(caller, *_at(collection, path))
            if not candidates:
                candidates = self._query(caller, *_named(name))
            if not candidates:
                candidates = self._suffixes(caller, name)
        if len(candidates) == 1:
            return candidates[0], ""
        if candidates:
            uris = ", ".join(f"qmd://{c.display_path}" for c in candidates)
            return None, f"Ambiguous path {name}: {uris}"
        similar = self._similar(caller, name, *SIMILAR_MULTI)
        message = f"File not found: {name}"
        if similar:
            message += f" (did you mean: {', '.join(similar)}?)"
        return None, message

    def _suffix(self, caller: Caller, lookup: str) -> QmdFile | None:
        found = self._suffixes(caller, lookup)
        return found[0] if found else None

    def _suffixes(self, caller: Caller, lookup: str) -> list[QmdFile]:
        escaped = lookup.replace("#", "##").replace("%", "#%").replace("_", "#_")
        return self._query(
            caller,
            or_(
                Document.source_path.like(f"%/{escaped}", escape="#"),
                Document.source_path.is_(None) & Document.name.like(f"%/{escaped}", escape="#"),
            ),
        )

    def _glob(self, caller: Caller, pattern: str) -> list[QmdFile]:
        """Documents whose ``qmd://collection/path``, ``path`` or ``collection/path`` the
        glob matches (qmd's three forms)."""
        try:
            matcher = compile_glob(pattern, _GLOB_FLAGS)  # once
        except TooManyPatterns as exc:
            raise InvalidInput(f"The pattern's {exc}.", field="pattern") from None
        matched = []
        for file in self._query(caller, *_glob_prefilter(pattern), limit=GLOB_SCAN):
            forms = (f"qmd://{file.display_path}", file.path, file.display_path)
            if any(matcher.match(form) for form in forms):
                matched.append(file)
        return matched

    def _similar(self, caller: Caller, lookup: str, distance: int, limit: int) -> list[str]:
        """Up to ``limit`` paths within ``distance`` edits of ``lookup`` (lowercase), nearest
        first (qmd's "did you mean")."""
        with self.catalog.session() as session:
            paths = list(
                session.scalars(
                    select(func.coalesce(Document.source_path, Document.name))
                    .where(Document.tenant == caller.tenant)
                    .order_by(Document.created_at)
                    .limit(SIMILAR_SCAN)
                )
            )
        lowered = [path.lower() for path in paths]
        found = process.extract(
            lookup.lower(),
            lowered,
            scorer=Levenshtein.distance,
            score_cutoff=distance,
            limit=limit,
        )
        found.sort(key=lambda match: (match[1], match[2]))  # by distance, then catalog order
        return [paths[index] for _, _, index in found]

    def _query(self, caller: Caller, *where: object, limit: int = 1000) -> list[QmdFile]:
        # Columns, not ORM objects: a glob reads every row of the tenant.
        with self.catalog.session() as session:
            rows = session.execute(
                select(*_COLUMNS)
                .where(Document.tenant == caller.tenant, *where)  # type: ignore[arg-type]
                .order_by(Document.collection, Document.source_path, Document.name, Document.id)
                .limit(limit)
            )
            return [
                QmdFile(
                    row.id,
                    row.collection,
                    row.source_path or row.name,
                    row.sha256,
                    row.status,
                    row.title,
                    row.format,
                )
                for row in rows
            ]

    def _files_by_id(self, caller: Caller, ids: list[str]) -> dict[str, QmdFile]:
        found = self._query(caller, Document.id.in_(ids))
        return {file.document_id: file for file in found}

    # --- reading ---------------------------------------------------------------------------
    def _body(self, caller: Caller, file: QmdFile) -> str:
        """The document's text (see the module); the states' errors as the documents core
        raises them (still processing, failed)."""
        _, result = self.documents.reader.content(caller, public_document_id(file.document_id))
        return _joined(result)

    def _window(
        self,
        caller: Caller,
        file: QmdFile,
        limit: int,
        from_line: int = 1,
        from_char: int = 0,
        max_lines: int | None = None,
        numbered: bool = False,
        record: Document | None = None,
    ) -> Window:
        """Lines of the document's text within ``limit`` characters, read from its extract
        in pieces (never the whole text in memory); ``record``: its catalog row, if read."""
        path = self._extract(caller, file, record)
        return read_extract(
            path,
            lambda: window(
                text_pieces(path, _page_marker), limit, from_line, from_char, max_lines, numbered
            ),
            lambda result: window(
                [_joined(result)], limit, from_line, from_char, max_lines, numbered
            ),
        )

    def _records(self, caller: Caller, files: list[QmdFile]) -> dict[str, Document]:
        """The catalog rows of ``files`` (the caller's), in one query."""
        with self.catalog.session() as session:
            found = repository.get_documents(session, {file.document_id for file in files})
        return {key: row for key, row in found.items() if row.tenant == caller.tenant}

    def _extract(self, caller: Caller, file: QmdFile, record: Document | None) -> Path:
        """The file's stored extract, or the error its state calls for."""
        reader = self.documents.reader
        if record is None:
            return reader.extract_file(caller, public_document_id(file.document_id))[1]
        return reader.extract_of(record)[1]

    def _length(self, caller: Caller, file: QmdFile, record: Document | None = None) -> int:
        """The length of the document's text, from its extract's remembered sizes (a glob
        over many large files walks each once, not on every multi_get)."""
        path = self._extract(caller, file, record)
        measures = text_measures(path)
        markers = sum(len(_page_marker(number)) for number in range(2, measures.pages + 1))
        return measures.page_chars + markers

    def _room(self, contexts: list[ContextInfo], file: QmdFile) -> int:
        """What one read may hold of the text: the bound less the context's header."""
        context = self.library.context_of(contexts, file.collection, file.path)
        header = len(with_context("", context))
        return max(1000, self.settings.mcp_max_content_chars - header)

    def _resource(
        self,
        caller: Caller,
        file: QmdFile,
        text: str,
        contexts: list[ContextInfo] | None = None,
    ) -> Resource:
        if contexts is None:
            contexts = self.library.contexts(caller)
        context = self.library.context_of(contexts, file.collection, file.path)
        title = qmd_title(file.title, file.path)
        return Resource(
            uri=qmd_uri(file.display_path),
            name=file.display_path,
            title=title,
            text=with_context(text, context),
        )

    def contexts(self, caller: Caller) -> list[ContextInfo]:
        return self.library.contexts(caller)


def _joined(result: ExtractionResult) -> str:
    """The text of an extract read whole: its pages, a page marker between two."""
    return joined(page_texts(result), _page_marker)


def _page_marker(number: int) -> str:
    """The line in place of the blank one before page ``number`` (>= 2; one line, as
    :mod:`ldims.text.lines` numbers them)."""
    return f"\n<!-- page {number} -->\n"


def _skipped(file: QmdFile, reason: str) -> str:
    """qmd's notice of a file ``multi_get`` left out."""
    return (
        f"[SKIPPED: {file.display_path} - {reason}. Use 'get' with "
        f'file="{file.display_path}" to retrieve.]'
    )


def _continuation(
    file: QmdFile, part: Window, max_lines: int | None, numbered: bool, limit: int
) -> str:
    """The notice ending a read that the size bound stopped: what was shown and the ``get``
    that reads on (nothing when the read is whole, or stopped where it was asked to)."""
    if not part.cut or part.next_line is None:
        return ""
    where = f"{file.display_path}:{part.next_line}"
    if max_lines is not None:
        where += f":{max_lines - (part.next_line - part.first_line)}"
    call = f'get file="{where}"'
    if part.next_char:
        call += f" fromChar={part.next_char}"
    if numbered:
        call += " lineNumbers=true"
    if part.next_char:  # one long line, cut inside
        shown = f"line {part.last_line} up to its character {part.next_char}"
    elif part.last_line > part.first_line:
        shown = f"lines {part.first_line}-{part.last_line}"
    else:
        shown = f"line {part.first_line}"
    return f"\n\n[... truncated at {limit} characters: {shown} shown. Continue with {call}]"


def _check_limit(limit: int) -> None:
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit is an integer from 1 to {MAX_LIMIT}.", field="limit")


def _at(collection: str, path: str) -> tuple[object, ...]:
    return (Document.collection == collection, *_named(path))


def _glob_prefilter(pattern: str) -> tuple[object, ...]:
    """The catalog's pre-selection for a glob: the rows one of the three forms of whose name
    starts with the pattern's literal head (before its first ``* ? [ {`` or escape). Done by
    the database, it spares matching every row of the tenant in Python (a glob of ten files
    among thousands); LIKE is case-blind on SQLite, so it selects a superset there and the
    glob decides."""
    head = re.split(r"[*?\[{\\]", pattern, maxsplit=1)[0]
    if not head:
        return ()
    like = head.replace("#", "##").replace("%", "#%").replace("_", "#_") + "%"
    path = func.coalesce(Document.source_path, Document.name)
    display = Document.collection + "/" + path
    return (
        or_(
            path.like(like, escape="#"),
            display.like(like, escape="#"),
            ("qmd://" + display).like(like, escape="#"),
        ),
    )


def _named(path: str) -> tuple[object, ...]:
    return (
        or_(
            Document.source_path == path,
            Document.source_path.is_(None) & (Document.name == path),
        ),
    )


_COLUMNS = (
    Document.id,
    Document.collection,
    Document.source_path,
    Document.name,
    Document.sha256,
    Document.status,
    Document.title,
    Document.format,
)
