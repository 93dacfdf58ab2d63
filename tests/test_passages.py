"""Search inside one document (``DocumentIndex.search_document``): its chunks ranked by the
document's own statistics — no score moves when other documents, of any tenant, come and go."""

from __future__ import annotations

from pathlib import Path

from indexer import Chunk, DocumentIndex, IndexedDocument


def document(document_id: str, tenant: str, *chunks: str, version: int = 1) -> IndexedDocument:
    return IndexedDocument(
        document_id=document_id,
        tenant=tenant,
        collection="c",
        name=f"{document_id}.txt",
        version=version,
        chunks=[Chunk(text, page=n, line_start=n, line_end=n) for n, text in enumerate(chunks, 1)],
    )


MANUAL = document(
    "manual",
    "acme",
    "Installing the turbine controller takes an hour.",
    "The turbine controller logs every fault; a fault code names the failing turbine blade.",
    "Warranty terms and the address of the service centre.",
    "Turbine blades are inspected yearly.",
)


def scores(index: DocumentIndex, query: str) -> list[tuple[int, float, str]]:
    hits, total = index.search_document("manual", 1, query, 5)
    assert total == len(hits) or total > 5
    return [(hit.page, hit.score, hit.snippet) for hit in hits]


def test_chunks_rank_by_the_documents_own_statistics(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path / "index")
    index.replace_document(MANUAL)
    alone = scores(index, "turbine fault code")
    assert [page for page, _, _ in alone] == [2, 4, 1]  # 4 and 1: one "turbine", 4 shorter
    assert alone[0][1] == 1.0 and "**fault**" in alone[0][2]
    # Another tenant's documents full of the same words change no score.
    with index.batch() as batch:
        for n in range(30):
            batch.replace(document(f"other-{n}", "globex", "turbine " * 20, "fault code"))
    assert scores(index, "turbine fault code") == alone
    assert index.search_document("manual", 2, "turbine", 5)[0] == []  # another version
    assert index.search_document("nothing", 1, "turbine", 5) == ([], 0)
    assert index.search_document("manual", 1, "zebra", 5) == ([], 0)
    index.close()
