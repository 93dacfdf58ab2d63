"""``ldims reindex``: a new schema version's index is built from the catalog and the stored
extractions, swapped in while searches keep working, and ``--if-needed`` does nothing twice."""

from __future__ import annotations

import shutil

from indexer import SCHEMA_VERSION, DocumentIndex, SearchRequest
from tests.conftest import Stack, key_of, run_ldims


def reindex(stack: Stack, *options: str) -> str:
    return run_ldims(stack.settings, "reindex", *options).stdout


def test_reindex_rebuilds_a_missing_index_from_the_catalog(stack: Stack) -> None:
    texts = {
        "zh.md": "# 产品\n\n本款固态硬盘无需驱动程序。",
        "ru.txt": "Система хранит документы.",
        "en.txt": "The turbine blade cracked.",
    }
    ids = {
        name: stack.upload(name, text.encode()).json()["documentId"] for name, text in texts.items()
    }
    for doc_id in ids.values():
        assert stack.wait_final(doc_id)["status"] == "completed"
    stack.index_worker.stop()
    stack.extract_worker.stop()
    # As after an upgrade to a new schema version: this version's folder does not exist.
    shutil.rmtree(stack.settings.index_dir / f"v{SCHEMA_VERSION}")
    assert "reindexed 3 documents" in reindex(stack, "--if-needed")
    index = DocumentIndex(stack.settings.index_dir)
    assert index.ready and index.document_ids() == {key_of(i) for i in ids.values()}
    found = index.search(SearchRequest(tenant="default", query="документами"))
    assert [hit.document_id for hit in found.hits] == [key_of(ids["ru.txt"])]
    assert "up to date" in reindex(stack, "--if-needed")
    # A full rebuild swaps in a new folder; an index opened before sees it on its next search.
    assert "reindexed 3 documents" in reindex(stack)
    found = index.search(SearchRequest(tenant="default", query="硬盘"))
    assert [hit.document_id for hit in found.hits] == [key_of(ids["zh.md"])]
