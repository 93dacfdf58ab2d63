"""The two-tenant attack harness: tenant *globex* (B) attacks tenant *acme* (A) on a fresh
``ldims serve`` (API keys on, the documents, qmd, proxy and guide toolsets), and the figures
issue 33 asks for are measured in one run, each beside its baseline:

1. **Stall.** A's REST search, A's MCP ``searchDocuments`` and ``/health``, idle and then while
   B floods the server with ``--flood`` concurrent expensive exact-phrase searches over B's own
   long book (the worst queries the cost budget lets through, found by B as an attacker would,
   beside the 16-phrase query of the report). Verdict: A's search p95 ≤ 1 s, ``/health`` p95
   ≤ 0.2 s, A never refused.
2. **Oracle.** B probes the search cost budget as the report did: it builds, over its own
   documents, a query that sits just under the budget, then appends each of A's secrets (a
   password, an AWS key, an e-mail address, a rare word) and a few invented variants. B's
   answers to these and to plain searches (status and body, without ``executionTime``) are
   recorded before A uploads documents holding those words in many chunks, and again after.
   Verdict: byte-identical.
3. **PII.** A's document holding a card number, an e-mail address, an ``sk-live-`` token and
   a ``password=`` line, read through every proxy tool with the report's queries: no raw
   value in any output.
4. **Reads.** 8 concurrent clients read A's largest document in every way a whole text can be
   read (qmd ``get``, ``multi_get``, ``qmd://``, ``ldims://…/extracted_content``, REST
   ``content``): the API's resident memory before, at its peak and after. Verdict: growth
   ≤ 100 MB, and every answer bounded.
5. **Idle connections.** ``--connections`` TCP connections that never finish a request (half
   idle, half sending a header a byte at a time): how many the server still holds after its
   configured timeout. Verdict: none, and a normal request answers meanwhile.

How to run (from the project root)::

    .venv/bin/python bench/attack.py             # long form: 48 hostile clients, 1,500 sockets
    .venv/bin/python bench/attack.py --short     # CI form (tests/test_reliability.py)

``--code DIR`` runs the server from another checkout of the code (e.g. a worktree of an older
commit, to see the attacks succeed there). The report is printed and written to
``bench/results/attack.md`` (``--output``); the long form also writes its section of
``docs/reliability.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import resource
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import psutil
from ingest import stop_server, wait_healthy
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from report import machine_line, markdown_table, ms, percentile, publish, publish_section
from servers import Server, free_port, launch

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT.parent / "shared" / "corpus" / "docs" / "unstructured__book-war-and-peace-1225p.txt"
RESULTS = Path(__file__).resolve().parent / "results" / "attack.md"
RELIABILITY = ROOT / "docs" / "reliability.md"

KEY_A, KEY_B = "acme-key-" + "a" * 32, "globex-key-" + "b" * 32
# A's secrets, which B tries to confirm; the invented variants must come back absent.
SECRETS = ("hunter2zebra", "AKIAQ3EGRZ7XJXAMPLE", "olga.petrova@acme-corp.example", "zqvelmorantic")
INVENTED = ("hunter3zebra", "AKIAQ3EGRZ7XJXAMPLF", "zqvelmorantid")
PII = {
    "card": "4111 1111 1111 1111",
    "email": "olga.petrova@acme-corp.example",
    "token": "sk-live-4eC39HqLyjWDarjtT1zdp7dc",
    "password": "hunter2zebra",
}
PII_QUERIES = ("4111", "acme", "sk", "password", "olga", "hunter2zebra")
# The report's hostile query: 16 quoted two-word phrases of common words, exact mode.
HOSTILE_PHRASES = (
    "of the",
    "in the",
    "and the",
    "to the",
    "on the",
    "at the",
    "by the",
    "for the",
    "with the",
    "from the",
    "it was",
    "he had",
    "she was",
    "that he",
    "of his",
    "to be",
)


@dataclass
class Run:
    """One run's choices: the long form's, or the short one's for ``make test``."""

    flood: int
    flood_seconds: float
    book_bytes: int
    big_bytes: int
    readers: int
    read_rounds: int
    connections: int
    idle_timeout: float
    max_postings: int
    # /health's p95 under the flood: the 0.2 s in the long form; the short form, run
    # by make test on whatever machine CI has, allows 0.5 s (the code before the fix: 2 s).
    health_p95: float = 0.2


