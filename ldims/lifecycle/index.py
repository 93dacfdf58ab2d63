"""The index's writes: a document version's chunks (Whoosh) and qmd's lexicon rows, written
together by the index's single writer (the index worker; ``ldims reindex`` and ``ldims
serve`` before any worker starts).

- **Index a version** (the index worker's batches): :func:`commit_part` writes a part of the
  waiting versions in one commit (Whoosh and the lexicon replace a document's old chunks and
  rows at once: a new version is visible whole or not at all), then
  :func:`complete_written` marks them completed in the catalog — in that order, so a crash
  between leaves a version indexed but not completed, which the reconciler re-drives and
  the index writes over; a document deleted while its part was written has its chunks
  removed here.
- **Delete** (:func:`delete_from_index`): after the row is gone (only documents the catalog
  no longer has are removed); a lost delete task is the reconciler's orphan sweep.
- **Repair and rebuild**: :func:`reindex_completed` writes completed versions again from
  their extractions; :func:`build` writes a new index folder of every completed version;
  :func:`follow_toolset` keeps the lexicon only while the qmd toolset is served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from indexer import DocumentIndex, IndexBusy, IndexedDocument
from ldims.catalog import Catalog, Document, DocumentStatus, repository, utcnow
from ldims.errors import TransientError
from ldims.extracts import ExtractStore
from ldims.lifecycle import states
from ldims.settings import Settings
from ldims.text import ExtractionResult, chunk_pages

log = logging.getLogger(__name__)


class IndexStores(Protocol):
    """What the index's writes need (the workers' ``Runtime`` has it)."""

    settings: Settings
    catalog: Catalog
    extracts: ExtractStore

    @property
    def index_writer(self) -> DocumentIndex: ...


@dataclass(frozen=True)
class IndexJob:
    """Index the extracted version ``sha256`` of a document (what an index task names)."""

    document_id: str
    sha256: str


@dataclass
class Loaded:
    job: IndexJob
    result: ExtractionResult
    indexed: IndexedDocument


def commit_part(index: DocumentIndex, part: list[Loaded], alone: bool = False) -> list[Loaded]:
    """Write ``part`` in one commit; return the documents left out because adding them failed.

    A failed add leaves the writer holding part of that document, so the commit is cancelled
    and made again without it. ``alone``: the one document's failure is raised instead.
    """
    remaining, failed = list(part), []
    while remaining:
        adding: Loaded | None = None
        try:
            with index.batch() as batch:
                for adding in remaining:
                    batch.replace(adding.indexed)
                adding = None
        except IndexBusy as exc:
            raise TransientError("INDEX_BUSY", str(exc)) from exc
        except Exception:
            if adding is None or alone:
                raise
            log.warning(
                "index %s: could not be written with its batch; trying it alone",
                adding.job.document_id,
            )
            failed.append(adding)
            remaining.remove(adding)
            continue
        break
    return failed


def complete_written(rt: IndexStores, written: list[Loaded], completed: list[IndexJob]) -> None:
    """Mark the written versions completed; remove the chunks of documents deleted meanwhile."""
    gone = []
    with rt.catalog.session() as session:
        for loaded in written:
            job, result = loaded.job, loaded.result
            done = states.complete(
                session,
                job.document_id,
                job.sha256,
                extracted_at=utcnow(),
                extractor=result.extractor,
                page_count=len(result.pages),
                title=result.metadata.get("title"),
                language=result.metadata.get("language"),
                format=result.format,
                chunk_count=len(loaded.indexed.chunks),
                **ocr_facts(result),
            )
            if done:
                completed.append(job)
            # Not completed: replaced (its new version's task writes over these chunks) or
            # deleted while the batch was written (its delete task may have run before).
            if not done and repository.get_document(session, job.document_id) is None:
                gone.append(job.document_id)
    if gone:
        try:
            rt.index_writer.delete_documents(gone)
        except IndexBusy:
            log.warning("%d deleted documents left in the index for the reconciler", len(gone))


def ocr_facts(result: ExtractionResult) -> dict[str, object]:
    """What the record keeps of a version's text recognition (None: no page was read)."""
    pages = result.metadata.get("ocr_pages") or []
    return {
        "ocr_pages": ",".join(str(number) for number in pages) or None,
        "ocr_confidence": result.metadata.get("ocr_confidence") if pages else None,
    }


def indexed_document(document: Document, result: ExtractionResult) -> IndexedDocument:
    """What the index stores of a document version and its extraction."""
    return IndexedDocument(
        document_id=document.id,
        tenant=document.tenant,
        collection=document.collection,
        name=document.name,
        version=document.version,
        chunks=chunk_pages(result.pages),
        title=result.metadata.get("title") or document.title,
        document_type=document.document_type,
        submitter=document.submitter,
        format=result.format,
        language=result.metadata.get("language"),
        created_at=document.created_at,
    )


