"""multi_get's globs: the catalog's pre-selection by the pattern's literal head selects every
row the glob matches (on SQLite, whose LIKE is case-blind, and on PostgreSQL), never another
tenant's, and the glob alone decides what is returned."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldims.caller import Caller
from ldims.catalog import Catalog
from ldims.qmd.core import _GLOB_FLAGS, Qmd
from ldims.qmd.folders import compile_glob
from ldims.settings import Settings
from tests.conftest import document_row

PATHS = [
    *(f"topic {t:02d}/note-{n:03d}.md" for t in range(4) for n in range(12)),
    "topic_07/under_score.md",  # "_" is LIKE's one-character wildcard
    "topicX07/under-score.md",  # what an unescaped "_" would wrongly select
    "100%/done.md",  # "%" is LIKE's any-characters wildcard
    "100 more/done.md",
    "notes #1/hash.md",  # "#" is the LIKE escape character here
    "Topic 01/capital.md",  # SQLite's LIKE selects it for "topic 01/…", the glob must not
    "deep/a/b/c/note-001.md",
    "star*/literal.md",
]

PATTERNS = [
    "topic 01/note-00*.md",
    "topic 0[12]/note-01{0,1}.md",
    "kb/topic 02/*.md",
    "qmd://kb/topic 03/note-011.md",
    "qmd://kb/**/note-001.md",
    "**/note-001.md",
    "topic_07/*",
    "100%/*",
    "notes #1/*",
    "Topic 01/*",
    "star\\*/*.md",
    "topic 01/note-00?.md",
    "nothing/*.md",
    "*",
]


@pytest.fixture()
def qmd(catalog: Catalog, tmp_path: Path) -> Qmd:
    with catalog.session() as session:
        for tenant in ("acme", "globex"):
            for n, path in enumerate(PATHS):
                session.add(
                    document_row(
                        f"{tenant}/{n:04d}",
                        tenant,
                        collection="kb",
                        name=Path(path).name,
                        source_path=path,
                        sha256=f"{n:064x}",
                        format="text/markdown",
                        status="completed",
                    )
                )
    settings = Settings(data_dir=tmp_path)
    return Qmd(settings, catalog, documents=None)  # type: ignore[arg-type]  # globs need no reader


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_glob_finds_exactly_what_matching_every_row_finds(qmd: Qmd, pattern: str) -> None:
    matcher = compile_glob(pattern, _GLOB_FLAGS)
    expected = [
        f"kb/{path}"
        for path in sorted(PATHS)
        if any(matcher.match(form) for form in (f"qmd://kb/{path}", path, f"kb/{path}"))
    ]
    found = qmd._glob(Caller(tenant="acme"), pattern)
    assert sorted(file.display_path for file in found) == expected
    assert {file.document_id.split("/")[0] for file in found} <= {"acme"}


def test_the_literal_head_narrows_and_the_glob_decides(qmd: Qmd) -> None:
    caller = Caller(tenant="acme")
    assert [f.path for f in qmd._glob(caller, "topic_07/*")] == ["topic_07/under_score.md"]
    assert [f.path for f in qmd._glob(caller, "100%/*")] == ["100%/done.md"]
    # SQLite selects "Topic 01/…" for the head "topic 01/" (case-blind LIKE); the glob drops it.
    found = [f.path for f in qmd._glob(caller, "topic 01/*")]
    assert len(found) == 12 and "Topic 01/capital.md" not in found
