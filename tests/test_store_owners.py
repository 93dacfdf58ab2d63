"""Who writes each store, read from the source of every module of ours: the writers of the
index, qmd's lexicon, the vectors, the originals and the extractions are the modules named
here, and a new one fails this test (document rows: tests/test_row_owner.py).

- the index: the index worker's modules alone (it is the index's single writer): the batches
  and deletes (``workers.pipeline``), the rebuild (``workers.reindex``), the lexicon that follows
  the qmd toolset (``workers.lexicon_sync``);
- the vectors: the embed stage (``workers.embed_run``), deletes included;
- originals: written where bytes arrive (an upload's multipart parser, a bulk or folder file,
  a fetched URL), removed in one place with their extractions
  (``ldims.extracts.discard_unreferenced``: only what no row refers to);
- extractions: written by the extract stage's record (``workers.pipeline``), removed with
  their original.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("api", "ldims", "runtime", "workers")
# A store's writing calls, by the name they are called through and the method.
WRITES = {
    "index": r"(index|index_writer|building|_index)\.(batch|delete_documents|replace_document"
    r"|write_lexicon|optimize|mark_ready)",
    "lexicon": r"lexicon\.(writer|drop|mark_complete)",
    "vectors": r"(vectors|store)\.writer",
    "blob writes": r"blobs\.writer",
    "blob deletes": r"blobs\.delete",
    "extract writes": r"extracts\.save",
    "extract deletes": r"extracts\.delete",
}
OWNERS = {
    "index": {"workers/pipeline.py", "workers/reindex.py", "workers/lexicon_sync.py"},
    "lexicon": {"workers/lexicon_sync.py", "workers/reindex.py", "workers/consistency.py"},
    "vectors": {"workers/embed_run.py"},
    "blob writes": {
        "api/multipart.py",
        "ldims/documents/intake.py",
        "ldims/qmd/library.py",
        "workers/fetch.py",
    },
    "blob deletes": {"ldims/extracts.py"},
    "extract writes": {"workers/pipeline.py"},
    "extract deletes": {"ldims/extracts.py"},
}


def writers(source: str, patterns: dict[str, str] = WRITES) -> set[str]:
    """The stores ``source`` writes."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            for store, pattern in patterns.items():
                if re.search(rf"(^|\.){pattern}$", called):
                    found.add(store)
    return found


def test_each_store_has_the_writers_named() -> None:
    found: dict[str, set[str]] = {store: set() for store in WRITES}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for store in writers(path.read_text()):
                found[store].add(path.relative_to(ROOT).as_posix())
    assert found == OWNERS


def test_the_inspection_sees_each_kind_of_write() -> None:
    source = "\n".join(
        [
            "rt.index_writer.delete_documents(ids)",
            "index.lexicon.drop()",
            "with rt.vectors.writer(fp, 4) as w: pass",
            "store.blobs.writer(10)",
            "self.blobs.delete(sha)",
            "rt.extracts.save(sha, result)",
            "self.extracts.delete(sha)",
            "rt.index.search(request)",  # a read
        ]
    )
    assert writers(source) == set(WRITES)
