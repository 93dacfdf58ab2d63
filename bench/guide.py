"""Guide benchmark: ``initiate_session`` / ``navigate_session`` over MCP HTTP with 8 clients.

What it measures
----------------
1. **A Redis of its own:** ``redis-server --port N --bind 127.0.0.1 --save "" --appendonly
   no`` on a free port, never the machine's shared one; it is killed at the end, also after an
   error. The guided sessions live there (``ldims.guide.sessions``).

2. **The server, in its own process** (so that the clients do not share its GIL):
   ``python bench/guide.py --serve`` builds the real app with ``runtime.create_app(settings)`` on a
   temporary data dir, ``redis_url`` (``LDIMS_REDIS_URL``) set to that Redis and every other
   setting at its default (so the ``guide`` toolset serves the shipped trees of
   ``ldims/guide/trees``), registers one more tool on ``app.state.mcp``: ``echo(text) ->
   text``, an ``async`` tool that does nothing, and runs it under uvicorn on a free port of
   127.0.0.1 (``log_level=warning``). ``echo`` goes through the same ``LdimsMCP.call_tool``
   wrapper as the guide tools: it is the floor of the SDK, HTTP and that wrapper.

3. **Phase A — guided sessions over MCP.** ``--clients`` (8) official SDK clients in this
   process, each with its own ``httpx2.AsyncClient`` (keep-alive; header ``X-LDIMS-Tenant:
   bench``) and its own ``mcp.Client(streamable_http_client(url))``, connected once. Each runs
   sessions in a closed loop, one call at a time: ``initiate_session`` with a question drawn
   from ``QUESTIONS`` (Chinese, English and Russian, landing on different nodes of both shipped
   trees, two on no tree at all), then ``navigate_session`` steps until ``is_complete``, then a
   new session. A step is ``back`` (10 %), ``provide_more_info`` with a short text of
   ``MORE_INFO`` (5 %), or else one of the listed options at random; client *i* draws from
   ``random.Random(--seed + i)``. ``--warmup`` (3) seconds not counted, then ``--seconds``
   (20). A call's latency is the wall time of ``client.call_tool``, kept per tool. A call that
   raises or returns ``isError`` is an error (by exception type or ``errorCode``), left out of
   the latencies; the session it was in is dropped and a new one started.

4. **Phase B — ``echo`` over MCP:** the same clients, the questions as the text, for the same
   time after the same warm-up.

5. **Phase C — the engine in-process, one thread** (after the server stopped):
   ``GuideEngine`` over ``TreeStore(SHIPPED_TREES)`` and a ``SessionStore`` on the same Redis,
   the same walk (``random.Random(--seed + 1000)``): ``initiate`` and ``navigate`` timed
   apart. Without MCP, HTTP, threads, pydantic and JSON-RPC; also without the document
   snippets that two nodes of the English tree ask the index for (no ``find_documents``; the
   server's index is empty anyway).

calls/s = successful calls / wall time of the phase. CPU is read before and after each
phase: the server and redis-server (``psutil``), this process (``time.process_time``) and the
whole machine (``psutil.cpu_times()``).

How to run (from the project root; ``redis-server`` must be on the PATH)::

    .venv/bin/python bench/guide.py
    .venv/bin/python bench/guide.py --quick            # 3 s phases, 1 s warm-up

The Markdown tables are printed and written to ``bench/results/guide.md`` (overwritten). At the
end the server gets SIGTERM (SIGKILL after 15 s), Redis is stopped and the temporary data dir
removed, also after an error.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_load import (
    busy_seconds,
    errors_text,
    per_call,
    stop_process,
    stop_server,
    timed_call,
    wait_ready,
)
from report import DASH, machine_line, markdown_table, ms, percentile, publish
from servers import Server, free_port, launch

from ldims.caller import TENANT_HEADER
from ldims.errors import LdimsError
from ldims.guide import SHIPPED_TREES, GuideEngine, SessionStore, TreeStore
from ldims.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "guide.md"
TENANT = "bench"
INITIATE, NAVIGATE, ECHO = "initiate_session", "navigate_session", "echo"
BACK_SHARE, MORE_INFO_SHARE = 0.10, 0.05
log = logging.getLogger("bench.guide")

# First questions: both shipped trees, in the three languages; the last two match no tree.
QUESTIONS = (
    "我想了解科技行业的投资",
    "人工智能领域有哪些投资机会",
    "GPU芯片市场谁是龙头",
    "大模型公司有哪些",
    "阿里云和腾讯云哪个好",
    "数据中心产业链有哪些环节",
    "科技股的风险有哪些",
    "Is it a good time to invest in tech stocks?",
    "Which companies make AI chips?",
    "How do large language models make money?",
    "AWS vs Azure vs Google Cloud",
    "What are the risks of investing in technology?",
    "Расскажите про искусственный интеллект",
    "Видеокарты Nvidia: кто лидирует?",
    "Перспективы облачных вычислений",
    "Серверы и охлаждение для ЦОДов",
    "Какие риски у технологических акций?",
    "I have a problem with document ingestion in LDIMS",
    "My upload has been stuck in processing since this morning",
    "Why does reading the document give me a 409 error?",
    "My PDF is password protected, can LDIMS read it?",
    "How do I increase the extraction timeout?",
    "Scanned PDF without text fails with NO_TEXT_LAYER",
    "WORKER_LOST after the worker was killed by the OOM killer",
    "How do I retry a failed document?",
    "Upload rejected with 413 Request Entity Too Large",
    "The document is completed but search does not return it",
    "今天天气怎么样",
    "Как приготовить борщ?",
)
# What a user says instead of choosing (provide_more_info): some match a node below, some not.
MORE_INFO = (
    "GPU",
    "芯片",
    "风险",
    "估值",
    "облако",
    "нейросети",
    "timeout",
    "encrypted PDF",
    "the worker was killed",
    "not sure",
)

# --- Redis and the server process --------------------------------------------------------------


@dataclass
class Redis:
    process: subprocess.Popen[bytes]
    url: str


def start_redis(work_dir: Path, timeout: float = 10.0) -> Redis:
    """A throw-away redis-server on a free port of 127.0.0.1, answering PING."""
    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
    command += ["--save", "", "--appendonly", "no", "--dir", str(work_dir)]
    with open(work_dir / "redis.log", "wb") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Redis(process, f"redis://127.0.0.1:{port}/0")
    client = redis.Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    deadline = time.monotonic() + timeout
    with contextlib.closing(client):
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {process.returncode}")
            with contextlib.suppress(redis.RedisError, OSError):
                if client.ping():
                    return server
            time.sleep(0.1)
    stop_process(process)
    raise RuntimeError(f"redis-server did not answer on port {port} within {timeout:.0f}s")


def serve(data_dir: Path, port: int, redis_url: str) -> None:
    """``--serve``: the LDIMS app plus an ``echo`` tool under uvicorn (the child process)."""
    import uvicorn

    from runtime import create_app

    logging.basicConfig(level=logging.WARNING)  # before MCPServer's basicConfig(INFO)
    app = create_app(Settings(data_dir=data_dir, redis_url=redis_url, log_level="WARNING"))

    @app.state.mcp.tool(name=ECHO, description="Return the text unchanged (benchmark floor).")
    async def echo(text: str) -> str:
        return text

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_server(data_dir: Path, redis_url: str) -> Server:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--data-dir"]
    command += [str(data_dir), "--port", str(port), "--redis-url", redis_url]
    return launch(command, data_dir, f"http://127.0.0.1:{port}/mcp")


def log_problems(server: Server) -> Counter[str]:
    """The server log's WARNING / ERROR lines (first 120 characters), counted."""
    with contextlib.suppress(OSError):
        lines = server.log_path.read_text(errors="replace").splitlines()
        return Counter(line[:120] for line in lines if "WARNING" in line or "ERROR" in line)
    return Counter()


