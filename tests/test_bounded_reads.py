"""Every read and every chunk is bounded whatever the document (issue 33, finding 5).

qmd ``get``, the ``qmd://`` resource and ``multi_get`` answer at most
``LDIMS_MCP_MAX_CONTENT_CHARS`` characters, a longer read ending with the ``get`` that goes
on — followed, those calls give the whole text exactly once — and the API's memory does not
grow with the document under concurrent largest reads (the text is read from the extract in
pieces). A text without line breaks is cut into chunks of the bound like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import threading
from pathlib import Path
from typing import Any

import httpx2
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from indexer import Chunk
from ldims.documents.extract_text import (
    Measures,
    line_beginnings,
    read_extract,
    read_pages,
    text_measures,
    text_pieces,
    window,
)
from ldims.text import ExtractionResult, Page
from ldims.text.chunking import MAX_CHUNK_CHARS, chunk_pages
from tests.conftest import RedisServer, Stack, make_settings

CAP = 200_000  # LDIMS_MCP_MAX_CONTENT_CHARS of the stack
MB = 1 << 20
_NEXT = re.compile(
    r"\n\n\[\.\.\. truncated at \d+ characters: [^\]]*Continue with get "
    r'file="(?P<file>[^"]+)"(?: fromChar=(?P<char>\d+))?[^\]]*\]$'
)
FIRST_WORD, LAST_WORD = "alphaquintessa", "omegaquintessa"
WORDS = ["turbine", "blade", "controller", "fault", "code", "warranty", "zebra", "quokka"]


def prose(size: int, seed: int, newline_every: int | None = None) -> str:
    """``size`` characters of words (a line break after every ``newline_every`` words)."""
    rng = random.Random(seed)
    words: list[str] = []
    total = 0
    while total < size:
        word = rng.choice(WORDS) + str(rng.randrange(1000))
        words.append(word)
        total += len(word) + 1
        if newline_every and len(words) % newline_every == 0:
            words.append("\n")
    return " ".join(words).replace(" \n ", "\n")[:size]


def lines_of(chunks: list[Chunk]) -> dict[int, str]:
    """The document's lines rebuilt from chunks (pieces of one line joined in order)."""
    lines: dict[int, str] = {}
    for chunk in chunks:
        if chunk.line_start == chunk.line_end and chunk.line_start in lines:
            lines[chunk.line_start] += chunk.text  # the next piece of a long line
            continue
        for number, text in enumerate(chunk.text.split("\n"), start=chunk.line_start):
            lines[number] = text
    return lines


# --- chunks ------------------------------------------------------------------------------------
def test_a_20_mb_line_is_cut_into_chunks_of_the_bound() -> None:
    text = prose(20 * MB, 1)
    assert "\n" not in text
    chunks = chunk_pages([Page(1, text)])
    assert max(len(chunk.text) for chunk in chunks) <= MAX_CHUNK_CHARS
    assert len(chunks) >= len(text) // MAX_CHUNK_CHARS
    assert {(chunk.line_start, chunk.line_end) for chunk in chunks} == {(1, 1)}
    assert "".join(chunk.text for chunk in chunks) == text  # cut at spaces, nothing lost
    assert all(chunk.text.endswith(" ") for chunk in chunks[:-1])  # words stay whole


def test_long_lines_among_short_ones_keep_their_line_numbers() -> None:
    cjk = "数据库迁移计划" * 1000  # 7,000 characters and no space: cut at the bound
    first = "short line\n" + prose(5000, 2) + "\nbetween\n" + cjk + "\nlast line"
    second = "page two\n" + "x" * 2500
    chunks = chunk_pages([Page(1, first), Page(2, second)])
    assert max(len(chunk.text) for chunk in chunks) <= MAX_CHUNK_CHARS
    numbered = "\n\n".join([first, second]).split("\n")
    lines = lines_of(chunks)
    assert all(lines[number] == numbered[number - 1] for number in lines)
    assert sorted(lines) == [n for n, line in enumerate(numbered, 1) if line.strip()]
    assert [c.page for c in chunks if c.line_start == 8] == [2, 2]  # "x" * 2500 in two


