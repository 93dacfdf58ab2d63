"""``ldims check``: what disagrees between the catalog and the stores is found, each kind by
name, and repaired (index work through the callbacks the index worker or the CLI give);
what agrees is left alone, and a moment of a write in flight is not reported."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import update

from ldims.catalog import Document, utcnow
from ldims.lifecycle.index import indexed_document, reindex_completed
from ldims.lifecycle.vectors import vector_rows
from ldims.semantic import fingerprint_for
from ldims.settings import Settings, get_settings
from ldims.text import ExtractionResult, Page
from runtime.cli.main import cli
from tests.conftest import document_row
from workers import consistency
from workers.consistency import Findings, inspect, repair
from workers.pipeline import Runtime

TEXTS = {
    "acme/aaaa": "# Herons\n\nThe grey heron waits at the pond.\n",
    "acme/bbbb": "# Ducks\n\nA mallard swims past the reeds.\n",
    "globex/cccc": "# Geese\n\nThe geese fly south in October.\n",
}


def make_runtime(data: Path, **settings: object) -> Runtime:
    return Runtime(Settings(data_dir=data, embedding_model="use", **settings))


@pytest.fixture()
def rt(tmp_path: Path) -> Runtime:
    """Three completed documents: originals, extractions, index, lexicon and vectors."""
    rt = make_runtime(tmp_path)
    rt.catalog.upgrade()
    fingerprint = fingerprint_for(rt.settings)
    shas = {key: hashlib.sha256(text.encode()).hexdigest() for key, text in TEXTS.items()}
    with rt.catalog.session() as session:
        for document_id, text in TEXTS.items():
            sha = shas[document_id]
            rt.extracts.save(
                sha,
                ExtractionResult(
                    format="text/markdown", extractor="md", text=text, pages=[Page(1, text)]
                ),
            )
            blob = rt.blobs.path(sha)
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_text(text)
            session.add(
                document_row(
                    document_id,
                    document_id.split("/")[0],
                    collection="notes",
                    name=f"{document_id[-4:]}.md",
                    sha256=sha,
                    format="text/markdown",
                    status="completed",
                    chunk_count=1,
                    vectors_sha256=sha,
                    vectors_model=fingerprint,
                )
            )
    assert len(reindex_completed(rt, list(shas.items()))) == 3
    with rt.catalog.session() as session:
        documents = {d.id: d for d in session.query(Document)}
    with rt.vectors.writer(fingerprint or "", 4) as writer:
        for key, document in documents.items():
            loaded = indexed_document(
                document, rt.extracts.load(document.sha256 or "", "text/markdown")
            )
            writer.replace(key, vector_rows(loaded, [0]), np.ones((1, 4), dtype=np.float32))
    return rt


class Calls:
    """The repair's callbacks, done here as the index worker would, and recorded."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.indexed: list[tuple[str, str]] = []
        self.extracted: list[tuple[str, str]] = []
        self.nudged = 0

    def kwargs(self) -> dict[str, object]:
        return {
            "index_again": self.index_again,
            "drop_from_index": self.rt.index_writer.delete_documents,
            "extract_again": self.extracted.extend,
            "nudge_embed": self.nudge,
        }

    def index_again(self, jobs: list[tuple[str, str]]) -> None:
        """What the index worker's ``ldims.reindex_documents`` task runs."""
        self.indexed.extend(jobs)
        reindex_completed(self.rt, jobs)

    def nudge(self) -> None:
        self.nudged += 1


def kinds(found: Findings) -> dict[str, list[str]]:
    return {kind: items for kind, items in found.kinds().items() if items}


def test_stores_that_agree_are_consistent(rt: Runtime) -> None:
    found = inspect(rt)
    assert found.consistent and found.documents == 3, kinds(found)


def test_a_delete_whose_index_task_was_lost_is_found_and_repaired(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consistency, "GRACE", 0.0)  # its files are old enough to be orphans
    with rt.catalog.session() as session:
        session.query(Document).filter(Document.id == "acme/bbbb").delete()
    found = kinds(inspect(rt))
    sha = hashlib.sha256(TEXTS["acme/bbbb"].encode()).hexdigest()
    assert found == {
        "index_orphans": ["acme/bbbb"],
        "vector_orphans": ["acme/bbbb"],
        "blob_orphans": [sha],
        "extract_orphans": [sha],
    }
    done = repair(rt, inspect(rt), **Calls(rt).kwargs())
    assert done.done["index_orphans"] == 1 and not done.not_repaired
    assert inspect(rt).consistent
    assert "acme/bbbb" not in rt.index.lexicon.document_ids()
    assert not rt.blobs.exists(sha) and not rt.extracts.exists(sha, "text/markdown")