# --- phases ------------------------------------------------------------------------------------


@dataclass
class Calls:
    """One tool's successful latencies and its errors."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class Phase:
    name: str
    workers: int
    tools: dict[str, Calls] = field(default_factory=dict)
    sessions: int = 0  # walked to is_complete
    landings: Counter[str] = field(default_factory=Counter)  # tree/node of initiate
    actions: Counter[str] = field(default_factory=Counter)  # option / back / provide_more_info
    by_action: dict[str, list[float]] = field(default_factory=dict)  # navigate latencies
    wall: float = 0.0
    server_cpu: float | None = None  # seconds; None: no server in this phase
    redis_cpu: float = 0.0
    own_cpu: float = 0.0  # this process: the clients, or the engine
    machine_cpu: float = 0.0  # every process of the machine, these included

    def calls(self, tool: str) -> Calls:
        return self.tools.setdefault(tool, Calls())

    @property
    def total_calls(self) -> int:
        return sum(len(calls.latencies) for calls in self.tools.values())

    def stepped(self, action: str, state: dict[str, Any] | None) -> None:
        """Count a navigate step; its latency by kind when it succeeded."""
        self.actions[action] += 1
        if state is not None:
            latency = self.calls(NAVIGATE).latencies[-1]
            self.by_action.setdefault(action, []).append(latency)

    def rate(self, tool: str) -> float:
        return len(self.calls(tool).latencies) / self.wall if self.wall else 0.0


def cpu_of(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


@contextlib.contextmanager
def measured(
    phase: Phase, redis_process: psutil.Process, server: psutil.Process | None = None
) -> Iterator[None]:
    """Wall time and CPU of the block, into ``phase``."""
    server_before = cpu_of(server) if server else 0.0
    redis_before = cpu_of(redis_process)
    own_before, machine_before = time.process_time(), busy_seconds()
    started = time.perf_counter()
    yield
    phase.wall = time.perf_counter() - started
    phase.own_cpu = time.process_time() - own_before
    phase.machine_cpu = busy_seconds() - machine_before
    phase.redis_cpu = cpu_of(redis_process) - redis_before
    if server is not None:
        phase.server_cpu = cpu_of(server) - server_before


def next_step(rng: random.Random, state: dict[str, Any]) -> tuple[str, str | None]:
    """(selected_option_id, user_input): back 10 %, provide_more_info 5 %, else a listed one."""
    roll = rng.random()
    if roll < BACK_SHARE:
        return "back", None
    if roll < BACK_SHARE + MORE_INFO_SHARE:
        return "provide_more_info", rng.choice(MORE_INFO)
    options = [option["id"] for option in state["options"]]
    return (rng.choice(options) if options else "end"), None


def action_name(option: str) -> str:
    return option if option in ("back", "provide_more_info") else "option"


async def session_loop(client: Client, rng: random.Random, end: float, phase: Phase) -> None:
    """Sessions one after the other, each walked to ``is_complete``, until ``end``."""
    while time.perf_counter() < end:
        arguments = {"user_query": rng.choice(QUESTIONS)}
        state = await timed_call(client, INITIATE, arguments, phase.calls(INITIATE))
        if state is None:
            continue
        phase.landings[f"{state.get('tree_id')}/{state.get('node_id')}"] += 1
        while state is not None and not state.get("is_complete"):
            if time.perf_counter() >= end:
                return
            option, text = next_step(rng, state)
            step: dict[str, Any] = {"session_id": state["session_id"], "selected_option_id": option}
            if text is not None:
                step["user_input"] = text
            state = await timed_call(client, NAVIGATE, step, phase.calls(NAVIGATE))
            phase.stepped(action_name(option), state)
        if state is not None:
            phase.sessions += 1


async def echo_loop(client: Client, first: int, end: float, phase: Phase) -> None:
    number = first
    while time.perf_counter() < end:
        text = QUESTIONS[number % len(QUESTIONS)]
        number += 1
        await timed_call(client, ECHO, {"text": text}, phase.calls(ECHO))


async def mcp_phase(
    name: str,
    clients: list[Client],
    seconds: float,
    seed: int,
    server: psutil.Process,
    redis_process: psutil.Process,
) -> Phase:
    phase = Phase(name, len(clients))
    with measured(phase, redis_process, server):
        end = time.perf_counter() + seconds
        async with anyio.create_task_group() as group:
            for number, client in enumerate(clients):
                if name == ECHO:
                    group.start_soon(echo_loop, client, number * 3, end, phase)
                else:
                    group.start_soon(session_loop, client, random.Random(seed + number), end, phase)
    return phase


async def run_mcp(server: Server, args: argparse.Namespace, redis_pid: int) -> list[Phase]:
    tools = await wait_ready(server, TENANT)
    missing = {INITIATE, NAVIGATE, ECHO} - set(tools)
    if missing:
        raise RuntimeError(f"the server does not offer {sorted(missing)}; it has {tools}")
    process, redis_process = psutil.Process(server.process.pid), psutil.Process(redis_pid)
    phases = []
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(args.clients):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={TENANT_HEADER: TENANT}, timeout=60)
            )
            transport = streamable_http_client(server.url, http_client=http)
            clients.append(await stack.enter_async_context(Client(transport)))
        for name, seed in (("guide", args.seed), (ECHO, args.seed)):
            if args.warmup > 0:
                await mcp_phase(name, clients, args.warmup, seed + 500, process, redis_process)
            phase = await mcp_phase(name, clients, args.seconds, seed, process, redis_process)
            phases.append(phase)
            print(f"{name}: {summary(phase)}", flush=True)
    return phases


def summary(phase: Phase) -> str:
    return ", ".join(
        f"{tool} {len(calls.latencies)} calls ({phase.rate(tool):.1f}/s, "
        f"errors {sum(calls.errors.values())})"
        for tool, calls in phase.tools.items()
    )


# --- the engine in-process ---------------------------------------------------------------------


def timed(call: Callable[[], dict[str, Any]], calls: Calls) -> dict[str, Any] | None:
    started = time.perf_counter()
    try:
        state = call()
    except LdimsError as exc:
        calls.errors[exc.code] += 1
        return None
    except Exception as exc:
        calls.errors[type(exc).__name__] += 1
        return None
    calls.latencies.append(time.perf_counter() - started)
    return state


def engine_phase(
    engine: GuideEngine, seconds: float, rng: random.Random, redis_process: psutil.Process
) -> Phase:
    """The walk of :func:`session_loop`, calling the engine on this thread."""
    phase = Phase("engine", 1)
    with measured(phase, redis_process):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            question = rng.choice(QUESTIONS)
            state = timed(partial(engine.initiate, TENANT, question), phase.calls(INITIATE))
            if state is None:
                continue
            phase.landings[f"{state['tree_id']}/{state['node_id']}"] += 1
            while state is not None and not state["is_complete"] and time.perf_counter() < end:
                option, text = next_step(rng, state)
                call = partial(engine.navigate, TENANT, state["session_id"], option, text)
                state = timed(call, phase.calls(NAVIGATE))
                phase.stepped(action_name(option), state)
            if state is not None and state["is_complete"]:
                phase.sessions += 1
    return phase


def run_engine(args: argparse.Namespace, redis_server: Redis) -> Phase:
    defaults = Settings.model_fields
    sessions = SessionStore.from_url(
        redis_server.url, defaults["guide_session_ttl_seconds"].default
    )
    engine = GuideEngine(
        TreeStore(SHIPPED_TREES), sessions, defaults["guide_match_threshold"].default
    )
    redis_process = psutil.Process(redis_server.process.pid)
    rng = random.Random(args.seed + 1000)
    try:
        if args.warmup > 0:
            engine_phase(engine, args.warmup, rng, redis_process)
        return engine_phase(engine, args.seconds, rng, redis_process)
    finally:
        sessions.client.close()


# --- report ------------------------------------------------------------------------------------

HEADER = ["path", "workers", "calls", "calls/s", "p50 ms", "p95 ms", "p99 ms", "errors"]
COST_HEADER = [
    "phase",
    "calls",
    "server CPU ms/call",
    "bench process CPU ms/call",
    "redis-server CPU ms/call",
    "rest of the machine CPU ms/call",
    "machine busy",
]


def row(name: str, phase: Phase, tool: str) -> list[str]:
    calls = phase.calls(tool)
    return [
        name,
        str(phase.workers),
        str(len(calls.latencies)),
        f"{phase.rate(tool):.1f}",
        ms(percentile(calls.latencies, 50)),
        ms(percentile(calls.latencies, 95)),
        ms(percentile(calls.latencies, 99)),
        errors_text(calls.errors),
    ]


def cost_row(name: str, phase: Phase) -> list[str]:
    calls = phase.total_calls
    ours = phase.own_cpu + (phase.server_cpu or 0.0) + phase.redis_cpu
    cores = os.cpu_count() or 1
    return [
        name,
        str(calls),
        per_call(phase.server_cpu, calls),
        per_call(phase.own_cpu, calls),
        per_call(phase.redis_cpu, calls),
        per_call(max(phase.machine_cpu - ours, 0.0), calls),
        f"{phase.machine_cpu / phase.wall / cores:.0%}" if phase.wall else DASH,
    ]


STEP_HEADER = [
    "`navigate_session` step",
    "calls over MCP",
    "MCP p50 ms",
    "MCP p95 ms",
    "calls in-process",
    "engine p50 ms",
    "engine p95 ms",
]


def step_rows(guide: Phase, engine: Phase) -> list[list[str]]:
    rows = []
    for action in ("option", "back", "provide_more_info"):
        mcp, local = guide.by_action.get(action, []), engine.by_action.get(action, [])
        rows.append(
            [
                f"`{action}`" if action != "option" else "a listed option",
                str(len(mcp)),
                ms(percentile(mcp, 50)),
                ms(percentile(mcp, 95)),
                str(len(local)),
                ms(percentile(local, 50)),
                ms(percentile(local, 95)),
            ]
        )
    return rows


def p(phase: Phase, tool: str, pct: float) -> float:
    return percentile(phase.calls(tool).latencies, pct) or 0.0


def time_line(guide: Phase, echo: Phase, engine: Phase) -> str:
    """navigate's p50/p95 split into the MCP floor, the engine and the rest."""
    nav50, echo50, eng50 = p(guide, NAVIGATE, 50), p(echo, ECHO, 50), p(engine, NAVIGATE, 50)
    nav95, echo95, eng95 = p(guide, NAVIGATE, 95), p(echo, ECHO, 95), p(engine, NAVIGATE, 95)
    text = (
        f"Where `navigate_session`'s time goes: p50 {nav50 * 1000:.1f} ms = `echo`'s "
        f"{echo50 * 1000:.1f} ms (SDK + HTTP + LDIMS wrapper) + the engine's "
        f"{eng50 * 1000:.1f} ms in-process + {(nav50 - echo50 - eng50) * 1000:.1f} ms else "
        f"(the worker-thread hop, pydantic in and out, a larger result, queueing behind the "
        f"other clients); p95 {nav95 * 1000:.1f} ms vs `echo` {echo95 * 1000:.1f} ms and the "
        f"engine {eng95 * 1000:.1f} ms."
    )
    if guide.server_cpu and guide.total_calls and echo.server_cpu and echo.total_calls:
        guide_cpu = guide.server_cpu / guide.total_calls
        echo_cpu = echo.server_cpu / echo.total_calls
        text += (
            f" Server CPU per guide call {guide_cpu * 1000:.2f} ms vs {echo_cpu * 1000:.2f} "
            f"ms per `echo`: with a whole core (one process, one GIL) the guide tools would "
            f"cap at {1 / guide_cpu:.0f} calls/s, `echo` at {1 / echo_cpu:.0f}."
        )
    return text


