"""Mutated real files through the extractors, property-based (hypothesis): corpus DOCX, XLSX,
PPTX, PDF, RTF, HTML, EPUB and legacy Office files with bytes flipped, cut short, spliced into
one another or padded, each through the worker's extractor process (:class:`ExtractionSandbox`,
its time and memory limits). Every one ends as text or as one of the failure codes, with a
reason that quotes neither the parser's traceback nor a path of the server's, within the time
limit; the extractor process stays usable for the next file."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldims.errors import ProcessingError
from ldims.text import ExtractionResult
from tests.conftest import DOCS
from workers.extraction import FAILURE_CODES, ExtractionLimits, ExtractionSandbox, detect_format

SOURCES = (
    "tika__testWORD_various.docx",
    "docling__word_tables.docx",
    "unstructured__2023-half-year-analyses-by-segment.xlsx",
    "unstructured__fake-power-point.pptx",
    "poppler-test__russian.pdf",
    "pypdf__multilang.pdf",
    "unstructured__fake-doc.rtf",
    "tika__resume.html",
    "unstructured__fake.doc",
    "unstructured__winter-sports.epub",
)
LIMITS = ExtractionLimits(timeout_seconds=20, max_memory_mib=1024)
LEAKS = re.compile(r"Traceback|File \"|\.py\"|/tmp/|/work/|site-packages|line \d+, in ")


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    """A corpus file and its mutation."""
    name = draw(st.sampled_from(SOURCES))
    data = bytearray((DOCS / name).read_bytes())
    how = draw(st.sampled_from(["flip", "cut", "splice", "pad", "zero"]))
    if how == "flip":  # bytes changed at random places
        for _ in range(draw(st.integers(1, 64))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    elif how == "cut":  # cut short (a truncated download)
        data = data[: draw(st.integers(1, len(data) - 1))]
    elif how == "splice":  # the head of one file on the tail of another
        other = (DOCS / draw(st.sampled_from(SOURCES))).read_bytes()
        data = data[: draw(st.integers(1, len(data)))] + other[draw(st.integers(0, len(other))) :]
    elif how == "pad":  # random bytes in the middle
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.binary(min_size=1, max_size=4096))
    else:  # a run of zeros (a damaged sector)
        at = draw(st.integers(0, len(data) - 1))
        data[at : at + draw(st.integers(1, 8192))] = bytes(min(8192, len(data) - at))
    return name, bytes(data)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[ExtractionSandbox]:
    with ExtractionSandbox(recycle_after=1_000_000) as extractor:
        yield extractor


def test_mutated_files_end_as_text_or_a_failure_code(
    sandbox: ExtractionSandbox, tmp_path: Path
) -> None:
    outcomes: dict[str, int] = {}

    @settings(
        max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
    )
    @given(case=mutated())
    def property_(case: tuple[str, bytes]) -> None:
        name, data = case
        path = tmp_path / name
        path.write_bytes(data)
        started = time.monotonic()
        try:
            result = sandbox.run(path, detect_format(data[:8192], name), LIMITS)
        except ProcessingError as exc:
            assert exc.code in FAILURE_CODES, (name, exc.code, exc.message)
            assert not LEAKS.search(exc.message), exc.message
            outcomes[exc.code] = outcomes.get(exc.code, 0) + 1
        else:
            assert isinstance(result, ExtractionResult)
            outcomes["text"] = outcomes.get("text", 0) + 1
        assert time.monotonic() - started < LIMITS.timeout_seconds + 10

    property_()
    # Both ways occurred: the mutations reach the parsers, and the parsers refuse some.
    assert outcomes.get("text") and sum(outcomes.values()) > outcomes["text"], outcomes
    # The extractor process is still there for the next, ordinary file.
    clean = DOCS / "docling__wiki.md"
    assert "Big Blue" in sandbox.run(clean, "text/markdown", LIMITS).text
