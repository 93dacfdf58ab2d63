"""SQL benchmark: ``read-query`` over MCP HTTP against the same SELECTs through psycopg directly.

What it measures
----------------
1. **A fresh PostgreSQL database** on 127.0.0.1:5432 (user ``postgres``, trust auth), named
   ``ldims_bench_<hex>``: ``orders(id bigint primary key, customer text, amount numeric(10,2),
   created_at timestamptz)`` with ``--rows`` (100,000) rows made by ``generate_series`` (500
   customers, one order every 5 minutes from 2024-01-01, deterministic amounts), indexes on
   ``customer`` and ``created_at``, then ``ANALYZE``. It is dropped at the end
   (``DROP DATABASE … WITH (FORCE)``), also after an error.

2. **The server, in its own process** (so that the clients do not share its GIL):
   ``python bench/sql.py --serve`` builds the real app with ``runtime.create_app(settings)`` with
   ``sql_url`` set to that database (so the ``sql`` toolset is on; every ``sql_*`` setting at
   its default unless ``--pool-size`` is given) on a temporary data dir, under uvicorn on a free
   port of 127.0.0.1 (``log_level=warning``).

3. **The SELECTs.** ``--queries`` (1,000) texts drawn from ``random.Random(--seed)``, four kinds
   in turn: a point lookup by id; a one-day ``created_at`` range with ``ORDER BY … LIMIT 20``;
   ``count``/``sum`` over 5,000 ids ``GROUP BY customer ORDER BY total DESC LIMIT 20``; and one
   customer's orders above an amount with no LIMIT (the point lookup has none either: the
   guard adds ``LIMIT 21``, one more than the 20 rows shown, to tell a cut result). Worker
   *i* starts at text ``i * queries / workers`` and goes round-robin.

4. **Phase A — MCP.** ``--clients`` (8) official SDK clients in this process, each with its
   own ``httpx2.AsyncClient`` (keep-alive; header ``X-LDIMS-Tenant: bench``) and its own
   ``mcp.Client(streamable_http_client(url))``, connected once, call ``read-query {sql}`` in
   closed loops: ``--warmup`` (3) seconds not counted, then ``--seconds`` (20). A call's
   latency is the wall time of ``client.call_tool``. A call that raises or returns ``isError``
   is an error (by exception type or ``errorCode``) and is left out of the latencies. The
   ``executionTime`` each result reports (the executor's time from taking a pooled connection
   to the last row) is kept too.

5. **Phase B — the driver.** The same texts as the guard renders them (``check_read(sql,
   "postgres", probe=True).sql``, i.e. with the LIMIT the server adds), run by as many
   threads as there are clients, each with its own ``psycopg.connect`` (autocommit), each call
   ``execute`` + ``fetchall``: no guard, no pool, no read-only transaction, no JSON.

6. **Phase C — in-process, one thread** (after the server stopped): ``SqlExecutor.read`` (the
   guard, a pooled connection with ``pool_pre_ping``, ``SET TRANSACTION READ ONLY``, ``SET
   LOCAL statement_timeout``, the query, the rows made JSON-ready, ``ROLLBACK``), and the guard
   ``check_read`` alone: what the server does per call without MCP, HTTP and threads.

calls/s = successful calls / wall time of the phase (from its start to the end of the last
call, which may start up to its end). CPU is read before and after each phase: the server
(``psutil``), this process (``time.process_time``: the clients, or the driver threads) and the
whole machine (``psutil.cpu_times()``); the rest is mostly PostgreSQL's backends.

How to run (from the project root; PostgreSQL must accept ``postgres`` on 127.0.0.1:5432)::

    .venv/bin/python bench/sql.py
    .venv/bin/python bench/sql.py --quick            # 3 s phases, 1 s warm-up
    .venv/bin/python bench/sql.py --clients 4 --pool-size 8

The Markdown table is printed and written to ``bench/results/sql.md`` (overwritten). At the
end the server gets SIGTERM (SIGKILL after 15 s), the database is dropped and the temporary
data dir removed, also after an error.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
import psycopg
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_load import (
    busy_seconds,
    errors_text,
    per_call,
    stop_server,
    timed_call,
    wait_ready,
)
from psycopg import sql as pgsql
from report import DASH, machine_line, markdown_table, ms, percentile, publish
from servers import Server, free_port, launch

from ldims.caller import TENANT_HEADER
from ldims.settings import Settings
from ldims.sql import check_read
from ldims.sql.executor import SqlExecutor

RESULTS = Path(__file__).resolve().parent / "results" / "sql.md"
PG_SERVER = "postgresql://postgres@127.0.0.1:5432"
TENANT = "bench"
TOOL = "read-query"
CUSTOMERS = 500
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
STEP_MINUTES = 5
log = logging.getLogger("bench.sql")

# --- the database ------------------------------------------------------------------------------


def fill_statements(rows: int) -> list[str]:
    return [
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, "
        "amount numeric(10,2) NOT NULL, created_at timestamptz NOT NULL)",
        # Deterministic: the customer and amount come from the id, one order every 5 minutes.
        "INSERT INTO orders SELECT g, "
        f"'customer_' || lpad(((g::bigint * 7919) % {CUSTOMERS})::text, 3, '0'), "
        "((g::bigint * 104729) % 100000) / 100.0, "
        f"timestamptz '2024-01-01 00:00:00+00' + g * interval '{STEP_MINUTES} minutes' "
        f"FROM generate_series(1, {rows}) AS g",
        "CREATE INDEX orders_customer_idx ON orders (customer)",
        "CREATE INDEX orders_created_at_idx ON orders (created_at)",
        "ANALYZE orders",
    ]


def create_database(name: str, rows: int) -> str:
    """Create and fill ``name``; its URL."""
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
        admin.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    url = f"{PG_SERVER}/{name}"
    with psycopg.connect(url, autocommit=True) as connection:
        for statement in fill_statements(rows):
            connection.execute(statement)  # type: ignore[call-overload]
    return url


def drop_database(name: str) -> None:
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
        admin.execute(
            pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
        )


# --- the SELECTs -------------------------------------------------------------------------------

KINDS = ("point", "range", "aggregate", "no limit")


def make_queries(count: int, rows: int, seed: int) -> list[str]:
    """``count`` SELECT texts, the four kinds in turn, parameters from ``seed``."""
    rng = random.Random(seed)
    span = timedelta(minutes=STEP_MINUTES * rows)
    queries = []
    for number in range(count):
        kind = KINDS[number % len(KINDS)]
        if kind == "point":
            queries.append(
                "SELECT id, customer, amount, created_at FROM orders "
                f"WHERE id = {rng.randint(1, rows)}"
            )
        elif kind == "range":
            start = EPOCH + timedelta(seconds=rng.randrange(int(span.total_seconds()) - 86400))
            end = start + timedelta(days=1)
            queries.append(
                "SELECT id, customer, amount, created_at FROM orders "
                f"WHERE created_at >= '{start:%Y-%m-%d %H:%M:%S}+00' "
                f"AND created_at < '{end:%Y-%m-%d %H:%M:%S}+00' ORDER BY created_at LIMIT 20"
            )
        elif kind == "aggregate":
            first = rng.randint(1, max(1, rows - 4999))
            queries.append(
                "SELECT customer, count(*) AS orders, sum(amount) AS total FROM orders "
                f"WHERE id BETWEEN {first} AND {first + 4999} "
                "GROUP BY customer ORDER BY total DESC LIMIT 20"
            )
        else:
            queries.append(
                "SELECT id, amount, created_at FROM orders "
                f"WHERE customer = 'customer_{rng.randrange(CUSTOMERS):03d}' "
                f"AND amount > {rng.randrange(0, 800)}.50"
            )
    return queries


# --- the server process ------------------------------------------------------------------------


def serve(data_dir: Path, port: int, sql_url: str, pool_size: int | None) -> None:
    """``--serve``: the LDIMS app with the sql toolset under uvicorn (the child process)."""
    import uvicorn

    from runtime import create_app

    logging.basicConfig(level=logging.WARNING)  # before MCPServer's basicConfig(INFO)
    extra = {"sql_pool_size": pool_size} if pool_size else {}
    settings = Settings(data_dir=data_dir, sql_url=sql_url, log_level="WARNING", **extra)
    app = create_app(settings)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_server(data_dir: Path, sql_url: str, pool_size: int | None) -> Server:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--data-dir"]
    command += [str(data_dir), "--port", str(port), "--sql-url", sql_url]
    if pool_size:
        command += ["--pool-size", str(pool_size)]
    return launch(command, data_dir, f"http://127.0.0.1:{port}/mcp")


# --- phases ------------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    workers: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    rows: list[int] = field(default_factory=list)
    db_times: list[float] = field(default_factory=list)  # executor's own time, seconds
    wall: float = 0.0
    server_cpu: float | None = None  # seconds; None: no server in this phase
    own_cpu: float = 0.0  # this process: the clients or the driver threads
    database_cpu: float = 0.0  # PostgreSQL's backends connected to the bench database
    machine_cpu: float = 0.0  # every process of the machine, these included

    @property
    def calls(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        return self.calls / self.wall if self.wall else 0.0


def backend_cpu(database: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend connected to ``database`` (by process title)."""
    found = {}
    for process in psutil.process_iter(["cmdline"]):
        title = " ".join(process.info["cmdline"] or ())
        if title.startswith("postgres:") and f" {database} " in title:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                found[process.pid] = times.user + times.system
    return found