def walk_line(name: str, phase: Phase) -> str:
    initiates = len(phase.calls(INITIATE).latencies)
    navigates = len(phase.calls(NAVIGATE).latencies)
    actions = ", ".join(f"{action} {n}" for action, n in phase.actions.most_common())
    per_session = navigates / initiates if initiates else 0.0
    return (
        f"{name}: {initiates} sessions started, {phase.sessions} walked to `is_complete`, "
        f"{per_session:.1f} navigate calls per session; steps: {actions}."
    )


def landing_line(phase: Phase) -> str:
    places = ", ".join(f"`{place}` {n}" for place, n in sorted(phase.landings.items()))
    return f"Where `initiate_session` started (over MCP): {places}."


def notes(args: argparse.Namespace, guide: Phase, engine: Phase) -> list[str]:
    languages = Counter(language(question) for question in QUESTIONS)
    mix = ", ".join(f"{n} {name}" for name, n in languages.most_common())
    return [
        f"Questions: {len(QUESTIONS)} ({mix}), for both shipped trees (`tech-investment` in "
        "the three languages, `ingestion-troubleshooting` in English); the last two match no "
        "tree (the fallback to a root). Steps: `back` 10 %, `provide_more_info` 5 % (a text "
        f"of {len(MORE_INFO)}), else a listed option at random, until `is_complete`; client "
        f"*i* draws from `random.Random({args.seed} + i)`.",
        landing_line(guide),
        walk_line("Over MCP", guide),
        walk_line("In-process", engine),
        "In-process `GuideEngine.initiate` (1 thread): p50 "
        f"{ms(percentile(engine.calls(INITIATE).latencies, 50))} ms, p95 "
        f"{ms(percentile(engine.calls(INITIATE).latencies, 95))} ms, errors "
        f"{errors_text(engine.calls(INITIATE).errors)} (the entry matcher over both trees, the "
        "session written to Redis). The engine phase has no document snippets (no "
        "`find_documents`): the server looks two nodes' snippets up in its empty index.",
        f"Server: `python bench/guide.py --serve` (uvicorn, one process) serving "
        f"`create_app(settings)` with `redis_url` set to a redis-server of its own, plus an "
        f"`echo` tool. Clients: {args.clients} `mcp.Client`s in this process, one "
        f"`httpx2.AsyncClient` each; each phase after {args.warmup:g}s of warm-up not counted. "
        "Latency and calls/s count successful calls only; calls/s of the guide tools share "
        "one phase (a client waits for each answer before its next call).",
        "CPU per call: user + system seconds during the phase / successful calls (the guide "
        "phase: `initiate_session` and `navigate_session` together). The bench process holds "
        "the MCP clients, or the engine in-process; the rest of the machine: every other "
        "process. Machine busy: all CPUs' busy share over the phase's wall time.",
    ]


