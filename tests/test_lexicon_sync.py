"""qmd's FTS5 lexicon follows the qmd toolset: not written while the toolset is off (and its
file removed), rebuilt from the catalog and the extractions when it is switched on, kept when
it is complete (including a file of an earlier version)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from indexer import DocumentIndex
from ldims.catalog import Catalog, Document
from ldims.extracts import ExtractStore
from ldims.lifecycle.index import follow_toolset, indexed_document, reindex_completed
from ldims.settings import Settings
from ldims.text import ExtractionResult, Page
from tests.conftest import document_row
from workers.pipeline import Runtime

TEXTS = {
    "acme/aaaa": "# Herons\n\nThe grey heron waits at the pond.\n",
    "acme/bbbb": "# Ducks\n\nA mallard swims past the reeds.\n",
}


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    """A data folder whose catalog holds two completed documents with their extractions."""
    settings = Settings(data_dir=tmp_path)
    catalog = Catalog(settings.catalog_url)
    catalog.upgrade()
    extracts = ExtractStore(settings.extracts_dir)
    with catalog.session() as session:
        for document_id, text in TEXTS.items():
            sha = hashlib.sha256(text.encode()).hexdigest()
            result = ExtractionResult(
                format="text/markdown", extractor="markdown", text=text, pages=[Page(1, text)]
            )
            extracts.save(sha, result)
            session.add(
                document_row(
                    document_id,
                    "acme",
                    collection="notes",
                    name=f"{document_id[-4:]}.md",
                    source_path=f"{document_id[-4:]}.md",
                    sha256=sha,
                    format="text/markdown",
                    status="completed",
                )
            )
    catalog.dispose()
    return tmp_path


def runtime(data: Path, toolsets: list[str] | None) -> Runtime:
    return Runtime(Settings(data_dir=data, toolsets=toolsets, embedding_model="none"))


def index_all(rt: Runtime) -> None:
    """What the index worker does with the two documents."""
    with rt.catalog.session() as session:
        jobs = [(d.id, d.sha256 or "") for d in session.query(Document)]
    assert len(reindex_completed(rt, jobs)) == 2


def hits(index: DocumentIndex, query: str) -> list[str]:
    return [hit.document_id for hit in index.lexical_search("acme", query, 10)]


def test_with_the_toolset_off_no_lexicon_is_written(data: Path) -> None:
    rt = runtime(data, ["documents"])
    index_all(rt)
    assert not rt.index.lexicon.path.exists()
    assert hits(rt.index, "heron") == []
    # Whoosh has the documents all the same.
    assert rt.index.document_ids() == set(TEXTS)


def test_switched_off_the_lexicon_is_removed_and_switched_on_it_is_rebuilt(data: Path) -> None:
    on = runtime(data, None)  # unset toolsets serve qmd
    index_all(on)
    lexicon = on.index.lexicon
    assert hits(on.index, "heron") == ["acme/aaaa"] and lexicon.complete
    on.index.close()

    off = runtime(data, ["documents", "guide"])
    assert off.index_writer is off.index  # the index worker opens it
    assert not lexicon.path.exists()
    off.index.close()

    again = runtime(data, ["qmd"])
    assert hits(again.index, "heron") == []  # a reader does not rebuild it
    assert again.index_writer is again.index  # the index worker opens it
    assert hits(again.index, "heron") == ["acme/aaaa"]
    assert hits(again.index, "mallard") == ["acme/bbbb"]
    assert again.index.lexicon.complete


def test_a_lexicon_a_writer_started_beside_a_full_index_is_rebuilt(data: Path) -> None:
    rt = runtime(data, ["documents"])
    index_all(rt)  # the toolset off: Whoosh only
    settings = Settings(data_dir=data, toolsets=["qmd"], embedding_model="none")
    index = DocumentIndex(settings.index_dir, lexical=True)
    index.write_lexicon([])  # nothing: no file
    assert not index.lexicon.path.exists()
    with rt.catalog.session() as session:
        first = session.get(Document, "acme/aaaa")
        assert first is not None
        loaded = indexed_document(first, rt.extracts.load(first.sha256 or "", "text/markdown"))
    index.write_lexicon([("acme/aaaa", loaded)])  # one document of two
    assert not index.lexicon.complete
    rebuilt = follow_toolset(settings, index, rt.catalog, rt.extracts)
    assert rebuilt == 2 and index.lexicon.complete
    assert hits(index, "mallard") == ["acme/bbbb"]
    # Complete: the next start rebuilds nothing.
    assert follow_toolset(settings, index, rt.catalog, rt.extracts) is None


def test_a_lexicon_of_an_earlier_version_counts_as_complete(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    folder.mkdir()
    connection = sqlite3.connect(folder / "lexicon.sqlite3")
    connection.execute("CREATE TABLE rows (rowid INTEGER PRIMARY KEY, document_id TEXT)")
    connection.commit()
    connection.close()
    from indexer.lexicon import Lexicon

    assert Lexicon(folder).complete
    assert not Lexicon(tmp_path / "elsewhere").complete