# The long form keeps the default budget (20M postings): B's whole book reaches it; A's
# largest text is the report's 19 MB, under the 20M characters an extract may hold.
LONG = Run(48, 60, 3_300_000, 19_000_000, 8, 6, 1500, 10, 20_000_000)
# A smaller book, and a budget its words can reach.
SHORT = Run(48, 12, 400_000, 3_000_000, 8, 2, 300, 5, 200_000, health_p95=0.5)


@dataclass
class Verdicts:
    rows: list[tuple[str, bool, str]] = field(default_factory=list)

    def add(self, name: str, passed: bool, detail: str) -> None:
        self.rows.append((name, passed, detail))

    @property
    def passed(self) -> bool:
        return all(passed for _, passed, _ in self.rows)


# --- the server --------------------------------------------------------------------------------


def server_settings(run: Run) -> dict[str, str]:
    keys = {
        hashlib.sha256(KEY_A.encode()).hexdigest(): "acme",
        hashlib.sha256(KEY_B.encode()).hexdigest(): "globex",
    }
    return {
        "LDIMS_API_KEYS": json.dumps(keys),
        "LDIMS_TOOLSETS": json.dumps(["documents", "qmd", "proxy", "guide"]),
        "LDIMS_EMBEDDING_MODEL": "none",
        # A budget the oracle can reach with one book; the mechanism is the same at any size.
        "LDIMS_SEARCH_MAX_POSTINGS": str(run.max_postings),
        "LDIMS_HTTP_KEEP_ALIVE_SECONDS": str(run.idle_timeout),
        "LDIMS_HTTP_HEADER_TIMEOUT_SECONDS": str(run.idle_timeout),
    }


def start(data_dir: Path, run: Run, code: Path | None) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "runtime.cli.main", "serve", "--port", str(port)]
    env = server_settings(run)
    if code is not None:  # PYTHONPATH comes before the editable install's finder
        env["PYTHONPATH"] = str(code)
    server = launch(command, data_dir, f"http://127.0.0.1:{port}", env)
    wait_healthy(server, timeout=120)
    return server


def client(key: str, timeout: float = 60) -> httpx.Client:
    return httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=timeout)


def upload(server: Server, key: str, name: str, data: bytes, collection: str) -> str:
    with client(key) as http:
        response = http.post(
            f"{server.url}/api/documents",
            files={"file": (name, data, "text/plain")},
            data={"collection": collection},
        )
    response.raise_for_status()
    return str(response.json()["documentId"])


def wait_completed(server: Server, key: str, ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with client(key) as http:
        for document_id in ids:
            while True:
                status = http.get(f"{server.url}/api/documents/{document_id}").json()["status"]
                if status == "completed":
                    break
                if status == "failed" or time.monotonic() > deadline:
                    raise RuntimeError(f"{document_id} ended {status}\n{server.log_tail()}")
                time.sleep(0.5)


@contextlib.asynccontextmanager
async def mcp_session(url: str, key: str) -> Any:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as session,  # type: ignore[arg-type]
    ):
        yield session


# --- 1. stall ----------------------------------------------------------------------------------


def phrase_query(phrases: tuple[str, ...]) -> str:
    return " ".join(f'"{phrase}"' for phrase in phrases)


def search(http: httpx.Client, url: str, query: str, mode: str = "exact") -> httpx.Response:
    return http.get(f"{url}/api/search", params={"query": query, "searchMode": mode})


def worst_accepted(server: Server) -> str:
    """The costliest phrase query the budget lets B run (as an attacker finds it)."""
    with client(KEY_B) as http:
        for count in range(len(HOSTILE_PHRASES), 0, -1):
            query = phrase_query(HOSTILE_PHRASES[:count])
            if search(http, server.url, query).status_code == 200:
                return query
    return phrase_query(HOSTILE_PHRASES[:1])


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def victim_samples(server: Server, seconds: float, stop: threading.Event) -> dict[str, Any]:
    """A's REST search, A's MCP search and /health, one after another until ``stop`` or
    ``seconds`` passed: their latencies and A's refusals."""
    found: dict[str, Any] = {"rest": [], "mcp": [], "health": [], "refused": Counter()}

    async def mcp_loop(until: float) -> None:
        async with mcp_session(server.url, KEY_A) as session:
            while time.monotonic() < until and not stop.is_set():
                started = time.perf_counter()
                result = await session.call_tool("searchDocuments", {"query": "merger plan"})
                found["mcp"].append(time.perf_counter() - started)
                if result.is_error:
                    found["refused"]["mcp " + str(result.structured_content)[:40]] += 1
                await asyncio.sleep(0.05)

    until = time.monotonic() + seconds
    mcp = threading.Thread(target=lambda: asyncio.run(mcp_loop(until)))
    mcp.start()
    with client(KEY_A, timeout=30) as http, httpx.Client(timeout=30) as anonymous:
        while time.monotonic() < until and not stop.is_set():
            took, response = timed(lambda: search(http, server.url, "merger plan", "semantic"))
            found["rest"].append(took)
            if response.status_code != 200:
                found["refused"][f"rest {response.status_code}"] += 1
            took, response = timed(lambda: anonymous.get(f"{server.url}/health"))
            found["health"].append(took)
            if response.status_code != 200:
                found["refused"][f"health {response.status_code}"] += 1
            time.sleep(0.05)
    mcp.join()
    return found