def test_the_pieces_of_a_long_line_joined_give_it_back_blank_pieces_too() -> None:
    line = "x" + " " * 5000 + "y"  # its middle piece is nothing but spaces
    chunks = chunk_pages([Page(1, "before\n" + line + "\n" + " " * 5000)])
    assert "".join(chunk.text for chunk in chunks if chunk.line_start == 2) == line
    assert all(chunk.line_start != 3 for chunk in chunks)  # a wholly blank line: no chunk


# --- reading an extract in pieces --------------------------------------------------------------
def test_a_window_walk_gives_the_text_exactly_once(tmp_path: Path) -> None:
    pages = [prose(300_000, 3, 9), prose(250_000, 4), "", 'quotes " and \\ and é 中文 😀\n']
    result = ExtractionResult(
        "text/plain", "test", "\n\n".join(pages), [Page(n, text) for n, text in enumerate(pages, 1)]
    )
    path = tmp_path / "extract.json"
    path.write_text(result.to_json(), encoding="utf-8")
    marker = "\n<!-- page {} -->\n".format
    whole = "".join(text_pieces(path, marker))
    assert whole == pages[0] + "".join(marker(n) + t for n, t in enumerate(pages[1:], 2))
    parts: list[str] = []
    line, char = 1, 0
    while True:
        part = window(text_pieces(path, marker), 70_000, line, char)
        assert len(part.text) <= 70_000
        parts.append(part.text)
        if part.next_line is None:
            break
        if not part.next_char:
            parts.append("\n")
        line, char = part.next_line, part.next_char
    assert "".join(parts) == whole
    # Lines as the documents toolset numbers them, each cut past the bound.
    numbered = "\n\n".join(pages).split("\n")
    blank = "\n\n".format
    shown = list(line_beginnings(text_pieces(path, lambda n: blank()), 30, 50))
    assert shown == [line[:50] for line in numbered[29:]]
    # Pages as the documents toolset reads them: each cut past the bound, and their count.
    assert read_pages(path, 1, 10, 1000) == ([pages[0][:1001]], 4)
    assert read_pages(path, 3, 4, 1000) == (["", pages[3]], 4)