@contextlib.contextmanager
def measured(phase: Phase, database: str, server: psutil.Process | None = None) -> Any:
    """Wall time and CPU of the block, into ``phase``."""
    server_before = server.cpu_times() if server else None
    backends_before = backend_cpu(database)
    own_before, machine_before = time.process_time(), busy_seconds()
    started = time.perf_counter()
    yield
    phase.wall = time.perf_counter() - started
    phase.own_cpu = time.process_time() - own_before
    phase.machine_cpu = busy_seconds() - machine_before
    backends = backend_cpu(database)  # a backend that started meanwhile counts whole
    phase.database_cpu = sum(cpu - backends_before.get(pid, 0.0) for pid, cpu in backends.items())
    if server is not None and server_before is not None:
        after = server.cpu_times()
        phase.server_cpu = after.user + after.system - server_before.user - server_before.system


async def mcp_loop(
    client: Client, queries: list[str], first: int, end: float, phase: Phase
) -> None:
    number = first
    while time.perf_counter() < end:
        arguments = {"sql": queries[number % len(queries)]}
        number += 1
        structured = await timed_call(client, TOOL, arguments, phase)
        if structured is None:
            continue
        phase.rows.append(int(structured.get("rowCount", 0)))
        with contextlib.suppress(TypeError, ValueError):
            phase.db_times.append(float(structured["executionTime"]) / 1000)