def completed_versions(
    catalog: Catalog, extracts: ExtractStore, batch_size: int = 200
) -> Iterator[tuple[int, list[IndexedDocument]]]:
    """Every completed document as the index stores it, from its stored extraction, in id
    order, ``batch_size`` catalog rows at a time: (rows read, those with an extraction) — what
    a rebuild of the index or of qmd's lexicon writes."""
    last_id = ""
    while True:
        with catalog.session() as session:
            documents = repository.completed_documents(session, last_id, batch_size)
        if not documents:
            return
        loaded = []
        for document in documents:
            fmt = document.format or ""
            if document.sha256 and extracts.exists(document.sha256, fmt):
                loaded.append(indexed_document(document, extracts.load(document.sha256, fmt)))
        yield len(documents), loaded
        last_id = documents[-1].id


def reindex_completed(rt: IndexStores, jobs: Sequence[tuple[str, str]]) -> list[str]:
    """Write again the chunks (and qmd's rows) of completed versions — ``(document_id,
    sha256)`` pairs still completed at that version — from their stored extractions: the
    index worker's repair of an index that lost or holds a stale copy of them (the ``index``
    task takes only versions in flight); the ones written."""
    with rt.catalog.session() as session:
        documents = repository.get_documents(session, {key for key, _ in jobs})
    written = []
    try:
        with rt.index_writer.batch() as batch:
            for key, sha256 in dict(jobs).items():
                document = documents.get(key)
                if (
                    document is None
                    or document.sha256 != sha256
                    or document.status != DocumentStatus.COMPLETED.value
                ):
                    continue  # replaced, deleted or in flight since: its own path writes it
                fmt = document.format or ""
                if rt.extracts.exists(sha256, fmt):
                    batch.replace(indexed_document(document, rt.extracts.load(sha256, fmt)))
                    written.append(key)
    except IndexBusy as exc:
        raise TransientError("INDEX_BUSY", str(exc)) from exc
    return written


def delete_from_index(rt: IndexStores, document_ids: list[str]) -> list[str]:
    """Remove the chunks of documents that are no longer in the catalog; return those."""
    with rt.catalog.session() as session:
        kept = repository.existing_ids(session, set(document_ids))
    gone = [document_id for document_id in document_ids if document_id not in kept]
    try:
        rt.index_writer.delete_documents(gone)
    except IndexBusy as exc:
        raise TransientError("INDEX_BUSY", str(exc)) from exc
    return gone


def optimize_index(rt: IndexStores) -> None:
    """Merge the index's segments into one."""
    try:
        rt.index_writer.optimize()
    except IndexBusy as exc:
        raise TransientError("INDEX_BUSY", str(exc)) from exc


def follow_toolset(
    settings: Settings,
    index: DocumentIndex,
    catalog: Catalog,
    extracts: ExtractStore,
    batch_size: int = 200,
) -> int | None:
    """Remove the lexicon (toolset off) or rebuild it (on, and not complete); the documents
    rebuilt, or None when nothing was rebuilt."""
    lexicon = index.lexicon
    if not settings.qmd_lexicon:
        if lexicon.drop():
            log.info("the qmd toolset is off: its lexicon removed")
        return None
    if lexicon.complete:
        return None
    count = 0
    for _, loaded in completed_versions(catalog, extracts, batch_size):
        index.write_lexicon([(document.document_id, document) for document in loaded])
        count += len(loaded)
    lexicon.mark_complete()
    log.info("the qmd toolset's lexicon rebuilt with %d documents", count)
    return count


def build(
    building: DocumentIndex,
    catalog: Catalog,
    extracts: ExtractStore,
    batch_size: int = 200,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write every completed version into ``building`` (a new index folder no one reads yet),
    merged into one segment and marked ready; the documents written."""
    count = 0
    for rows, loaded in completed_versions(catalog, extracts, batch_size):
        with building.batch() as batch:
            for document in loaded:
                batch.replace(document)
        count += len(loaded)
        if progress:
            progress(rows)
    # One segment before readers see it: a fresh rebuild is the cheapest time to merge.
    building.optimize()
    building.mark_ready()
    if building.lexical:
        building.lexicon.mark_complete()
    return count


def mark_new_index_ready(index: DocumentIndex) -> None:
    """An index with nothing to rebuild from (a new install) is ready as it is."""
    index.mark_ready()


def write_changed(index: DocumentIndex, changed: list[Document], extracts: ExtractStore) -> None:
    """Bring ``changed`` documents up to date in ``index`` when no index worker runs (a
    rebuild's catch-up without a broker): completed versions written, the others removed."""
    with index.batch() as batch:
        for document in changed:
            fmt = document.format or ""
            completed = document.status == DocumentStatus.COMPLETED.value
            if completed and document.sha256 and extracts.exists(document.sha256, fmt):
                batch.replace(indexed_document(document, extracts.load(document.sha256, fmt)))
            elif not completed:
                batch.delete(document.id)


def drop_lexicon(index: DocumentIndex) -> bool:
    """Remove qmd's lexicon (``ldims check --repair`` of one kept while the toolset is off)."""
    return index.lexicon.drop()