def test_a_texts_sizes_are_walked_once_per_extract(tmp_path: Path) -> None:
    pages = [prose(200_000, 5, 7), "", "é 中文 😀\nend"]
    result = ExtractionResult(
        "text/plain", "test", "the text value", [Page(n, text) for n, text in enumerate(pages, 1)]
    )
    path = tmp_path / "extract.json"
    path.write_text(result.to_json(), encoding="utf-8")
    joined = "\n\n".join(pages)
    expected = Measures(3, sum(map(len, pages)), joined.count("\n") + 1, len("the text value"))
    assert text_measures(path) == expected
    # The same size and time, a line break less: the sizes are remembered, not walked again.
    stat = path.stat()
    raw = result.to_json()
    assert raw.count("\\nend") == 1
    path.write_text(raw.replace("\\nend", "  end"), encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    assert text_measures(path) == expected
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # changed: walked again
    assert text_measures(path).lines == expected.lines - 1


def test_an_extract_the_walk_cannot_follow_is_read_whole_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "confidential words"
    result = ExtractionResult("text/plain", "test", secret, [Page(2, secret), Page(1, "one")])
    path = tmp_path / "unordered.json"
    path.write_text(result.to_json(), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            whole = read_extract(path, lambda: "".join(text_pieces(path, "|".format)), _pages)
            assert whole == "one|" + secret
        assert text_measures(path).lines == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert path.name in warnings[0].getMessage()
    assert secret not in caplog.text


def _pages(result: ExtractionResult) -> str:
    return "|".join(page.text for page in sorted(result.pages, key=lambda page: page.number))


# --- over the real stack -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Any:
    tmp = tmp_path_factory.mktemp("bounded")
    redis_url = shared_redis.url.rsplit("/", 1)[0] + "/11"
    settings = make_settings(tmp, redis_url, mcp_max_content_chars=CAP)
    stack = Stack(settings, tmp).start()
    # Words found once, at the start and the end of the long line (qmd's search must find both).
    oneline = f"{FIRST_WORD} {prose(8 * MB, 5)} {LAST_WORD}"
    texts = {"oneline.txt": oneline, "lines.md": prose(8 * MB, 6, 12)}
    stack.ids = {}
    try:
        # Both uploaded first: one is indexed while the other is extracted.
        for name, text in texts.items():
            answer = stack.upload(name, text.encode(), collection="big")
            assert answer.status_code == 202, answer.text
            stack.ids[name] = answer.json()["documentId"]
        for name, text in texts.items():
            done = stack.wait_final(stack.ids[name], timeout=300)
            assert done["status"] == "completed", done
            assert done["chunks"] >= len(text) // MAX_CHUNK_CHARS  # not one 8 MB chunk
        yield stack, texts
    finally:
        stack.stop()


async def session(url: str) -> tuple[Any, Client]:
    client = httpx2.AsyncClient(headers={"X-LDIMS-Tenant": "default"}, timeout=120)
    mcp = Client(streamable_http_client(f"{url}/mcp", http_client=client))  # type: ignore[arg-type]
    await mcp.__aenter__()
    return client, mcp


async def close(client: Any, mcp: Client) -> None:
    await mcp.__aexit__(None, None, None)
    await client.aclose()


def text_of(result: Any) -> str:
    assert not result.is_error, result.content
    return str(result.content[0].resource.text)


async def walk(mcp: Client, file: str) -> tuple[str, int]:
    """The document read by following each truncation notice; and how many reads."""
    arguments: dict[str, Any] = {"file": file}
    parts: list[str] = []
    reads = 0
    while True:
        text = text_of(await mcp.call_tool("get", arguments))
        reads += 1
        notice = _NEXT.search(text)
        if notice is None:
            assert len(text) <= CAP
            parts.append(text)
            return "".join(parts), reads
        body = text[: notice.start()]
        assert len(body) <= CAP and len(text) <= CAP + 300
        parts.append(body)
        arguments = {"file": notice["file"], "fromChar": int(notice["char"] or 0)}
        if not notice["char"]:
            parts.append("\n")


def test_get_reads_a_long_document_in_bounded_parts_exactly_once(big: Any) -> None:
    stack, texts = big

    async def go() -> None:
        client, mcp = await session(stack.api.url)
        try:
            for name, text in texts.items():
                whole, reads = await walk(mcp, f"big/{name}")
                assert whole == text, name
                assert reads >= len(text) // CAP
        finally:
            await close(client, mcp)

    asyncio.run(go())


def test_qmd_search_finds_words_anywhere_in_a_long_line(big: Any) -> None:
    # The lexicon's text is rebuilt from the chunks: the pieces of one long line share its
    # number, and each once overwrote the last, so only the line's end was searchable.
    stack, _texts = big

    async def go() -> None:
        client, mcp = await session(stack.api.url)
        try:
            for word in (FIRST_WORD, LAST_WORD):
                found = await mcp.call_tool("search", {"query": word})
                assert not found.is_error, found.content
                files = [hit["file"] for hit in found.structured_content["results"]]
                assert files == ["big/oneline.txt"], (word, found.structured_content)
        finally:
            await close(client, mcp)

    asyncio.run(go())


def test_the_resource_and_multi_get_are_bounded_and_say_how_to_go_on(big: Any) -> None:
    stack, texts = big

    async def go() -> None:
        client, mcp = await session(stack.api.url)
        try:
            read = await mcp.read_resource("qmd://big/lines.md")
            text = read.contents[0].text
            assert len(text) <= CAP + 300 and text.startswith("1: ")
            notice = _NEXT.search(text)
            assert notice and notice["file"].startswith("big/lines.md:")
            assert "lineNumbers=true" in text[notice.start() :]
            shown = text[: notice.start()].split("\n")
            assert f"{len(shown) + 1}" == notice["file"].rsplit(":", 1)[1]
            assert shown[-1] == f"{len(shown)}: " + texts["lines.md"].split("\n")[len(shown) - 1]
            # maxBytes far over the bound: each big file skipped, the answer stays small.
            found = await mcp.call_tool("multi_get", {"pattern": "big/*", "maxBytes": 10**9})
            assert not found.is_error
            notices = sorted(item.text for item in found.content)
            assert notices == [
                f"[SKIPPED: big/{name} - File too large ({round(len(texts[name]) / 1024)}KB > "
                f"{round(CAP / 1024)}KB). Use 'get' with file=\"big/{name}\" to retrieve.]"
                for name in sorted(texts)
            ]
            for name, document_id in stack.ids.items():
                uri = f"ldims://docs/{document_id}/extracted_content"
                whole = (await mcp.read_resource(uri)).contents[0].text
                assert len(whole) <= CAP + 300
                assert whole.startswith(texts[name][: CAP // 2])
                assert f"is longer than {CAP} characters; it was cut here" in whole
            hostile = await mcp.call_tool("multi_get", {"pattern": "{1..100000}"})
            assert hostile.is_error
            assert hostile.structured_content["errorCode"] == "INVALID_INPUT"
            assert "\n" not in hostile.structured_content["errorMessage"]
        finally:
            await close(client, mcp)

    asyncio.run(go())


def test_rest_content_pages_through_a_long_text_in_bounded_parts(big: Any) -> None:
    stack, texts = big
    headers = {"X-LDIMS-Tenant": "default"}
    with httpx2.Client(base_url=stack.api.url, headers=headers, timeout=120) as http:
        for name, document_id in stack.ids.items():
            route = f"/api/documents/{document_id}/content"
            asked = http.get(route, params={"limit": 10**9}).json()  # capped, not the whole
            assert asked["length"] == CAP and asked["nextOffset"] == CAP
            assert asked["totalLength"] == len(texts[name])
            parts, offset = [], 0
            while offset is not None:
                body = http.get(route, params={"offset": offset}).json()
                assert body["length"] <= CAP and body["offset"] == offset
                parts.append(body["text"])
                offset = body["nextOffset"]
            assert "".join(parts) == texts[name], name


def test_eight_concurrent_largest_reads_keep_the_api_memory_flat(big: Any) -> None:
    stack, _ = big
    process = psutil.Process()  # the API serves from this process (a thread)
    peak = [0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            sampling.wait(0.01)

    async def reads() -> None:
        async with contextlib.AsyncExitStack() as opened:
            sessions = []
            for _ in range(8):
                client = await opened.enter_async_context(
                    httpx2.AsyncClient(headers={"X-LDIMS-Tenant": "default"}, timeout=120)
                )
                sessions.append(
                    await opened.enter_async_context(
                        Client(streamable_http_client(f"{stack.api.url}/mcp", http_client=client))  # type: ignore[arg-type]
                    )
                )
            calls = []
            for n, mcp in enumerate(sessions):
                name = ["big/oneline.txt", "big/lines.md"][n % 2]
                if n % 4 == 3:
                    calls.append(mcp.read_resource(f"qmd://{name}"))
                elif n % 4 == 1:  # the documents toolset's largest read
                    document_id = stack.ids[name.removeprefix("big/")]
                    calls.append(mcp.read_resource(f"ldims://docs/{document_id}/extracted_content"))
                elif n % 4 == 2:
                    calls.append(mcp.call_tool("multi_get", {"pattern": "big/*", "maxBytes": CAP}))
                else:
                    calls.append(mcp.call_tool("get", {"file": name, "fromLine": 1}))
            for answer in await asyncio.gather(*calls):
                assert not getattr(answer, "is_error", False)

    asyncio.run(reads())  # warm: imports, caches, the first sessions
    before = process.memory_info().rss
    watcher = threading.Thread(target=sample)
    watcher.start()
    try:
        for _ in range(2):
            asyncio.run(reads())
    finally:
        sampling.set()
        watcher.join()
    growth = (max(peak[0], process.memory_info().rss) - before) / MB
    # Measured: 8 MB; the whole-text reads before grew 94 MB with these 8 MB documents (the
    # issue's 19 MB ones: from 1.0 to 1.9 GiB). The bound is 100 MB; half of it here,
    # so that the test tells the two apart on these smaller documents.
    assert growth <= 50, f"the API grew {growth:.0f} MB under 8 concurrent largest reads"
