"""No raw personal data or secret leaves the proxy toolset, on any output path (issue 33,
finding 3): every kind the masker knows (one sample of each from ``tests.test_masking``) in
a real document, read with every proxy tool — over MCP with the official client and over
``/internal/mcp/execute`` — and searched with queries aimed at the values themselves
(``4111``, the e-mail's domain, ``sk``, ``password``, the phone's digits, IBAN groups…).

``doc_local_search`` used to mask its snippets after the index had marked the query's words
``**bold**``, and the marks split the values: ``**4111** 1111 1111 1111`` came back whole.
A value counts as leaked when it occurs in an answer with the marks, spaces and separators
taken out (so ``**4111** 1111 …`` is caught), each line of a private key on its own.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from indexer import index_terms, snippet
from ldims.proxy.highlight import WIDE_CHARS, masked_snippet
from ldims.proxy.masking import MASK_KINDS, mask
from runtime import build_services
from tests.conftest import RedisServer, Stack, make_settings, wait_until
from tests.test_masking import POSITIVES

# The first sample of every kind: (kind, the sentence, its values).
SAMPLES = {kind: (text, values) for kind, text, values in reversed(POSITIVES)}
# A key long enough that the index's 2,000-character chunks cut it: one chunk holds its BEGIN
# line and its first lines, the next its last lines and its END line.
LONG_KEY_LINES = [
    "".join("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(n * 7 + i) % 64]
            for i in range(64))
    for n in range(30)
]
LONG_KEY = "\n".join(
    ["-----BEGIN PRIVATE KEY-----", *LONG_KEY_LINES, "-----END PRIVATE KEY-----"]
)
FILLER = "\n".join(f"Filler line {n} of the key section, nothing to see." for n in range(24))


def document() -> str:
    parts = ["# Contacts and secrets of the Acme plant", ""]
    for kind in MASK_KINDS:
        text, _values = SAMPLES[kind]
        parts += [f"## Section {kind}", "", text, ""]
    parts += ["## Section long key", "", FILLER, LONG_KEY, "", "The end."]
    return "\n".join(parts) + "\n"


def secrets() -> list[str]:
    """Every value that must never come back: the samples' values, each line of the keys."""
    values = [value for text, found in SAMPLES.values() for value in found]
    lines = [line for value in values for line in value.split("\n") if "-----" not in line]
    return [value for value in values if "\n" not in value] + lines + LONG_KEY_LINES


def queries() -> list[str]:
    """Words aimed at the values: each word of each value, and the usual suspects."""
    words = {word for value in secrets() for word in re.findall(r"\w+", value)}
    words |= {"4111", "acme", "acme-corp", "sk", "password", "555", "2671", "DE89", "3704"}
    words |= {"BEGIN", "END", "PRIVATE", "KEY", "Bearer", "hunter2", "IBAN", "ИНН", "СНИЛС"}
    return sorted(word for word in words if len(word) >= 2)


def _norm(text: str) -> str:
    return re.sub(r"[\s\-().\u00a0№*\\]", "", text)


def leaks(answer: str) -> list[str]:
    """The values of :func:`secrets` that occur in ``answer`` (marks, spaces, separators and
    JSON escapes out)."""
    flat = _norm(answer.replace("\\n", " "))
    return [value for value in secrets() if _norm(value) in flat]


# --- the unit level: the highlighter never reveals what masking hid ----------------------------


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_a_snippet_is_masked_before_it_is_highlighted(kind: str) -> None:
    text, values = SAMPLES[kind]
    chunk = f"Intro words here.\n{text}\nMore words after it."
    hit = False
    for value in values:
        for word in {*re.findall(r"\w+", value)[:3], *re.findall(r"\w+", text)[:2]}:
            terms = list(index_terms(word)[0])
            if not terms:
                continue
            wide = snippet(chunk, terms, False, WIDE_CHARS)  # what the index returns
            out = masked_snippet(wide, terms, 240, lambda t: mask(t).text)
            assert _norm(value) not in _norm(out), (kind, word, out)
            hit = hit or "**" in out
    assert "[" + kind.upper() + "]" in masked_snippet(
        snippet(chunk, ["intro"], False, WIDE_CHARS), ["intro"], 240, lambda t: mask(t).text
    )
    assert hit  # some query word was highlighted: the marks are there, on masked text