def problems_line(problems: Counter[str]) -> str:
    if not problems:
        return "Server log: no WARNING or ERROR line."
    shown = "; ".join(f"{n}× `{line}`" for line, n in problems.most_common(3))
    return f"Server log: {sum(problems.values())} WARNING/ERROR lines, e.g. {shown}."


def language(text: str) -> str:
    if any("\u4e00" <= char <= "\u9fff" for char in text):
        return "Chinese"
    if any("\u0400" <= char <= "\u04ff" for char in text):
        return "Russian"
    return "English"


def report(
    args: argparse.Namespace, guide: Phase, echo: Phase, engine: Phase, problems: Counter[str]
) -> str:
    rows = [
        row("`navigate_session` over MCP", guide, NAVIGATE),
        row("`initiate_session` over MCP", guide, INITIATE),
        row("`echo` over MCP", echo, ECHO),
        row("engine `GuideEngine.navigate` in-process", engine, NAVIGATE),
    ]
    costs = [
        cost_row("guide tools over MCP", guide),
        cost_row("`echo` over MCP", echo),
        cost_row("engine in-process (initiate + navigate)", engine),
    ]
    parts = [
        "# Guide benchmark: guided sessions over MCP HTTP",
        "",
        markdown_table(HEADER, rows),
        "",
        time_line(guide, echo, engine),
        "",
        "## Where the time goes",
        "",
        markdown_table(COST_HEADER, costs),
        "",
        markdown_table(STEP_HEADER, step_rows(guide, engine)),
        "",
        *(f"- {line}" for line in notes(args, guide, engine)),
        f"- {problems_line(problems)}",
        "",
        machine_line(),
        "",
        f"Command: `.venv/bin/python bench/guide.py{command_flags(args)}`",
    ]
    return "\n".join(parts) + "\n"


