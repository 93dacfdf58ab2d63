"""Real MCP clients against ``ldims serve``: the MCP conformance suite and the MCP Inspector CLI.

Both are the published Node packages pinned in ``tests/mcp_clients/package-lock.json`` (with
the Node 22 binary they need), installed by ``tests/mcp_clients/install.sh``. A missing or stale
install fails these tests: it is never a reason to skip them.

* The conformance suite runs its active scenarios against ``/mcp`` with
  ``tests/mcp_clients/conformance-baseline.yml``: every scenario must pass except the listed
  ones, which only the suite's own fixture server can pass (or which need a feature LDIMS does
  not offer); a listed scenario that passes fails the run too.
* The Inspector CLI lists LDIMS's tools and calls ``searchDocuments`` with filters, finding a
  document ingested through the REST API, over ``/mcp`` and over the legacy SSE transport.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import ROOT, free_port, wait_until

CLIENTS = ROOT / "tests" / "mcp_clients"
MODULES = CLIENTS / "node_modules"
NODE = MODULES / ".bin" / "node"
STAMP = MODULES / ".ldims-installed"  # written by install.sh after a successful `npm ci`
BASELINE = CLIENTS / "conformance-baseline.yml"

# Scenarios that test what LDIMS does offer; each must run and pass (not merely be unlisted).
MUST_PASS = {
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "prompts-list",
    "dns-rebinding-protection",
}
# A scenario's results land in DIR/server-<scenario>-<ISO timestamp>/checks.json.
RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")
DOC_TEXT = b"The quokka conformance memo: zebras graze near the river.\n"


def node_clients() -> dict[str, Path]:
    """The installed clients; a missing or out-of-date install fails the test, clearly."""
    fix = "run `bash tests/mcp_clients/install.sh` (part of `make test`'s install step)"
    if not NODE.exists():
        pytest.fail(f"tests/mcp_clients/node_modules is missing: {fix}", pytrace=False)
    want = hashlib.sha256(
        (CLIENTS / "package.json").read_bytes() + (CLIENTS / "package-lock.json").read_bytes()
    ).hexdigest()
    if not STAMP.exists() or STAMP.read_text().strip() != want:
        pytest.fail(
            f"tests/mcp_clients/node_modules does not match package-lock.json: {fix}",
            pytrace=False,
        )

    def bin_of(package: str, name: str) -> Path:
        meta = json.loads((MODULES / package / "package.json").read_text())
        bins = meta["bin"] if isinstance(meta["bin"], dict) else {name: meta["bin"]}
        return (MODULES / package / bins[name]).resolve()

    return {
        "conformance": bin_of("@modelcontextprotocol/conformance", "conformance"),
        "inspector": bin_of("@modelcontextprotocol/inspector", "mcp-inspector"),
    }


def run_node(script: Path, args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """Run a client under the pinned Node 22, its state (HOME) in a temp dir."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LDIMS_", "npm_", "NODE_"))}
    env.update(HOME=str(home), NO_COLOR="1")
    return subprocess.run(
        [str(NODE), str(script), *args],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``ldims serve`` (API + workers + embedded Redis) on a free port with a temp data dir."""
    base = tmp_path_factory.mktemp("mcp-serve")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDIMS_")}
    env.update(LDIMS_DATA_DIR=str(base / "data"), LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "runtime.cli.main", "serve", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--extract-workers", "1"]
    url = f"http://127.0.0.1:{port}"
    with (base / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=log, stderr=log, start_new_session=True
        )

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"`ldims serve` exited: {(base / 'serve.log').read_text()}")
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 60, 0.2)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)
        with contextlib.suppress(ProcessLookupError):  # what is left of its group
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@pytest.fixture(scope="module")
def ingested(served: str) -> str:
    """One small text document in the default tenant (no X-LDIMS-Tenant), indexed."""
    with httpx.Client(base_url=served, timeout=30) as client:
        response = client.post("/api/documents", files={"file": ("quokka.txt", DOC_TEXT)})
        assert response.status_code == 202, response.text
        document_id: str = response.json()["documentId"]

        def final() -> str | None:
            status = client.get(f"/api/documents/{document_id}").json()["status"]
            return status if status in ("completed", "failed") else None

        assert wait_until(final, 60, 0.1) == "completed"
    return document_id


def scenario_results(out: Path) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = {}
    for directory in sorted(out.iterdir()):
        match = RESULT_DIR.match(directory.name)
        assert match, f"unexpected entry in the results: {directory.name}"
        results[match["scenario"]] = json.loads((directory / "checks.json").read_text())
    return results


def passed(checks: list[dict[str, Any]]) -> bool:
    """As --expected-failures counts: no FAILURE and no WARNING (and at least one check)."""
    return bool(checks) and all(c["status"] in ("SUCCESS", "INFO") for c in checks)


def test_conformance_suite_passes_except_the_baseline(served: str, tmp_path: Path) -> None:
    clients = node_clients()
    out = tmp_path / "results"
    args = ["server", "--url", f"{served}/mcp", "--expected-failures", str(BASELINE)]
    result = run_node(clients["conformance"], [*args, "-o", str(out)], tmp_path / "home")
    summary = result.stdout[result.stdout.find("=== SUMMARY ===") :]  # the whole log if absent
    report = f"stdout:\n{summary}\nstderr:\n{result.stderr}"
    assert result.returncode == 0, report
    assert "Baseline check passed" in result.stdout, report

    results = scenario_results(out)
    baseline = set(yaml.safe_load(BASELINE.read_text())["server"])
    ok = {name for name, checks in results.items() if passed(checks)}
    failing = {
        name: [
            f"{c['id']}: {c['status']} {c.get('errorMessage') or ''}"
            for c in checks
            if c["status"] not in ("SUCCESS", "INFO")
        ]
        for name, checks in results.items()
        if name not in ok
    }
    assert ok >= MUST_PASS, {name: failing.get(name, "did not run") for name in MUST_PASS - ok}
    # Every listed scenario ran and failed (the suite ignores entries naming no scenario it ran).
    assert not baseline - set(results), f"listed but not run: {baseline - set(results)}"
    assert not baseline & ok, f"stale baseline entries (they pass): {baseline & ok}"
    # ... and every scenario that failed is listed (the suite's exit code says so too).
    assert set(failing) == baseline, {n: failing[n] for n in set(failing) - baseline}
    # The DNS-rebinding guard: a foreign Host/Origin is refused and localhost is accepted.
    rebinding = {c["id"]: c["status"] for c in results["dns-rebinding-protection"]}
    assert rebinding == {
        "localhost-host-rebinding-rejected": "SUCCESS",
        "localhost-host-valid-accepted": "SUCCESS",
    }


def inspector(served: str, home: Path, *args: str, transport: str = "http") -> dict[str, Any]:
    """One Inspector CLI call over Streamable HTTP (or the legacy SSE transport); its
    ``--format json`` output's result."""
    clients = node_clients()
    url = f"{served}/mcp" if transport == "http" else f"{served}/sse"
    command = ["--cli", url, "--transport", transport, *args, "--format", "json"]
    result = run_node(clients["inspector"], command, home)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    body: dict[str, Any] = json.loads(result.stdout)
    assert "result" in body, body
    return body["result"]  # type: ignore[no-any-return]


def inspector_search(
    served: str, home: Path, arguments: dict[str, Any], transport: str = "http"
) -> dict[str, Any]:
    """``searchDocuments`` called with ``arguments`` through the Inspector CLI."""
    return inspector(
        served,
        home,
        "--method",
        "tools/call",
        "--tool-name",
        "searchDocuments",
        "--tool-args-json",
        json.dumps(arguments),
        transport=transport,
    )


def test_inspector_lists_the_tools_with_their_input_schemas(served: str, tmp_path: Path) -> None:
    result = inspector(served, tmp_path / "home", "--method", "tools/list")
    tools = {tool["name"]: tool for tool in result["tools"]}
    assert {"searchDocuments", "getDocumentStatus"} <= set(tools)

    search = tools["searchDocuments"]["inputSchema"]
    assert search["type"] == "object"
    assert search["required"] == ["query"]
    assert {"query", "maxResults", "filters", "offset"} <= set(search["properties"])
    # Published inline (no $defs to resolve), an object or null.
    assert search["properties"]["filters"]["type"] == ["object", "null"]
    filters = search["properties"]["filters"]["properties"]
    assert {"dateFrom", "dateTo", "documentType", "submitter", "collection"} <= set(filters)
    assert filters["searchMode"]["enum"] == ["exact", "semantic"]

    status = tools["getDocumentStatus"]["inputSchema"]
    assert status["type"] == "object"
    assert status["required"] == ["documentId"]
    assert status["properties"]["documentId"]["type"] == "string"
    assert all(tools[name].get("description") for name in tools)


def test_inspector_calls_search_documents_with_filters(
    served: str, ingested: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"

    def search(filters: dict[str, Any]) -> dict[str, Any]:
        arguments = {"query": "quokka zebras", "maxResults": 5, "filters": filters}
        result = inspector_search(served, home, arguments)
        assert result["isError"] is False, result
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
        return result["structuredContent"]  # type: ignore[no-any-return]

    found = search(
        {
            "collection": "default",
            "dateFrom": "2000-01-01",
            "dateTo": "2999-12-31",
            "searchMode": "exact",
        }
    )
    assert found["isError"] is False
    assert found["totalMatches"] == 1
    assert [hit["documentId"] for hit in found["results"]] == [ingested]
    hit = found["results"][0]
    assert hit["documentName"] == "quokka.txt"
    assert "**quokka**" in hit["matchedContext"]
    assert hit["uri"] == f"ldims://docs/{ingested}/pages/1"
    assert found["searchMetadata"]["searchMode"] == "exact"

    # The filters object reaches the search as JSON: another collection finds nothing.
    other = search({"collection": "elsewhere", "searchMode": "exact"})
    assert other["totalMatches"] == 0 and other["results"] == []


def test_inspector_over_the_legacy_sse_transport(
    served: str, ingested: str, tmp_path: Path
) -> None:
    """``ldims serve`` on loopback serves /sse by default; the Inspector CLI's SSE transport
    lists the same tools as over /mcp and finds the document."""
    home = tmp_path / "home"
    over_sse = inspector(served, home, "--method", "tools/list", transport="sse")
    over_http = inspector(served, home, "--method", "tools/list")
    assert over_sse["tools"] == over_http["tools"]
    arguments = {"query": "quokka zebras", "filters": {"searchMode": "exact"}}
    result = inspector_search(served, home, arguments, transport="sse")
    assert result["isError"] is False, result
    assert [hit["documentId"] for hit in result["structuredContent"]["results"]] == [ingested]