def flood(server: Server, queries: list[str], clients: int, stop: threading.Event) -> Counter[str]:
    """``clients`` threads of B sending ``queries`` in turn until ``stop``: B's outcomes."""
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def attacker(number: int) -> None:
        with client(KEY_B, timeout=60) as http:
            turn = number
            while not stop.is_set():
                try:
                    response = search(http, server.url, queries[turn % len(queries)])
                    outcome = str(response.status_code)
                    if response.status_code == 429 and "retry-after" not in response.headers:
                        outcome = "429 without Retry-After"
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                with lock:
                    outcomes[outcome] += 1
                turn += 1

    threads = [threading.Thread(target=attacker, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    stop.wait()
    for thread in threads:
        thread.join(timeout=90)
    return outcomes


def stall(server: Server, run: Run, book: str, verdicts: Verdicts) -> str:
    idle = victim_samples(server, min(run.flood_seconds, 10), threading.Event())
    worst = worst_accepted(server)
    stop = threading.Event()
    # The phrases the budget lets through, the budget's own edge, and the report's query.
    queries = [worst, tight_prefix(server, book), phrase_query(HOSTILE_PHRASES)]
    attackers = threading.Thread(
        target=lambda: outcomes.update(flood(server, queries, run.flood, stop))
    )
    outcomes: Counter[str] = Counter()
    attackers.start()
    time.sleep(2)  # the flood fills the server first
    hostile = victim_samples(server, run.flood_seconds, stop)
    stop.set()
    attackers.join()
    rows = []
    for name, label in (
        ("rest", "A: REST search"),
        ("mcp", "A: MCP searchDocuments"),
        ("health", "/health (no key)"),
    ):
        for stage, samples in (
            ("idle", idle[name]),
            (f"{run.flood} hostile clients", hostile[name]),
        ):
            rows.append(
                [
                    label,
                    stage,
                    str(len(samples)),
                    ms(percentile(samples, 50)),
                    ms(percentile(samples, 95)),
                    ms(max(samples, default=None)),
                ]
            )
    search_p95 = max(percentile(hostile["rest"], 95) or 0, percentile(hostile["mcp"], 95) or 0)
    health_p95 = percentile(hostile["health"], 95) or 0
    refused = sum(hostile["refused"].values())
    verdicts.add(
        "stall",
        search_p95 <= 1.0 and health_p95 <= run.health_p95 and refused == 0,
        f"A's search p95 {search_p95 * 1000:.0f} ms (≤ 1,000), /health p95 "
        f"{health_p95 * 1000:.0f} ms (≤ {run.health_p95 * 1000:.0f}), A refused {refused} times",
    )
    b_outcomes = ", ".join(f"{code} ×{count}" for code, count in sorted(outcomes.items()))
    return (
        f"B's queries, in turn: the most phrases the budget lets through, `{worst[:60]}…` "
        f"({worst.count(chr(34)) // 2} phrases), a query of B's own words sitting just under "
        "the budget (as the oracle builds it) and the report's 16-phrase query. "
        f"B's answers: {b_outcomes}.\n\n"
        + markdown_table(["what", "while", "calls", "p50 ms", "p95 ms", "max ms"], rows)
    )


# --- 2. oracle ---------------------------------------------------------------------------------


def strip_time(response: httpx.Response) -> tuple[int, Any, str | None]:
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if isinstance(body, dict):
        body.get("searchMetadata", {}).pop("executionTime", None)
    return response.status_code, body, response.headers.get("retry-after")


def tight_prefix(server: Server, book: str) -> str:
    """A query over B's own words just under the budget: phrases of B's commonest words, then
    single words from commonest to rarest, each kept when the server still accepts the query."""
    counts = Counter(word for word in book.lower().split() if word.isalpha() and len(word) > 3)
    words = [word for word, _ in counts.most_common()]
    phrases = [f'"{words[n]} {words[n + 1]}"' for n in range(0, 24, 2)]
    singles = words[24:44] + [word for word, count in counts.items() if count <= 2][:20]
    kept: list[str] = []
    with client(KEY_B) as http:
        for part in phrases + singles:
            trial = " ".join([*kept, part])
            # Under the distinct-term limit (64), so that only the postings can refuse it.
            if len(trial.split()) < 60 and search(http, server.url, trial).status_code == 200:
                kept.append(part)
    return " ".join(kept)


def probes(prefix: str) -> list[tuple[str, str]]:
    found = [(f"{prefix} {word}", "exact") for word in SECRETS + INVENTED]
    for word in SECRETS + INVENTED:
        found += [(word, "exact"), (word, "semantic")]
    return found


def answers(server: Server, queries: list[tuple[str, str]]) -> list[Any]:
    with client(KEY_B) as http:
        return [strip_time(search(http, server.url, query, mode)) for query, mode in queries]


async def mcp_answers(server: Server, queries: list[tuple[str, str]]) -> list[Any]:
    found = []
    async with mcp_session(server.url, KEY_B) as session:
        for query, mode in queries:
            result = await session.call_tool(
                "searchDocuments", {"query": query, "filters": {"searchMode": mode}}
            )
            body = dict(result.structured_content or {})
            body.get("searchMetadata", {}).pop("executionTime", None)
            found.append((result.is_error, body))
    return found


def secrets_text(lines: int) -> bytes:
    """A's document: every secret on every line, so that each sits in every chunk."""
    line = " ".join(SECRETS) + " and the of the in the\n"
    return (f"# Acme secrets\n\n{PII['password']}\n" + line * lines).encode()


def oracle(server: Server, book: str, verdicts: Verdicts) -> str:
    prefix = tight_prefix(server, book)
    queries = probes(prefix)
    before = answers(server, queries)
    before_mcp = asyncio.run(mcp_answers(server, queries))
    ids = [upload(server, KEY_A, f"secrets-{n}.md", secrets_text(2000), "vault") for n in range(3)]
    wait_completed(server, KEY_A, ids, timeout=300)
    after = answers(server, queries)
    after_mcp = asyncio.run(mcp_answers(server, queries))
    differ = [queries[n] for n in range(len(queries)) if before[n] != after[n]]
    differ_mcp = [queries[n] for n in range(len(queries)) if before_mcp[n] != after_mcp[n]]
    refusals = sum(1 for status, _, _ in before if status == 422)
    verdicts.add(
        "oracle",
        not differ and not differ_mcp,
        f"{len(queries)} probes × REST and MCP; answers that changed when A uploaded "
        f"its secrets: {len(differ)} REST, {len(differ_mcp)} MCP",
    )
    changed = "; ".join(f"`{query[-40:]}` ({mode})" for query, mode in (differ + differ_mcp)[:8])
    return (
        f"B's budget probe: {len(prefix.split())} words and phrases of its own book, just under "
        f"the budget; {len(queries)} probes (the probe + each of A's {len(SECRETS)} secrets and "
        f"{len(INVENTED)} invented variants, and each word alone in exact and semantic mode); "
        f"{refusals} of them refused (422) before A's upload. Changed after A's upload: "
        f"{changed or 'none'}."
    )


# --- 3. PII ------------------------------------------------------------------------------------


def pii_document() -> bytes:
    return (
        "# Customer record\n\n"
        f"Card: {PII['card']}\nE-mail: {PII['email']}\nAPI token: {PII['token']}\n"
        f"password={PII['password']}\n\nThe customer asked about the invoice.\n"
    ).encode()


def raw_pii(text: str) -> list[str]:
    compact = text.replace("**", "").replace(" ", "")
    found = [name for name, value in PII.items() if value.replace(" ", "") in compact]
    return found + [name for name, value in PII.items() if value in text and name not in found]


async def pii_outputs(server: Server, document_id: str) -> list[tuple[str, str]]:
    outputs = []
    async with mcp_session(server.url, KEY_A) as session:
        calls = [
            ("read_doc_pages", {"doc_id": document_id, "page_start": 1, "page_end": 1}),
            ("read_doc_metadata", {"doc_id": document_id}),
        ]
        calls += [("doc_local_search", {"doc_id": document_id, "query": q}) for q in PII_QUERIES]
        for tool, arguments in calls:
            result = await session.call_tool(tool, arguments)
            text = " ".join(getattr(part, "text", "") for part in result.content)
            text += json.dumps(result.structured_content or {}, ensure_ascii=False)
            outputs.append((f"{tool} {arguments.get('query', '')}".strip(), text))
    return outputs


def pii(server: Server, verdicts: Verdicts) -> str:
    document_id = upload(server, KEY_A, "customer.md", pii_document(), "crm")
    wait_completed(server, KEY_A, [document_id], timeout=120)
    outputs = asyncio.run(pii_outputs(server, document_id))
    leaks = [(call, raw_pii(text)) for call, text in outputs if raw_pii(text)]
    verdicts.add("PII", not leaks, f"{len(outputs)} proxy outputs, {len(leaks)} with raw PII")
    rows = [
        [call, ", ".join(found) or "none"]
        for call, found in ((call, raw_pii(text)) for call, text in outputs)
    ]
    return markdown_table(["proxy call (query)", "raw PII in the output"], rows)


# --- 4. reads ----------------------------------------------------------------------------------


def big_text(size: int) -> bytes:
    """A text of ``size`` bytes without a line break (the report's worst case for chunks)."""
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
    parts, total, n = [], 0, 0
    while total < size:
        word = f"{words[n % len(words)]}{n % 9973}"
        parts.append(word)
        total += len(word) + 1
        n += 1
    return " ".join(parts).encode()


def sample_rss(pid: int, stop: threading.Event, peak: list[int]) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        with contextlib.suppress(psutil.Error):
            peak[0] = max(peak[0], process.memory_info().rss)
        time.sleep(0.05)


async def read_all_ways(server: Server, document_id: str, rounds: int) -> list[int]:
    sizes: list[int] = []
    async with mcp_session(server.url, KEY_A) as session:
        for _ in range(rounds):
            for call in (
                lambda: session.call_tool("get", {"file": "big/big.txt"}),
                lambda: session.call_tool("multi_get", {"pattern": "big/*.txt", "maxBytes": 10**9}),
                lambda: session.read_resource("qmd://big/big.txt"),
                lambda: session.read_resource(f"ldims://docs/{document_id}/extracted_content"),
            ):
                result = await call()
                sizes.append(len(result.model_dump_json()))
    with client(KEY_A) as http:
        for _ in range(rounds):
            response = http.get(
                f"{server.url}/api/documents/{document_id}/content", params={"limit": 10**9}
            )
            sizes.append(len(response.content))
    return sizes


def reads(server: Server, run: Run, verdicts: Verdicts) -> str:
    document_id = upload(server, KEY_A, "big.txt", big_text(run.big_bytes), "big")
    wait_completed(server, KEY_A, [document_id], timeout=900)
    pid = server.process.pid
    before = psutil.Process(pid).memory_info().rss
    peak, stop = [before], threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(pid, stop, peak))
    sampler.start()
    sizes: list[int] = []
    errors: list[str] = []

    def reader() -> None:
        try:
            sizes.extend(asyncio.run(read_all_ways(server, document_id, run.read_rounds)))
        except Exception as exc:  # a reader's failure is reported, it does not stop the run
            errors.append(f"{type(exc).__name__}: {str(exc)[:120]}")

    threads = [threading.Thread(target=reader) for _ in range(run.readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(2)
    after = psutil.Process(pid).memory_info().rss
    stop.set()
    sampler.join()
    growth = (peak[0] - before) / 2**20
    largest = max(sizes, default=0)
    verdicts.add(
        "reads",
        growth <= 100 and largest <= 2**20 and not errors,
        f"API RSS peak +{growth:.0f} MB (≤ 100), largest answer {largest / 2**20:.2f} MB (≤ 1) "
        f"of a {run.big_bytes / 2**20:.0f} MB text, {len(errors)} reader errors",
    )
    rows = [
        ["before", f"{before / 2**20:.0f}"],
        ["peak", f"{peak[0] / 2**20:.0f}"],
        ["after", f"{after / 2**20:.0f}"],
    ]
    return (
        f"{run.readers} concurrent clients × {run.read_rounds} rounds of qmd get, multi_get, "
        f"qmd://, ldims:// extracted_content and REST content (limit 10^9) of a "
        f"{run.big_bytes / 2**20:.0f} MB text without a line break; {len(sizes)} answers, the "
        f"largest {largest / 2**10:.0f} KiB. {'; '.join(errors[:3])}\n\n"
        + markdown_table(["API resident memory", "MiB"], rows)
    )


# --- 5. idle connections -----------------------------------------------------------------------


def idle_connections(server: Server, run: Run, verdicts: Verdicts) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, run.connections + 512)), hard))
    port = int(server.url.rsplit(":", 1)[1])
    sockets: list[socket.socket] = []
    for n in range(run.connections):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if n % 2:  # slow: half a request line, a byte at a time below
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sockets.append(sock)
    opened = time.monotonic()
    with httpx.Client(timeout=30) as http:
        answered = http.get(f"{server.url}/health").status_code
    closed_at: dict[int, float] = {}
    deadline = opened + run.idle_timeout * 2 + 10
    while time.monotonic() < deadline and len(closed_at) < len(sockets):
        for n, sock in enumerate(sockets):
            if n in closed_at:
                continue
            sock.setblocking(False)
            try:
                if n % 2:
                    sock.send(b"X")  # the slow header goes on
                if sock.recv(1024) == b"":
                    closed_at[n] = time.monotonic() - opened
            except BlockingIOError:
                pass
            except OSError:
                closed_at[n] = time.monotonic() - opened
        time.sleep(0.5)
    for sock in sockets:
        sock.close()
    held = len(sockets) - len(closed_at)
    last = max(closed_at.values(), default=0.0)
    verdicts.add(
        "idle connections",
        held == 0 and answered == 200,
        f"{len(sockets)} opened, {held} still held after {deadline - opened:.0f} s, "
        f"the last closed after {last:.1f} s (timeout {run.idle_timeout:.0f} s)",
    )
    return (
        f"{len(sockets)} connections (half idle, half dribbling a header), timeouts "
        f"{run.idle_timeout:.0f} s: {len(closed_at)} closed by the server, the last after "
        f"{last:.1f} s; `/health` meanwhile answered {answered}."
    )


