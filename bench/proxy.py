"""Proxy toolset benchmark: p50/p95 of each tool over MCP (Streamable HTTP, the official SDK
client) and over the envelope (``POST /internal/mcp/execute``), 8 concurrent clients, on the
dev corpus — beside the proxy seed's p95 targets (§9.1) and ours (half of them).

1. **The dev corpus** (``../shared/corpus/docs``, read in place) is ingested into a fresh
   data dir through the pipeline's own code, as ``bench/mcp_search.py`` does (its ``ingest``).
2. **The calls**: for every completed document, ``read_doc_metadata`` (which lists its
   sections), ``read_doc_section`` of each section (up to 20 a document), ``read_doc_pages``
   of 1-3 page spans drawn with ``random.Random(--seed)`` (up to 20 a document), and
   ``doc_local_search`` with 2-3 words of its own text (10 a document); every call has a
   trace id of its own, so the limits are checked (Redis) on every call but not hit.
3. **The server** runs in its own process (``--serve``): the real app (``create_app``) on that
   data dir plus an ``echo`` tool (the floor: the SDK and LDIMS's wrapper, no work), with the
   machine's Redis (``--redis``, under a key prefix of its own, deleted at the end) for the
   limits, and the proxy limits raised so that no call is refused.
4. **The load**: ``--clients`` clients in this process, each calling in a closed loop for
   ``--seconds`` a phase (after ``--warmup`` s not counted): ``echo``, then each tool over MCP,
   then each tool over the envelope (one ``httpx`` client per worker, keep-alive). A call that
   fails counts as an error and is left out of the latencies.
5. **In-process floor**: the same calls through ``Proxy.call`` in one thread of this process
   (no HTTP, no MCP): what the tool itself costs.

The table goes to stdout and ``bench/results/proxy.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_load import stop_server, wait_ready
from mcp_search import TENANT, corpus_files, ingest
from report import machine_line, markdown_table, ms, percentile, publish
from servers import Server, free_port, launch

from ldims.caller import TENANT_HEADER, Caller
from ldims.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "proxy.md"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "docs"
TOOLS = ("read_doc_metadata", "read_doc_section", "read_doc_pages", "doc_local_search")
SEED_P95_MS = {"read_doc_section": 80.0, "read_doc_pages": 120.0, "doc_local_search": 140.0}
# No limit is hit by the benchmark's calls: it measures the tools, not the refusals.
OPEN_LIMITS = {
    "LDIMS_MCP_PROXY_CALLS_PER_MINUTE": "100000000",
    "LDIMS_MCP_PROXY_GENERATIONS_PER_HOUR": "100000000",
    "LDIMS_MCP_RATE_LIMIT_CALLS": "1000000",
    "LDIMS_MCP_RATE_LIMIT_TOKEN_OUTPUT": "100000000",
    "LDIMS_MCP_PROXY_MAX_OUTPUT_BYTES": "1000000000",
    "LDIMS_MCP_PROXY_DOC_BYTES_PER_HOUR": "100000000000",
}
_WORD = re.compile(r"\w{5,}")


@dataclass
class Phase:
    transport: str
    tool: str
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


# --- the server ----------------------------------------------------------------------------------


def serve(data_dir: Path, port: int) -> None:
    """``--serve``: the LDIMS app plus an ``echo`` tool, under uvicorn (the child process)."""
    import uvicorn

    from runtime import create_app

    logging.basicConfig(level=logging.WARNING)
    app = create_app(Settings(data_dir=data_dir, log_level="WARNING"))

    @app.state.mcp.tool(name="echo", description="Return the text unchanged (benchmark floor).")
    async def echo(text: str) -> str:
        return text

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_server(data_dir: Path, redis_url: str, prefix: str) -> Server:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--data-dir"]
    command += [str(data_dir), "--port", str(port)]
    folder = data_dir / "serve"
    folder.mkdir()
    env = {"LDIMS_REDIS_URL": redis_url, "LDIMS_REDIS_KEY_PREFIX": prefix, **OPEN_LIMITS}
    return launch(command, folder, f"http://127.0.0.1:{port}/mcp", env)


# --- the calls -----------------------------------------------------------------------------------


def make_calls(settings: Settings, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Each tool's arguments over the corpus's completed documents (see the docstring)."""
    from runtime import build_services

    rng = random.Random(seed)
    services = build_services(settings)
    calls: dict[str, list[dict[str, Any]]] = {tool: [] for tool in TOOLS}
    try:
        with services.catalog.session() as session:
            from sqlalchemy import select

            from ldims.catalog import Document, public_document_id

            ids = [
                public_document_id(key)
                for key in session.scalars(
                    select(Document.id).where(Document.status == "completed").order_by(Document.id)
                )
            ]
        caller = Caller(tenant=TENANT, transport="internal")
        for doc_id in ids:
            view = services.proxy.store.view(caller, doc_id)
            calls["read_doc_metadata"].append({"doc_id": doc_id})
            for section in [s for s in view.sections if not s.damaged][:20]:
                calls["read_doc_section"].append({"doc_id": doc_id, "section_id": section.id})
            count = len(view.pages)
            for _ in range(min(20, count)):
                first = rng.randint(1, count)
                last = min(count, first + rng.randint(0, 2))
                calls["read_doc_pages"].append(
                    {"doc_id": doc_id, "page_start": first, "page_end": last}
                )
            words = _WORD.findall(" ".join(view.pages)[:200_000])
            for _ in range(10 if words else 0):
                query = " ".join(rng.sample(words, k=min(len(words), rng.randint(2, 3))))
                calls["doc_local_search"].append({"doc_id": doc_id, "query": query})
    finally:
        services.close()
    for arguments in calls.values():
        rng.shuffle(arguments)
    return calls