def test_the_old_order_leaked_and_a_query_inside_a_masked_value_marks_nothing() -> None:
    chunk = "Charge it to my Visa 4111 1111 1111 1111, expiry 12/27."
    terms = list(index_terms("4111")[0])
    old = mask(snippet(chunk, terms, False, 240)).text  # highlight first, then mask
    assert "**4111** 1111 1111 1111" in old  # the finding: the marks split the card
    wide = snippet(chunk, terms, False, WIDE_CHARS)
    new = masked_snippet(wide, terms, 240, lambda t: mask(t).text)
    assert new == "Charge it to my Visa [CARD], expiry 12/27." and "4111" not in new


def test_a_window_cut_inside_a_value_drops_the_fragment() -> None:
    # The index's window began inside a card and ended inside an e-mail address.
    wide = "…1111 1111 1111, then " + "word " * 20 + "plain " + "word " * 20 + "to anna.smi…"
    out = masked_snippet(wide, ["plain"], 1000, lambda t: mask(t).text)
    assert "**plain**" in out and out.startswith("…word") and out.endswith("word…")
    assert "1111" not in out and "anna" not in out


# --- the real stack: every tool, both transports --------------------------------------------------


class Env:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.services = build_services(stack.settings)
        ring = self.services.keys
        self.admin = ring.create("acme", ["read", "ingest"]).key
        self.proxy = ring.create("acme", ["proxy"]).key
        self.doc_id = ""

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("masking_paths")
    settings = make_settings(
        tmp,
        shared_redis.url.rsplit("/", 1)[0] + "/12",
        mcp_rate_limit_calls=100_000,
        mcp_proxy_calls_per_minute=100_000,
        mcp_proxy_generations_per_hour=100_000,
        mcp_rate_limit_token_output=1_000_000,
        mcp_proxy_max_output_bytes=10_000_000,
        mcp_proxy_doc_bytes_per_hour=100_000_000,
    )
    stack = Stack(settings, tmp).start()
    environment = Env(stack)
    try:
        response = stack.client.post(
            "/api/documents",
            files={"file": ("secrets.md", document().encode())},
            headers=environment.headers(environment.admin),
        )
        assert response.status_code in (200, 201, 202), response.text
        environment.doc_id = response.json()["documentId"]
        url = f"/api/documents/{environment.doc_id}"
        headers = environment.headers(environment.admin)
        done = wait_until(
            lambda: stack.client.get(url, headers=headers).json()["status"]
            in ("completed", "failed"),
            120,
            0.1,
        )
        assert done and stack.client.get(url, headers=headers).json()["status"] == "completed"
        yield environment
    finally:
        stack.stop()
        environment.services.close()


def calls(env: Env, sections: list[str]) -> list[tuple[str, dict[str, Any]]]:
    doc = {"doc_id": env.doc_id}
    out: list[tuple[str, dict[str, Any]]] = [
        ("read_doc_metadata", doc),
        ("list_available_tools", {}),
        ("read_doc_pages", {**doc, "page_start": 1, "page_end": 1}),
    ]
    out += [("read_doc_section", {**doc, "section_id": section}) for section in sections]
    out += [("doc_local_search", {**doc, "query": query}) for query in queries()]
    return out


