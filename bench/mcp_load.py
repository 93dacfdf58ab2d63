"""What the MCP benchmarks share: waiting for and stopping the server process, reading a
call's error code, the machine's busy CPU time and the table cells built from them."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from typing import Any

import anyio
import httpx2
import psutil
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from report import DASH
from servers import Server

from ldims.caller import TENANT_HEADER


async def wait_ready(
    server: Server, tenant: str, mode: str = "auto", timeout: float = 60.0
) -> list[str]:
    """The tool names, once an SDK client could connect and list them."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"server exited with {server.process.returncode}:\n{server.log_tail()}"
            )
        try:
            async with (
                httpx2.AsyncClient(headers={TENANT_HEADER: tenant}, timeout=10) as http,
                Client(streamable_http_client(server.url, http_client=http), mode=mode) as client,
            ):
                return [tool.name for tool in (await client.list_tools()).tools]
        except Exception as exc:  # not listening yet
            last = f"{type(exc).__name__}: {exc}"
        await anyio.sleep(0.25)
    raise RuntimeError(f"server not ready after {timeout:.0f}s (last: {last})\n{server.log_tail()}")


async def timed_call(
    client: Client, tool: str, arguments: dict[str, Any], calls: Any
) -> dict[str, Any] | None:
    """The structured result, its latency into ``calls.latencies``; None on failure (the
    error counted in ``calls.errors`` by exception type or errorCode)."""
    started = time.perf_counter()
    try:
        result = await client.call_tool(tool, arguments, read_timeout_seconds=60)
    except Exception as exc:
        calls.errors[type(exc).__name__] += 1
        return None
    elapsed = time.perf_counter() - started
    if result.is_error:
        calls.errors[error_code(result)] += 1
        return None
    calls.latencies.append(elapsed)
    structured = result.structured_content
    return structured if isinstance(structured, dict) else {}


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def stop_server(server: Server) -> None:
    stop_process(server.process)


def error_code(result: Any) -> str:
    """The errorCode of an ``isError`` tool result (or the start of its text)."""
    structured = result.structured_content or {}
    if isinstance(structured, dict) and structured.get("errorCode"):
        return str(structured["errorCode"])
    text = result.content[0].text if result.content else ""
    return f"isError: {text[:60]}"


def busy_seconds() -> float:
    """CPU seconds the machine's processes have used (all CPUs, since boot; no steal)."""
    times = psutil.cpu_times()
    fields = ("user", "nice", "system", "irq", "softirq")  # guest time is inside user/nice
    return float(sum(getattr(times, name, 0.0) for name in fields))


def errors_text(errors: Counter[str]) -> str:
    total = sum(errors.values())
    if not total:
        return "0"
    return f"{total} ({', '.join(f'{code} {n}' for code, n in errors.most_common())})"


def per_call(seconds: float | None, calls: int) -> str:
    """Milliseconds per call, or a dash."""
    return f"{seconds / calls * 1000:.2f}" if calls and seconds is not None else DASH
