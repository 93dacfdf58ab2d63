"""Freshness: a commit of the index worker is seen by searchers of other processes at once.

The index worker writes in its own process; the API (REST and Streamable HTTP) and a stdio
``ldims mcp`` started before the upload each hold searchers of the older commit. Within one
second of the document turning ``completed`` (which the worker records after its commit)
both find it — in practice on the first search, since every search checks which commit is
the latest before it takes a searcher.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from tests.conftest import Stack, settings_env

FRESHNESS_SECONDS = 1.0


def rest_ids(stack: Stack, query: str) -> list[str]:
    body = stack.client.get("/api/search", params={"query": query}).json()
    return [hit["documentId"] for hit in body["results"]]


def mcp_ids(result: Any) -> list[str]:
    return [hit["documentId"] for hit in result.structured_content["results"]]


def test_rest_and_stdio_searchers_see_a_commit_within_a_second(stack: Stack) -> None:
    ldims = shutil.which("ldims", path=str(Path(sys.executable).parent))
    assert ldims, "the ldims command is installed with the package"
    parameters = StdioServerParameters(
        command=ldims, args=["mcp"], env=settings_env(stack.settings)
    )
    token = "quillfeather"
    # Searchers of the empty index are open in the API and the stdio server first.
    older = stack.upload("older.txt", b"an older note").json()["documentId"]
    assert stack.wait_final(older)["status"] == "completed"
    assert rest_ids(stack, "older") == [older]

    async def check() -> tuple[float, float]:
        async with Client(parameters) as client:
            missing = await client.call_tool("searchDocuments", {"query": token})
            assert mcp_ids(missing) == []
            assert rest_ids(stack, token) == []
            fresh = stack.upload("fresh.txt", f"a {token} arrives".encode()).json()["documentId"]
            assert stack.wait_final(fresh, timeout=60)["status"] == "completed"
            completed = time.monotonic()
            rest_at = stdio_at = None
            while time.monotonic() - completed < 5 and None in (rest_at, stdio_at):
                if rest_at is None and rest_ids(stack, token) == [fresh]:
                    rest_at = time.monotonic() - completed
                found = await client.call_tool("searchDocuments", {"query": token})
                if stdio_at is None and mcp_ids(found) == [fresh]:
                    stdio_at = time.monotonic() - completed
                await asyncio.sleep(0.05)
            assert rest_at is not None and stdio_at is not None, "never seen"
            return rest_at, stdio_at

    rest_after, stdio_after = asyncio.run(check())
    assert rest_after < FRESHNESS_SECONDS, rest_after
    assert stdio_after < FRESHNESS_SECONDS, stdio_after