def in_process(
    settings: Settings, calls: dict[str, list[dict[str, Any]]], redis_url: str, prefix: str
) -> list[Phase]:
    """Every call once through ``Proxy.call`` in this thread (after one warm-up pass)."""
    from runtime import build_services

    services = build_services(
        settings.model_copy(
            update={
                "redis_url": redis_url,
                "redis_key_prefix": prefix,
                "mcp_proxy_calls_per_minute": 10**8,
                "mcp_proxy_generations_per_hour": 10**8,
                "mcp_rate_limit_calls": 10**6,
                "mcp_rate_limit_token_output": 10**8,
                "mcp_proxy_max_output_bytes": 10**9,
                "mcp_proxy_doc_bytes_per_hour": 10**11,
            }
        )
    )
    caller = Caller(tenant=TENANT, transport="internal")
    phases = []
    try:
        for tool in TOOLS:
            phase = Phase("in-process", tool)
            for arguments in calls[tool][:20]:
                services.proxy.call(caller, tool, arguments, uuid.uuid4().hex)
            started = time.perf_counter()
            for arguments in calls[tool][:400]:
                begun = time.perf_counter()
                try:
                    services.proxy.call(caller, tool, arguments, uuid.uuid4().hex)
                except Exception as exc:  # counted, as over the wire
                    phase.errors[getattr(exc, "code", type(exc).__name__)] += 1
                    continue
                phase.latencies.append(time.perf_counter() - begun)
            phase.seconds = time.perf_counter() - started
            phases.append(phase)
    finally:
        services.close()
    return phases


# --- the load ------------------------------------------------------------------------------------


async def warm_then_timed(worker: Any, args: argparse.Namespace) -> float:
    """``args.clients`` workers for ``args.warmup`` s not recorded, then for ``args.seconds``
    recorded; the timed part's wall seconds."""
    await asyncio.gather(
        *(worker(i, time.perf_counter() + args.warmup, False) for i in range(args.clients))
    )
    started = time.perf_counter()
    await asyncio.gather(*(worker(i, started + args.seconds, True) for i in range(args.clients)))
    return time.perf_counter() - started