def test_no_raw_value_over_the_envelope(env: Env) -> None:
    def execute(tool: str, arguments: dict[str, Any], trace: str) -> dict[str, Any]:
        body = {"tool_name": tool, "arguments": arguments, "trace_id": trace}
        response = env.stack.client.post(
            "/internal/mcp/execute", json=body, headers=env.headers(env.proxy)
        )
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    metadata = execute("read_doc_metadata", {"doc_id": env.doc_id}, "t-meta")["result"]
    sections = [section["section_id"] for section in metadata["sections"]]
    assert len(sections) >= len(MASK_KINDS) + 1
    masked_kinds: set[str] = set()
    snippets_marked = 0
    for number, (tool, arguments) in enumerate(calls(env, sections)):
        answer = execute(tool, arguments, f"t-{number}")
        text = json.dumps(answer, ensure_ascii=False)
        assert not leaks(text), (tool, arguments, leaks(text))
        masked_kinds |= set(answer["result"]["meta"]["masked"])
        if tool == "doc_local_search":
            snippets_marked += "**" in text
    assert masked_kinds == set(MASK_KINDS)  # every kind was in an answer, masked
    assert snippets_marked >= 5  # the snippets still mark the query's words


def test_no_raw_value_over_mcp(env: Env) -> None:
    async def go() -> None:
        async with (
            httpx2.AsyncClient(headers=env.headers(env.proxy), timeout=60) as http,
            Client(streamable_http_client(f"{env.stack.api.url}/mcp", http_client=http)) as mcp,  # type: ignore[arg-type]
        ):
            metadata = await mcp.call_tool("read_doc_metadata", {"doc_id": env.doc_id})
            assert not metadata.is_error
            sections = [s["section_id"] for s in metadata.structured_content["sections"]]  # type: ignore[index]
            for tool, arguments in calls(env, sections):
                result = await mcp.call_tool(tool, arguments)
                assert not result.is_error, (tool, result.content)
                text = json.dumps(
                    [result.structured_content, [c.model_dump() for c in result.content]],
                    ensure_ascii=False,
                )
                assert not leaks(text), (tool, arguments, leaks(text))

    asyncio.run(go())


# --- section ids: made of the masked heading, never of the raw one -------------------------------

HEADINGS = {
    "Card 4111 1111 1111 1111": "4111",
    "password: hunter2": "hunter2",
    "Write to anna.smith@acme-corp.example": "anna",
}


def _upload(env: Env, name: str, text: str) -> str:
    headers = env.headers(env.admin)
    response = env.stack.client.post(
        "/api/documents", files={"file": (name, text.encode())}, headers=headers
    )
    assert response.status_code in (200, 201, 202), response.text
    doc_id: str = response.json()["documentId"]
    url = f"/api/documents/{doc_id}"
    assert wait_until(
        lambda: env.stack.client.get(url, headers=headers).json()["status"]
        in ("completed", "failed"),
        120,
        0.1,
    )
    assert env.stack.client.get(url, headers=headers).json()["status"] == "completed"
    return doc_id


def test_a_section_id_holds_no_masked_value_and_reads_back(env: Env) -> None:
    # The finding: ids were slugs of the raw heading ("sec_card_4111_1111_1111_1111"), and the
    # last masking pass leaves ids alone, while the heading beside it was masked.
    parts = ["# Plain heading", "", "Plain text."]
    for number, heading in enumerate(HEADINGS):
        parts += ["", f"## {heading}", "", f"Body number {number}."]
    doc_id = _upload(env, "headings.md", "\n".join(parts) + "\n")

    def execute(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        body = {"tool_name": tool, "arguments": {"doc_id": doc_id, **arguments}}
        response = env.stack.client.post(
            "/internal/mcp/execute", json=body, headers=env.headers(env.proxy)
        )
        assert response.status_code == 200, response.text
        return response.json()["result"]  # type: ignore[no-any-return]

    sections = execute("read_doc_metadata", {})["sections"]
    assert len(sections) == 1 + len(HEADINGS)
    assert sections[0]["section_id"] == "sec_plain_heading"  # a clean heading keeps its slug
    text = json.dumps(sections, ensure_ascii=False).casefold()
    for raw in HEADINGS.values():
        assert raw not in text, (raw, sections)
    for number, section in enumerate(sections[1:]):
        assert section["section_id"] == f"sec_{number + 2}"  # masked: its position
        assert "[" in section["heading"]  # the heading shown is masked too
        read = execute("read_doc_section", {"section_id": section["section_id"]})
        assert read["section_id"] == section["section_id"]
        assert f"Body number {number}." in read["text"]