def command_flags(args: argparse.Namespace) -> str:
    flags = " --quick" if args.quick else f" --seconds {args.seconds:g} --warmup {args.warmup:g}"
    return flags + f" --clients {args.clients} --seed {args.seed}"


# --- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per phase")
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed seconds per phase")
    parser.add_argument("--quick", action="store_true", help="3 s phases, 1 s warm-up")
    parser.add_argument("--clients", type=int, default=8, help="concurrent SDK clients")
    parser.add_argument("--seed", type=int, default=42, help="seed of the walks")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 3.0, 1.0
    return args


def run(args: argparse.Namespace, data_dir: Path) -> tuple[list[Phase], Counter[str]]:
    redis_server = start_redis(data_dir)
    try:
        print(f"redis-server on {redis_server.url}", flush=True)
        server = start_server(data_dir, redis_server.url)
        try:
            guide, echo = anyio.run(run_mcp, server, args, redis_server.process.pid)
        except BaseException:
            print(f"server log tail:\n{server.log_tail()}")
            raise
        finally:
            stop_server(server)
        problems = log_problems(server)
        engine = run_engine(args, redis_server)
        print(f"engine in-process: {summary(engine)}", flush=True)
    finally:
        stop_process(redis_server.process)
    return [guide, echo, engine], problems


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.data_dir, args.port, args.redis_url)
        return 0
    logging.basicConfig(level=logging.WARNING)
    data_dir = Path(tempfile.mkdtemp(prefix="ldims-guide-bench-"))
    try:
        (guide, echo, engine), problems = run(args, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    text = report(args, guide, echo, engine, problems)
    publish(text, RESULTS)
    errors = [calls.errors for phase in (guide, echo, engine) for calls in phase.tools.values()]
    return 1 if any(sum(counter.values()) for counter in errors) else 0


if __name__ == "__main__":
    raise SystemExit(main())