async def mcp_phase(
    url: str, tool: str, calls: list[dict[str, Any]], args: argparse.Namespace
) -> Phase:
    phase = Phase("MCP", tool)

    async def worker(slot: int, end: float, record: bool) -> None:
        async with (
            httpx2.AsyncClient(headers={TENANT_HEADER: TENANT}, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            position = slot * max(1, len(calls) // args.clients)
            while time.perf_counter() < end:
                arguments = calls[position % len(calls)] if tool != "echo" else {"text": "ping"}
                position += 1
                begun = time.perf_counter()
                try:
                    result = await client.call_tool(
                        tool, arguments, meta={"traceId": uuid.uuid4().hex}
                    )
                except Exception as exc:
                    if record:
                        phase.errors[type(exc).__name__] += 1
                    continue
                if record:
                    if result.is_error:
                        code = (result.structured_content or {}).get("errorCode", "error")
                        phase.errors[str(code)] += 1
                    else:
                        phase.latencies.append(time.perf_counter() - begun)

    phase.seconds = await warm_then_timed(worker, args)
    return phase


async def envelope_phase(
    base: str, tool: str, calls: list[dict[str, Any]], args: argparse.Namespace
) -> Phase:
    phase = Phase("envelope", tool)

    async def worker(slot: int, end: float, record: bool) -> None:
        async with httpx.AsyncClient(
            base_url=base, headers={TENANT_HEADER: TENANT}, timeout=60
        ) as http:
            position = slot * max(1, len(calls) // args.clients)
            while time.perf_counter() < end:
                arguments = calls[position % len(calls)]
                position += 1
                body = {"tool_name": tool, "arguments": arguments, "trace_id": uuid.uuid4().hex}
                begun = time.perf_counter()
                try:
                    response = await http.post("/internal/mcp/execute", json=body)
                except Exception as exc:
                    if record:
                        phase.errors[type(exc).__name__] += 1
                    continue
                if record:
                    answer = response.json()
                    if answer.get("status") != "ok":
                        phase.errors[answer.get("error", {}).get("code", "error")] += 1
                    else:
                        phase.latencies.append(time.perf_counter() - begun)

    phase.seconds = await warm_then_timed(worker, args)
    return phase


async def run_load(
    server: Server, calls: dict[str, list[dict[str, Any]]], args: argparse.Namespace
) -> list[Phase]:
    await wait_ready(server, TENANT)
    base = server.url.removesuffix("/mcp")
    phases = [await mcp_phase(server.url, "echo", [{}], args)]
    for tool in TOOLS:
        phases.append(await mcp_phase(server.url, tool, calls[tool], args))
    for tool in TOOLS:
        phases.append(await envelope_phase(base, tool, calls[tool], args))
    return phases


# --- the report ----------------------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    facts: Any,
    calls: dict[str, list[dict[str, Any]]],
    phases: list[Phase],
) -> str:
    rows = []
    verdicts = []
    for phase in phases:
        p50 = percentile(phase.latencies, 50)
        p95 = percentile(phase.latencies, 95)
        target = SEED_P95_MS.get(phase.tool)
        ours = target / 2 if target else None
        rate = len(phase.latencies) / phase.seconds if phase.seconds else 0.0
        rows.append(
            [
                phase.transport,
                phase.tool,
                str(len(phase.latencies)),
                str(sum(phase.errors.values())),
                f"{rate:.0f}",
                ms(p50),
                ms(p95),
                f"{target:.0f}" if target else "—",
                f"{ours:.0f}" if ours else "—",
            ]
        )
        if ours is not None and phase.transport != "in-process":
            ok = p95 is not None and p95 * 1000 <= ours and not phase.errors
            errors = sum(phase.errors.values())
            verdicts.append(
                f"{'PASS' if ok else 'FAIL'} {phase.transport} {phase.tool}: p95 {ms(p95)} ms "
                f"(ours ≤ {ours:.0f} ms, seed ≤ {target:.0f} ms), errors {errors}"
            )
    table = markdown_table(
        [
            "transport",
            "tool",
            "calls",
            "errors",
            "calls/s",
            "p50 ms",
            "p95 ms",
            "seed p95 ≤",
            "ours ≤",
        ],
        rows,
    )
    lines = [
        "# Proxy toolset benchmark",
        "",
        machine_line(),
        f"Dev corpus: {facts.indexed} documents completed ({facts.pages} pages), "
        f"{sum(facts.failed.values())} failed, {facts.duplicates} duplicates. Calls drawn: "
        + ", ".join(f"{tool} {len(calls[tool])}" for tool in TOOLS)
        + f". {args.clients} clients, {args.seconds:.0f} s a phase after {args.warmup:.0f} s "
        "of warm-up; every call a trace id of its own (limits checked, none hit).",
        "",
        table,
        "",
        *verdicts,
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--docs", type=Path, default=CORPUS, help="corpus folder")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds a phase")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="Redis for the limits")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.data_dir, args.port)
        return 0
    logging.basicConfig(level=logging.WARNING)
    data_dir = Path(tempfile.mkdtemp(prefix="ldims-proxy-bench-"))
    prefix = f"bench-proxy-{uuid.uuid4().hex[:8]}:"
    server: Server | None = None
    try:
        settings = Settings(data_dir=data_dir, log_level="WARNING")
        files = corpus_files(args.docs)
        print(f"ingesting {len(files)} files into {data_dir} ...", flush=True)
        facts = ingest(settings, files, args.seed, optimize=False)
        calls = make_calls(settings, args.seed)
        print({tool: len(found) for tool, found in calls.items()}, flush=True)
        floor = in_process(settings, calls, args.redis, prefix)
        server = start_server(data_dir, args.redis, prefix)
        phases = asyncio.run(run_load(server, calls, args))
        stop_server(server)
        server = None
    except BaseException:
        if server is not None:
            print(f"server log tail:\n{server.log_tail()}")
        raise
    finally:
        if server is not None:
            stop_server(server)
        client = redis.Redis.from_url(args.redis)
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
        shutil.rmtree(data_dir, ignore_errors=True)
    text = report(args, facts, calls, [*phases, *floor])
    publish(text, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