# --- the run -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="the CI form")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--code", type=Path, help="run the server from this checkout")
    parser.add_argument("--only", help="one stage: stall, oracle, pii, reads, idle")
    args = parser.parse_args()
    run = SHORT if args.short else LONG
    book = BOOK.read_text(errors="replace")[: run.book_bytes]
    verdicts = Verdicts()
    sections: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="ldims-attack-") as folder:
        server = start(Path(folder), run, args.code)
        try:
            book_id = upload(server, KEY_B, "book.txt", book.encode(), "books")
            wait_completed(server, KEY_B, [book_id], timeout=900)
            stages = {
                "stall": (
                    "Stall: one tenant floods the searches",
                    lambda: stall(server, run, book, verdicts),
                ),
                "oracle": (
                    "Oracle: the search budget and answers",
                    lambda: oracle(server, book, verdicts),
                ),
                "pii": ("PII through the proxy tools", lambda: pii(server, verdicts)),
                "reads": ("Whole-document reads", lambda: reads(server, run, verdicts)),
                "idle": (
                    "Idle and slow connections",
                    lambda: idle_connections(server, run, verdicts),
                ),
            }
            for name, (title, stage) in stages.items():
                if args.only in (None, name):
                    sections.append((title, stage()))
        finally:
            stop_server(server)
    report(args, run, verdicts, sections)
    sys.exit(0 if verdicts.passed else 1)


def report(args: argparse.Namespace, run: Run, verdicts: Verdicts, sections: list) -> None:
    form = "short" if args.short else "long"
    lines = [
        f"# Two-tenant attack ({form} form)",
        "",
        machine_line(),
        "",
        f"`ldims serve` (embedded Redis, SQLite, no embeddings), API keys for acme (A) and globex "
        f"(B), toolsets documents, qmd, proxy, guide; search budget {run.max_postings:,} "
        f"postings; B's book {run.book_bytes / 2**20:.1f} MB"
        + (f"; server code from `{args.code}`" if args.code else "")
        + ".",
        "",
    ]
    for name, passed, detail in verdicts.rows:
        lines.append(f"**{'PASS' if passed else 'FAIL'}** {name}: {detail}")
        lines.append("")
    for title, text in sections:
        lines += [f"### {title}", "", text, ""]
    text = "\n".join(lines)
    publish(text, args.output)
    if not args.short and not args.only and not args.code:
        body = text.split("\n", 1)[1].lstrip()
        publish_section(RELIABILITY, "attack", "## Two-tenant attack\n\n" + body)


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    main()
