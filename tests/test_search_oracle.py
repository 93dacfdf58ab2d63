"""No answer to a search tells whether another tenant holds a word (issue 33, finding 1).

The attack: the cost budget counted postings over every tenant. Tenant B holds its own nonce
word in a known number of chunks and asks for ``nonce WORD`` with the budget set so that the
nonce alone sits exactly at it: a 422 then said that some tenant holds WORD. Here B asks its
questions (that one, one over the budget, plain ones with scores) over REST and MCP, then A
uploads documents holding every word of B's questions, and B asks again: every answer,
status and body (less ``executionTime``), is the same.

Real parts: the ``ldims`` API and workers on Redis, the catalog, API keys of two tenants,
the official MCP client over HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from runtime import build_services
from tests.conftest import RedisServer, Stack, make_settings, wait_until

NONCE = "zorblatquex"
SECRET = "hunter2vault"  # what B tries to learn A holds
B_CHUNKS = 6  # B's documents holding the nonce, one chunk each
# The budget: B's nonce alone sits exactly at it (exact mode scores terms from arrays, each
# counted once per chunk holding it).
MAX_POSTINGS = B_CHUNKS
B_TEXTS = [
    f"{NONCE} field notes: the meadow by the river",
    f"{NONCE} field notes: a lantern in the barn",
    f"{NONCE} field notes: lantern lantern, the old lantern of the mill",
    *(f"{NONCE} field notes, day {day}" for day in (4, 5, 6)),
]
QUESTIONS: list[tuple[str, str]] = [
    (f"{NONCE} {SECRET}", "exact"),  # at the limit: another tenant's SECRET tipped it over
    (f"{NONCE} meadow", "exact"),  # over the limit with B's own words: refused either way
    ("lantern", "keyword"),  # scores by B's own statistics
    ("lantern", "exact"),
    ('"old lantern"', "exact"),  # a phrase: over the limit, refused either way
    (SECRET, "exact"),
    ("meadow", "exact"),
]


class Tenants:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.services = build_services(stack.settings)
        self.keys = {
            tenant: self.services.keys.create(tenant, ["read", "ingest"]).key
            for tenant in ("alpha", "bravo")
        }

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def upload(self, tenant: str, texts: list[str]) -> None:
        """Upload ``texts`` as documents of ``tenant`` and wait until they are searchable."""
        ids = []
        for number, text in enumerate(texts):
            response = self.stack.client.post(
                "/api/documents",
                files={"file": (f"{tenant}-{number}.txt", text.encode())},
                headers=self.headers(tenant),
            )
            assert response.status_code == 202, response.text
            ids.append(response.json()["documentId"])

        def completed() -> bool:
            for document_id in ids:
                state = self.stack.client.get(
                    f"/api/documents/{document_id}", headers=self.headers(tenant)
                ).json()["status"]
                assert state != "failed", document_id
                if state != "completed":
                    return False
            return True

        wait_until(completed, 120, 0.2)

    def rest(self, tenant: str, query: str, mode: str) -> dict[str, Any]:
        response = self.stack.client.get(
            "/api/search",
            params={"query": query, "searchMode": mode, "maxResults": 10},
            headers=self.headers(tenant),
        )
        return {"status": response.status_code, "body": _without_time(response.json())}

    def mcp(self, tenant: str, questions: list[tuple[str, str]]) -> list[dict[str, Any]]:
        async def ask() -> list[dict[str, Any]]:
            async with (
                httpx2.AsyncClient(headers=self.headers(tenant), timeout=60) as http,
                Client(
                    streamable_http_client(f"{self.stack.api.url}/mcp", http_client=http)  # type: ignore[arg-type]
                ) as client,
            ):
                answers = []
                for query, mode in questions:
                    if mode != "exact":
                        continue  # the tool's modes: exact | semantic (REST asks keyword)
                    result = await client.call_tool(
                        "searchDocuments",
                        {"query": query, "maxResults": 10, "filters": {"searchMode": mode}},
                    )
                    body = result.structured_content
                    answers.append({"isError": result.is_error, "body": _without_time(body)})
                return answers

        return asyncio.run(ask())

    def answers(self, tenant: str) -> dict[str, Any]:
        return {
            "rest": [self.rest(tenant, query, mode) for query, mode in QUESTIONS],
            "mcp": self.mcp(tenant, QUESTIONS),
        }


def _without_time(body: Any) -> Any:
    body = json.loads(json.dumps(body))
    if isinstance(body, dict) and isinstance(body.get("searchMetadata"), dict):
        body["searchMetadata"].pop("executionTime", None)
    return body


@pytest.fixture(scope="module")
def tenants(
    tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer
) -> Iterator[Tenants]:
    tmp = tmp_path_factory.mktemp("oracle")
    settings = make_settings(
        tmp, shared_redis.url.rsplit("/", 1)[0] + "/5", search_max_postings=MAX_POSTINGS
    )
    stack = Stack(settings, tmp).start()
    found = Tenants(stack)
    try:
        found.upload("bravo", B_TEXTS)
        yield found
    finally:
        stack.stop()
        found.services.close()


def test_no_answer_of_b_changes_when_a_holds_its_words(tenants: Tenants) -> None:
    before = tenants.answers("bravo")
    rest = before["rest"]
    # The attack's two cases as B sees them: at the limit it runs, past it it is refused.
    assert rest[0]["status"] == 200 and rest[0]["body"]["totalMatches"] == 0, rest[0]
    assert rest[1]["status"] == 422, rest[1]
    assert rest[1]["body"]["errorCode"] == "QUERY_UNPROCESSABLE"
    assert rest[2]["status"] == 200 and rest[2]["body"]["totalMatches"] == 2, rest[2]
    assert len({hit["relevanceScore"] for hit in rest[2]["body"]["results"]}) == 2
    assert rest[4]["status"] == 422 and rest[5]["body"]["totalMatches"] == 0

    # A uploads documents holding every word of B's questions, many times over.
    words = f"{NONCE} {SECRET} meadow old lantern " * 3
    tenants.upload("alpha", [f"{words}\n\n{NONCE} meadow {number}" for number in range(3)])
    seen = tenants.rest("alpha", SECRET, "exact")
    assert seen["status"] == 200 and seen["body"]["totalMatches"] == 3, seen

    after = tenants.answers("bravo")
    assert after == before
