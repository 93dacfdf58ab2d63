"""The one rule numbering a document's lines (ldims.text.lines): the index's chunks, the
streamed and the whole reads, the sizes and qmd's page markers all count the same lines."""

from __future__ import annotations

from pathlib import Path

from ldims.documents.extract_text import text_measures, text_pieces, window
from ldims.extracts import ExtractStore
from ldims.text import (
    ExtractionResult,
    Page,
    blank_line,
    chunk_pages,
    joined,
    line_count,
    numbered_pages,
    page_texts,
)

PAGES = [
    Page(2, "second page\nwith two lines"),
    Page(1, "# Title\n\nfirst page, line three\n" + "word " * 700),
    Page(3, "\nthird page after a blank first line\n"),
]


def _result() -> ExtractionResult:
    return ExtractionResult(
        format="application/pdf",
        extractor="test",
        text=joined(page_texts(ExtractionResult("x", "x", "", PAGES))),
        pages=PAGES,
    )


def test_pages_are_numbered_in_page_order_with_one_line_between() -> None:
    texts = page_texts(_result())
    assert texts[0].startswith("# Title") and texts[1].startswith("second page")
    firsts = [first for first, _ in numbered_pages(texts)]
    lines = joined(texts).split("\n")
    # Each page's first line is where the joined text has it, one blank line before it.
    for first, text in zip(firsts, texts, strict=True):
        assert lines[first - 1] == text.split("\n")[0]
        if first > 1:
            assert lines[first - 2] == ""
    newlines = sum(text.count("\n") for text in texts)
    assert line_count(newlines, len(texts)) == len(lines)


def test_every_chunk_is_the_lines_a_read_shows(tmp_path: Path) -> None:
    result = _result()
    lines = joined(page_texts(result)).split("\n")
    chunks = chunk_pages(result.pages, max_chars=300)
    assert len(chunks) > 3  # the long line is cut into pieces
    pieces: dict[int, str] = {}
    for chunk in chunks:
        if chunk.line_start == chunk.line_end and len(lines[chunk.line_start - 1]) > 300:
            pieces[chunk.line_start] = pieces.get(chunk.line_start, "") + chunk.text
            continue
        assert chunk.text == "\n".join(lines[chunk.line_start - 1 : chunk.line_end])
    assert pieces and all(lines[number - 1] == text for number, text in pieces.items())
    # Pages given out of order are chunked in page order, as they are read.
    assert [chunk.page for chunk in chunks] == sorted(chunk.page for chunk in chunks)


def test_the_streamed_read_and_the_sizes_follow_the_rule(tmp_path: Path) -> None:
    unordered = _result()  # stored in page order, as the extractors store them
    result = ExtractionResult(
        unordered.format, unordered.extractor, unordered.text, sorted(PAGES, key=lambda p: p.number)
    )
    store = ExtractStore(tmp_path)
    store.save("a" * 64, result)
    path = store.path("a" * 64, result.format)
    whole = joined(page_texts(result))
    streamed = "".join(text_pieces(path, blank_line))
    assert streamed == whole
    assert text_measures(path).lines == len(whole.split("\n"))
    shown = window([whole], 10_000, from_line=6, max_lines=2, numbered=True)
    assert shown.text.splitlines()[0].startswith("6: second page")
