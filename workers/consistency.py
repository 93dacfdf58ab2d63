"""Do the stores agree? ``ldims check [--repair]`` and the reconciler's sweeps.

A document lives in the catalog (its row is the truth), the originals (blobs), the
extractions, the Whoosh index, qmd's lexicon, the vector store and Redis (its messages). They
agree when:

- the index holds every completed document at its catalog version, and no document the
  catalog lacks (a document in flight keeps its last indexed version until the next one
  replaces it, so it is not compared);
- qmd's lexicon, kept while the qmd toolset is served, holds the documents the index holds
  (and there is none while the toolset is off);
- the vector store holds no document the catalog lacks, and every document the catalog
  records embedded (``vectors_sha256`` of its version and model);
- every original and extraction belongs to a document (past :data:`GRACE`: an upload writes
  its original before its row); every document past its upload has its original, every
  completed one its extraction;
- no document is queued or processing without progress for ``LDIMS_STUCK_AFTER_SECONDS``.

The stores are read before the catalog (a document created after a store's read has nothing
there yet), and a finding is kept only when a second look finds it too (a document deleted,
replaced or completed while the first look ran is not an inconsistency, only a moment).

Repairs (``--repair``; the reconciler's sweeps do the cheap ones every pass): orphaned index
and lexicon rows removed and missing or stale documents indexed again — by the index worker,
the single writer, through its queue; orphaned vectors removed and missing ones made again by
the embed stage; orphaned originals and extractions removed; a completed document whose
extraction is gone extracted again from its original. What cannot be repaired (an original
lost) is said.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import timedelta

from ldims.catalog import Document, DocumentStatus, repository, utcnow
from ldims.lifecycle import index as index_life
from ldims.lifecycle import states, vector_work
from ldims.lifecycle.contents import discard_unreferenced
from ldims.semantic import fingerprint_for
from workers.embed_run import delete_vectors
from workers.pipeline import Runtime

log = logging.getLogger(__name__)

GRACE = 3600.0  # seconds a file may exist before its row does (an upload in progress)
_COMPLETED, _FAILED = DocumentStatus.COMPLETED.value, DocumentStatus.FAILED.value


@dataclass
class Findings:
    """What disagrees, by kind: document ids (originals and extractions: content hashes)."""

    index_orphans: list[str] = field(default_factory=list)
    index_missing: list[str] = field(default_factory=list)
    index_stale: list[str] = field(default_factory=list)
    lexicon_orphans: list[str] = field(default_factory=list)
    lexicon_missing: list[str] = field(default_factory=list)
    lexicon_unwanted: list[str] = field(default_factory=list)  # the file, toolset off
    vector_orphans: list[str] = field(default_factory=list)
    vectors_missing: list[str] = field(default_factory=list)
    blob_orphans: list[str] = field(default_factory=list)
    blobs_missing: list[str] = field(default_factory=list)
    extract_orphans: list[str] = field(default_factory=list)
    extracts_missing: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    documents: int = 0  # rows compared

    def kinds(self) -> dict[str, list[str]]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "documents"}

    @property
    def consistent(self) -> bool:
        return not any(self.kinds().values())

    def both(self, other: Findings) -> Findings:
        """The findings of this look that the ``other`` one found too."""
        kept = Findings(documents=other.documents)
        for name, found in self.kinds().items():
            again = set(getattr(other, name))
            setattr(kept, name, [item for item in found if item in again])
        return kept


# What each kind means, for the report (and what a repair does).
DESCRIPTIONS = {
    "index_orphans": "in the index, not in the catalog (removed from the index)",
    "index_missing": "completed, not in the index (indexed again)",
    "index_stale": "completed, indexed at another version (indexed again)",
    "lexicon_orphans": "in qmd's lexicon, not in the index (removed from the lexicon)",
    "lexicon_missing": "in the index, not in qmd's lexicon (indexed again)",
    "lexicon_unwanted": "qmd's lexicon kept while the qmd toolset is off (removed)",
    "vector_orphans": "vectors of a document the catalog lacks (removed)",
    "vectors_missing": "recorded embedded, no vectors in the store (embedded again)",
    "blob_orphans": "an original no document refers to (removed)",
    "blobs_missing": "a document whose original is gone (cannot be repaired: upload it again)",
    "extract_orphans": "an extraction no document refers to (removed)",
    "extracts_missing": "completed, its extraction gone (extracted again from its original)",
    "stuck": "queued or processing without progress (re-driven by the reconciler)",
}


def inspect(rt: Runtime, deep: bool = True) -> Findings:
    """What disagrees now (twice looked at). ``deep``: also versions, lexicon, originals and
    extractions (``ldims check``); else the ids of index and vectors (the reconciler's pass)."""
    first = _look(rt, deep)
    if first.consistent:
        return first
    time.sleep(0.5)  # a batch in flight lands; a moment is not a finding
    return first.both(_look(rt, deep))


def _look(rt: Runtime, deep: bool) -> Findings:
    found = Findings()
    # The stores first (see the module).
    if not deep:
        indexed = rt.index.document_ids()
        stored = rt.vectors.document_ids() if rt.settings.semantic_enabled else set()
        with rt.catalog.session() as session:
            known = repository.all_document_ids(session)
        found.documents = len(known)
        found.index_orphans = sorted(indexed - known)
        found.vector_orphans = sorted(stored - known)
        return found
    return _look_deep(rt, found)


def _look_deep(rt: Runtime, found: Findings) -> Findings:
    settings = rt.settings
    versions = rt.index.versions()
    lexical = rt.index.lexicon.document_ids() if settings.qmd_lexicon else set()
    stored = rt.vectors.document_ids() if settings.semantic_enabled else set()
    blobs = rt.blobs.stored()
    extract_files = rt.extracts.stored()
    with rt.catalog.session() as session:
        rows = {
            row.id: row
            for row in session.query(
                Document.id,
                Document.status,
                Document.version,
                Document.sha256,
                Document.format,
                Document.vectors_sha256,
                Document.vectors_model,
                Document.chunk_count,
                Document.status_changed_at,
            )
        }
    found.documents = len(rows)
    completed = {key: row for key, row in rows.items() if row.status == _COMPLETED}
    found.index_orphans = sorted(versions.keys() - rows.keys())
    found.vector_orphans = sorted(stored - rows.keys())
    found.index_missing = sorted(completed.keys() - versions.keys())
    found.index_stale = sorted(
        key
        for key in completed.keys() & versions.keys()
        if versions[key] != {completed[key].version}
    )
    if settings.qmd_lexicon:
        found.lexicon_orphans = sorted(lexical - versions.keys())
        found.lexicon_missing = sorted(versions.keys() - lexical)
    elif rt.index.lexicon.path.exists():
        found.lexicon_unwanted = [str(rt.index.lexicon.path)]
    if settings.semantic_enabled:
        fingerprint = fingerprint_for(settings)
        found.vectors_missing = sorted(
            key
            for key, row in completed.items()
            if row.vectors_sha256 == row.sha256
            and row.vectors_model == fingerprint
            and row.chunk_count
            and key not in stored
        )
    referenced = {row.sha256 for row in rows.values() if row.sha256}
    old = time.time() - GRACE
    found.blob_orphans = sorted(
        sha256 for sha256, mtime in blobs.items() if sha256 not in referenced and mtime < old
    )
    found.extract_orphans = sorted(
        {
            sha256
            for sha256, mtime in extract_files.values()
            if sha256 not in referenced and mtime < old
        }
    )
    found.blobs_missing = sorted(
        key
        for key, row in rows.items()
        if row.sha256 and row.status != _FAILED and row.sha256 not in blobs
    )
    found.extracts_missing = sorted(
        key
        for key, row in completed.items()
        if row.sha256 and rt.extracts.path(row.sha256, row.format or "") not in extract_files
    )
    cutoff = utcnow() - timedelta(seconds=settings.stuck_after_seconds)
    found.stuck = sorted(
        key
        for key, row in rows.items()
        if row.status not in (_COMPLETED, _FAILED) and row.status_changed_at < cutoff
    )
    return found


@dataclass
class Repairs:
    """What a repair did (or asked the workers to do), by kind; and what it could not."""

    done: dict[str, int] = field(default_factory=dict)
    not_repaired: dict[str, int] = field(default_factory=dict)


def repair(
    rt: Runtime,
    found: Findings,
    index_again: Callable[[list[tuple[str, str]]], None],
    drop_from_index: Callable[[list[str]], None],
    extract_again: Callable[[list[tuple[str, str]]], None],
    nudge_embed: Callable[[], None],
) -> Repairs:
    """Mend what ``found`` holds. The index is written by the index worker only: documents
    to index again and orphans to remove go to it through ``index_again`` and
    ``drop_from_index`` (its queue); a repair inside the index worker passes its own."""
    repairs = Repairs()
    if found.index_orphans or found.lexicon_orphans:
        drop_from_index(sorted(set(found.index_orphans) | set(found.lexicon_orphans)))
        repairs.done["index_orphans"] = len(found.index_orphans)
        repairs.done["lexicon_orphans"] = len(found.lexicon_orphans)
    again = sorted(set(found.index_missing) | set(found.index_stale) | set(found.lexicon_missing))
    if again:
        with rt.catalog.session() as session:
            documents = repository.get_documents(session, set(again))
        jobs = [
            (key, row.sha256)
            for key, row in documents.items()
            if row.status == _COMPLETED
            and row.sha256
            and rt.extracts.exists(row.sha256, row.format or "")
        ]
        index_again(jobs)
        for kind in ("index_missing", "index_stale", "lexicon_missing"):
            repairs.done[kind] = len(getattr(found, kind))
    if found.lexicon_unwanted:
        index_life.drop_lexicon(rt.index)
        repairs.done["lexicon_unwanted"] = 1
    if found.vector_orphans:
        delete_vectors(rt, found.vector_orphans)
        repairs.done["vector_orphans"] = len(found.vector_orphans)
    if found.vectors_missing:
        fingerprint = fingerprint_for(rt.settings)
        assert fingerprint is not None
        with rt.catalog.session() as session:
            rows = repository.get_documents(session, set(found.vectors_missing))
            versions = [(key, row.sha256) for key, row in rows.items() if row.sha256]
            vector_work.forget(session, fingerprint, versions=versions)
        nudge_embed()
        repairs.done["vectors_missing"] = len(found.vectors_missing)
    if found.blob_orphans or found.extract_orphans:
        orphans = set(found.blob_orphans) | set(found.extract_orphans)
        discard_unreferenced(rt.catalog, rt.blobs, rt.extracts, orphans)
        repairs.done["blob_orphans"] = len(found.blob_orphans)
        repairs.done["extract_orphans"] = len(found.extract_orphans)
    if found.extracts_missing:
        with rt.catalog.session() as session:
            rows = repository.get_documents(session, set(found.extracts_missing))
            jobs = [
                (key, row.sha256)
                for key, row in rows.items()
                if row.sha256 and rt.blobs.exists(row.sha256)
            ]
            for key, _ in jobs:
                states.requeue(rows[key])
        extract_again(jobs)
        repairs.done["extracts_missing"] = len(jobs)
        if lost := len(found.extracts_missing) - len(jobs):
            repairs.not_repaired["extracts_missing"] = lost
    if found.blobs_missing:
        repairs.not_repaired["blobs_missing"] = len(found.blobs_missing)
    if found.stuck:
        repairs.not_repaired["stuck"] = len(found.stuck)  # the reconciler's, every pass
    return repairs
