"""Who writes each store, read from the source of every module of ours: the index, qmd's
lexicon, the vectors, the originals and the extractions are written by ``ldims/lifecycle``
alone (document rows: tests/test_row_owner.py), each by the module named here, and a write
anywhere else fails this test — a call, or a writing method handed on as a value.

- the index and its lexicon: ``lifecycle/index.py`` (run by the index's single writer, the
  index worker, and by ``ldims reindex`` / ``ldims serve`` before any worker starts);
- the vectors: ``lifecycle/vectors.py`` (run by the embed stage and the delete task);
- originals and extractions: ``lifecycle/contents.py`` (written where bytes arrive and by the
  extract stage; removed together, only when no row refers to their content).
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
    "index": {"ldims/lifecycle/index.py"},
    "lexicon": {"ldims/lifecycle/index.py"},
    "vectors": {"ldims/lifecycle/vectors.py"},
    "blob writes": {"ldims/lifecycle/contents.py"},
    "blob deletes": {"ldims/lifecycle/contents.py"},
    "extract writes": {"ldims/lifecycle/contents.py"},
    "extract deletes": {"ldims/lifecycle/contents.py"},
}


def writers(source: str, patterns: dict[str, str] = WRITES) -> set[str]:
    """The stores ``source`` writes."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        # Every attribute named, called or not: ``f(rt.index_writer.delete_documents)`` hands a
        # write to someone who makes it.
        if isinstance(node, ast.Attribute):
            named = ast.unparse(node)
            for store, pattern in patterns.items():
                if re.search(rf"(^|\.){pattern}$", named):
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
    # A writing method handed on, not called here, is a write all the same.
    assert writers("repairs = {'drop': rt.index_writer.delete_documents}") == {"index"}