async def mcp_phase(
    clients: list[Client],
    queries: list[str],
    seconds: float,
    server: psutil.Process,
    database: str,
) -> Phase:
    phase = Phase(f"MCP `{TOOL}`", len(clients), seconds)
    step = len(queries) // len(clients)
    with measured(phase, database, server):
        end = time.perf_counter() + seconds
        async with anyio.create_task_group() as group:
            for number, client in enumerate(clients):
                group.start_soon(mcp_loop, client, queries, number * step, end, phase)
    return phase


async def run_mcp(
    server: Server, args: argparse.Namespace, queries: list[str], database: str
) -> Phase:
    tools = await wait_ready(server, TENANT)
    if TOOL not in tools:
        raise RuntimeError(f"the server does not offer {TOOL}; it has {tools}")
    process = psutil.Process(server.process.pid)
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(args.clients):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={TENANT_HEADER: TENANT}, timeout=60)
            )
            transport = streamable_http_client(server.url, http_client=http)
            clients.append(await stack.enter_async_context(Client(transport)))
        if args.warmup > 0:
            await mcp_phase(clients, queries, args.warmup, process, database)
        return await mcp_phase(clients, queries, args.seconds, process, database)


def driver_phase(
    connections: list[psycopg.Connection[Any]], rendered: list[str], seconds: float
) -> Phase:
    """One thread per connection, each in a closed loop of execute + fetchall."""
    phase = Phase("psycopg direct", len(connections), seconds)
    step = len(rendered) // len(connections)

    def loop(connection: psycopg.Connection[Any], first: int, end: float) -> None:
        number = first
        while time.perf_counter() < end:
            statement = rendered[number % len(rendered)]
            number += 1
            started = time.perf_counter()
            try:
                found = connection.execute(statement).fetchall()  # type: ignore[call-overload]
            except psycopg.Error as exc:
                phase.errors[type(exc).__name__] += 1
                continue
            phase.latencies.append(time.perf_counter() - started)  # list.append: thread-safe
            phase.rows.append(len(found))

    with measured(phase, connections[0].info.dbname):
        end = time.perf_counter() + seconds
        threads = [
            threading.Thread(target=loop, args=(connection, number * step, end))
            for number, connection in enumerate(connections)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return phase


def run_driver(url: str, args: argparse.Namespace, rendered: list[str]) -> Phase:
    with contextlib.ExitStack() as stack:
        connections = [
            stack.enter_context(psycopg.connect(url, autocommit=True)) for _ in range(args.clients)
        ]
        if args.warmup > 0:
            driver_phase(connections, rendered, args.warmup)
        return driver_phase(connections, rendered, args.seconds)


def serial_phase(
    name: str, call: Callable[[str], Any], queries: list[str], seconds: float, database: str
) -> Phase:
    """``call`` on each text in turn, on this thread, for ``seconds``."""
    phase = Phase(name, 1, seconds)
    with measured(phase, database):
        end = time.perf_counter() + seconds
        number = 0
        while time.perf_counter() < end:
            text = queries[number % len(queries)]
            number += 1
            started = time.perf_counter()
            try:
                result = call(text)
            except Exception as exc:
                phase.errors[type(exc).__name__] += 1
                continue
            phase.latencies.append(time.perf_counter() - started)
            if hasattr(result, "row_count"):
                phase.rows.append(result.row_count)
                phase.db_times.append(result.execution_ms / 1000)
    return phase


def run_in_process(
    data_dir: Path, url: str, args: argparse.Namespace, queries: list[str], database: str
) -> list[Phase]:
    settings = Settings(data_dir=data_dir, sql_url=url, log_level="WARNING")
    executor = SqlExecutor(settings)
    try:
        phases = []
        for name, call in (
            ("executor in-process (`SqlExecutor.read`)", executor.read),
            ("guard alone (`check_read`)", lambda text: check_read(text, "postgres", probe=True)),
        ):
            if args.warmup > 0:
                serial_phase(name, call, queries, args.warmup, database)
            phases.append(serial_phase(name, call, queries, args.seconds, database))
        return phases
    finally:
        executor.engine.dispose()


# --- report ------------------------------------------------------------------------------------

HEADER = ["path", "workers", "calls", "calls/s", "p50 ms", "p95 ms", "p99 ms", "errors"]
COST_HEADER = [
    "path",
    "executor time p50 ms",
    "executor time p95 ms",
    "server CPU ms/call",
    "bench process CPU ms/call",
    "PostgreSQL backends CPU ms/call",
    "rest of the machine CPU ms/call",
    "machine busy",
    "mean rows",
]


def row(phase: Phase) -> list[str]:
    return [
        phase.name,
        str(phase.workers),
        str(phase.calls),
        f"{phase.rate:.1f}",
        ms(percentile(phase.latencies, 50)),
        ms(percentile(phase.latencies, 95)),
        ms(percentile(phase.latencies, 99)),
        errors_text(phase.errors),
    ]


def cost_row(phase: Phase) -> list[str]:
    ours = phase.own_cpu + (phase.server_cpu or 0.0) + phase.database_cpu
    others = phase.machine_cpu - ours
    cores = os.cpu_count() or 1
    return [
        phase.name,
        ms(percentile(phase.db_times, 50)),
        ms(percentile(phase.db_times, 95)),
        per_call(phase.server_cpu, phase.calls),
        per_call(phase.own_cpu, phase.calls),
        per_call(phase.database_cpu, phase.calls),
        per_call(max(others, 0.0), phase.calls),
        f"{phase.machine_cpu / phase.wall / cores:.0%}" if phase.wall else DASH,
        f"{sum(phase.rows) / len(phase.rows):.1f}" if phase.rows else DASH,
    ]


def overhead_line(mcp: Phase, driver: Phase) -> str:
    if not mcp.rate or not driver.rate:
        return "Overhead: not computed (a phase made no successful call)."
    mcp95, driver95 = percentile(mcp.latencies, 95), percentile(driver.latencies, 95)
    difference = (mcp95 or 0.0) - (driver95 or 0.0)
    return (
        f"Overhead: psycopg direct / MCP `{TOOL}` throughput = {driver.rate:.1f} / "
        f"{mcp.rate:.1f} = **{driver.rate / mcp.rate:.1f}×**; p95 {ms(mcp95)} ms vs "
        f"{ms(driver95)} ms = **+{difference * 1000:.1f} ms** per call over MCP."
        + ceiling_text(mcp)
    )


def ceiling_text(mcp: Phase) -> str:
    """Calls/s of the server process with a core to itself: what the machine's load hides."""
    if not mcp.calls or not mcp.server_cpu:
        return ""
    per_call = mcp.server_cpu / mcp.calls
    return (
        f" The server used {per_call * 1000:.1f} ms of CPU per call: with a whole core "
        f"(it is one process, one GIL) it would cap at {1 / per_call:.0f} calls/s."
    )


def notes(args: argparse.Namespace, queries: list[str], rendered: list[str]) -> list[str]:
    added = sum(check_read(text, "postgres", probe=True).limit_added for text in queries)
    samples = "; ".join(f"`{text}`" for text in rendered[: len(KINDS)])
    pool = args.pool_size or Settings.model_fields["sql_pool_size"].default
    return [
        f"Database: PostgreSQL on 127.0.0.1:5432, `orders` with {args.rows:,} rows, indexes on "
        "`customer` and `created_at`, dropped at the end.",
        f"Queries: {len(queries)} (seed {args.seed}), kinds {', '.join(KINDS)} in turn; the "
        f"guard added a LIMIT to {added}. As run (rendered by the guard): {samples}.",
        f"Server: `python bench/sql.py --serve` (uvicorn, one process) serving "
        f"`create_app(settings)` with `sql_url` set, `sql_pool_size` {pool}. Clients: "
        f"{args.clients} `mcp.Client`s in this process, one `httpx2.AsyncClient` each. "
        f"psycopg: {args.clients} threads, one autocommit connection each. Each phase after "
        f"{args.warmup:g}s of warm-up not counted; latency and calls/s count successful "
        "calls only.",
        "Executor time: the `executionTime` the tool reports (MCP) or `QueryResult.execution_ms`"
        " (in-process): from asking the pool for a connection to the last row made JSON-ready, "
        "after the guard. CPU per call: user + system seconds during the phase / successful "
        "calls; the bench process holds the MCP clients or the psycopg threads; PostgreSQL "
        "backends: those connected to the bench database (by process title); the rest of the "
        "machine: every other process (other work on this shared machine, the PostgreSQL "
        "background processes). Machine busy: all CPUs' busy share over the phase's wall "
        "time; what the rest takes, the server, the clients and PostgreSQL do not get.",
        "Mean rows: MCP and the executor return at most 20 rows where the guard added "
        "`LIMIT 21`; psycopg fetches all 21.",
    ]


def report(args: argparse.Namespace, phases: list[Phase], queries: list[str]) -> str:
    mcp, executor, guard, driver = phases
    rendered = [check_read(text, "postgres", probe=True).sql for text in queries]
    parts = [
        "# SQL benchmark: `read-query` over MCP HTTP vs psycopg",
        "",
        markdown_table(HEADER, [row(p) for p in (mcp, executor, guard, driver)]),
        "",
        overhead_line(mcp, driver),
        "",
        "## Where the time goes",
        "",
        markdown_table(COST_HEADER, [cost_row(p) for p in (mcp, executor, guard, driver)]),
        "",
        *(f"- {line}" for line in notes(args, queries, rendered)),
        "",
        machine_line(),
        "",
        f"Command: `.venv/bin/python bench/sql.py{command_flags(args)}`",
    ]
    return "\n".join(parts) + "\n"


def command_flags(args: argparse.Namespace) -> str:
    flags = " --quick" if args.quick else f" --seconds {args.seconds:g} --warmup {args.warmup:g}"
    flags += f" --clients {args.clients} --rows {args.rows} --queries {args.queries}"
    flags += f" --seed {args.seed}"
    return flags + (f" --pool-size {args.pool_size}" if args.pool_size else "")


# --- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per phase")
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed seconds per phase")
    parser.add_argument("--quick", action="store_true", help="3 s phases, 1 s warm-up")
    parser.add_argument("--clients", type=int, default=8, help="SDK clients / driver threads")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the orders table")
    parser.add_argument("--queries", type=int, default=1000, help="distinct SELECT texts")
    parser.add_argument("--seed", type=int, default=42, help="seed of the query parameters")
    parser.add_argument("--pool-size", type=int, help="the server's sql_pool_size (default: 5)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sql-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 3.0, 1.0
    if args.rows < 10_000:
        parser.error("--rows must be at least 10000")
    return args


def run(args: argparse.Namespace, name: str, data_dir: Path) -> list[Phase]:
    print(f"creating database {name} with {args.rows:,} rows ...", flush=True)
    url = create_database(name, args.rows)
    queries = make_queries(args.queries, args.rows, args.seed)
    rendered = [check_read(text, "postgres", probe=True).sql for text in queries]
    server = start_server(data_dir, url, args.pool_size)
    try:
        mcp = anyio.run(run_mcp, server, args, queries, name)
    except BaseException:
        print(f"server log tail:\n{server.log_tail()}")
        raise
    finally:
        stop_server(server)
    print(f"MCP: {mcp.calls} calls, {mcp.rate:.1f}/s, errors {errors_text(mcp.errors)}", flush=True)
    driver = run_driver(url, args, rendered)
    print(f"psycopg: {driver.calls} calls, {driver.rate:.1f}/s", flush=True)
    executor, guard = run_in_process(data_dir, url, args, queries, name)
    print(f"in-process: executor {executor.rate:.1f}/s, guard {guard.rate:.1f}/s", flush=True)
    return [mcp, executor, guard, driver]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.data_dir, args.port, args.sql_url, args.pool_size)
        return 0
    logging.basicConfig(level=logging.WARNING)
    name = f"ldims_bench_{secrets.token_hex(6)}"
    data_dir = Path(tempfile.mkdtemp(prefix="ldims-sql-bench-"))
    try:
        phases = run(args, name, data_dir)
    finally:
        drop_database(name)
        shutil.rmtree(data_dir, ignore_errors=True)
    text = report(args, phases, make_queries(args.queries, args.rows, args.seed))
    publish(text, RESULTS)
    return 1 if any(sum(p.errors.values()) for p in phases) else 0


if __name__ == "__main__":
    raise SystemExit(main())