def test_files_younger_than_the_grace_are_an_upload_in_progress(rt: Runtime) -> None:
    with rt.catalog.session() as session:
        session.query(Document).filter(Document.id == "acme/bbbb").delete()
    found = kinds(inspect(rt))
    assert "blob_orphans" not in found and "extract_orphans" not in found


def test_a_stale_version_and_a_lost_lexicon_row_are_indexed_again(rt: Runtime) -> None:
    with rt.catalog.session() as session:
        session.execute(update(Document).where(Document.id == "acme/aaaa").values(version=2))
    with rt.index.lexicon.writer() as lexical:
        lexical.delete("globex/cccc")
    found = kinds(inspect(rt))
    assert found == {"index_stale": ["acme/aaaa"], "lexicon_missing": ["globex/cccc"]}
    calls = Calls(rt)
    repair(rt, inspect(rt), **calls.kwargs())
    assert sorted(key for key, _ in calls.indexed) == ["acme/aaaa", "globex/cccc"]
    assert rt.index.indexed_versions("acme/aaaa") == {2}
    assert inspect(rt).consistent


def test_a_lost_extraction_is_extracted_again_and_a_lost_original_is_said(rt: Runtime) -> None:
    sha_a = hashlib.sha256(TEXTS["acme/aaaa"].encode()).hexdigest()
    sha_c = hashlib.sha256(TEXTS["globex/cccc"].encode()).hexdigest()
    rt.extracts.path(sha_a, "text/markdown").unlink()
    rt.blobs.path(sha_c).unlink()
    found = kinds(inspect(rt))
    assert found == {"extracts_missing": ["acme/aaaa"], "blobs_missing": ["globex/cccc"]}
    calls = Calls(rt)
    done = repair(rt, inspect(rt), **calls.kwargs())
    assert calls.extracted == [("acme/aaaa", sha_a)]
    assert done.not_repaired == {"blobs_missing": 1}
    with rt.catalog.session() as session:
        assert session.get(Document, "acme/aaaa").status == "queued"  # type: ignore[union-attr]


def test_vectors_recorded_but_gone_are_made_again(rt: Runtime) -> None:
    with rt.vectors.writer(fingerprint_for(rt.settings) or "", 4) as writer:
        writer.delete("acme/aaaa")
    assert kinds(inspect(rt)) == {"vectors_missing": ["acme/aaaa"]}
    calls = Calls(rt)
    repair(rt, inspect(rt), **calls.kwargs())
    assert calls.nudged == 1
    with rt.catalog.session() as session:
        assert session.get(Document, "acme/aaaa").vectors_sha256 is None  # type: ignore[union-attr]
    assert inspect(rt).consistent  # no longer recorded embedded: the embed stage's work


def test_a_lexicon_kept_with_the_qmd_toolset_off_is_removed(rt: Runtime) -> None:
    off = make_runtime(rt.settings.data_dir, toolsets=["documents"])
    found = inspect(off)
    assert list(kinds(found)) == ["lexicon_unwanted"]
    repair(off, found, **Calls(off).kwargs())
    assert not off.index.lexicon.path.exists() and inspect(off).consistent


def test_a_document_without_progress_is_stuck(rt: Runtime) -> None:
    long_ago = utcnow().replace(year=2020)
    with rt.catalog.session() as session:
        session.execute(
            update(Document)
            .where(Document.id == "globex/cccc")
            .values(status="processing", status_changed_at=long_ago)
        )
    assert kinds(inspect(rt)) == {"stuck": ["globex/cccc"]}


def test_a_moment_is_not_a_finding() -> None:
    first = Findings(index_missing=["a/1", "a/2"], vector_orphans=["a/3"])
    second = Findings(index_missing=["a/2"], documents=5)
    both = first.both(second)
    assert both.index_missing == ["a/2"] and both.vector_orphans == [] and both.documents == 5


def test_ldims_check_says_what_disagrees_and_exits_1(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in {
        "LDIMS_DATA_DIR": str(rt.settings.data_dir),
        "LDIMS_EMBEDDING_MODEL": "use",
    }.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    runner = CliRunner()
    handlers = logging.getLogger().handlers[:]  # the command installs one on the runner's stderr
    try:
        clean = runner.invoke(cli, ["check"])
        assert clean.exit_code == 0 and "consistent: 3 documents" in clean.output, clean.output
        sha = hashlib.sha256(TEXTS["acme/aaaa"].encode()).hexdigest()
        rt.extracts.path(sha, "text/markdown").unlink()
        broken = runner.invoke(cli, ["check"])
        assert broken.exit_code == 1, broken.output
        assert (
            "1 completed, its extraction gone (extracted again from its original): acme/aaaa"
            in broken.output
        )
        assert "ldims check --repair" in broken.output
    finally:
        get_settings.cache_clear()
        logging.getLogger().handlers[:] = handlers
