"""The real qmd (npm `@tobilu/qmd` 2.8.3) as a reference for tests.

LDIMS' qmd toolset mimics qmd's CLI and MCP server; comparison tests run the same folder through
both and compare. This module only drives the real qmd, installed by `make test` with the other
Node clients (tests/mcp_clients/install.sh, from package-lock.json), on the pinned Node 22: qmd
2.8.3 needs Node >= 22 and crashes on the machine's Node 20.

Every `QmdReference` lives in a private work folder: HOME, XDG_CONFIG_HOME and XDG_CACHE_HOME
point inside it, so qmd's config (index.yml) and SQLite index never touch the real home and two
tests never share an index. Only commands that never load a model are meant to be used:
`collection add`, `update`, `search`, `get`, `multi-get`, `status`, `context add`, and the MCP
server's `get`, `multi_get` and `status` tools (`query`/`vsearch`/`embed` would download GGUF
models from Hugging Face).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, ReadResourceResult

CLIENTS = Path(__file__).resolve().parent / "mcp_clients"
NODE = CLIENTS / "node_modules" / ".bin" / "node"
QMD_BIN = CLIENTS / "node_modules" / "@tobilu" / "qmd" / "bin" / "qmd"
TIMEOUT = 120.0  # seconds; a cold `collection add` of thousands of files takes a few seconds

# qmd reads these to pick its index, config and models; a developer's own settings must not leak
# into a reference run.
QMD_VARIABLES = (
    "INDEX_PATH",
    "QMD_CONFIG_DIR",
    "QMD_EMBED_MODEL",
    "QMD_RERANK_MODEL",
    "QMD_GENERATE_MODEL",
    "QMD_SKILLS_DIR",
    "QMD_EDITOR_URI",
    "QMD_SOURCE_MODE",
)


class QmdError(RuntimeError):
    """qmd exited nonzero; the message carries its command line, exit code and output."""


class QmdReference:
    """One private qmd installation state (config + index) in ``work``."""

    def __init__(self, work: Path) -> None:
        if not QMD_BIN.exists():  # a clear message rather than Node's "Cannot find module"
            raise QmdError(f"{QMD_BIN} is missing: run `bash tests/mcp_clients/install.sh`")
        self.work = work
        self.home = work / "home"
        for folder in (self.home, work / "config", work / "cache"):
            folder.mkdir(parents=True, exist_ok=True)
        self.env = self._environment()

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in QMD_VARIABLES}
        env.update(
            HOME=str(self.home),
            XDG_CONFIG_HOME=str(self.work / "config"),
            XDG_CACHE_HOME=str(self.work / "cache"),
            NO_COLOR="1",
            # bin/qmd respawns the Node that runs it, but anything else that looks `node` up on
            # PATH must find Node 22 too, never the machine's Node 20.
            PATH=f"{NODE.parent}{os.pathsep}{env.get('PATH', '')}",
            # qmd resolves relative paths against $PWD (not the process cwd): pin it to the
            # folder it runs in, where no .qmd/index.yaml can be found by walking up.
            PWD=str(self.work),
        )
        return env

    @property
    def index_path(self) -> Path:
        """qmd's SQLite index (``$XDG_CACHE_HOME/qmd/index.sqlite``)."""
        return self.work / "cache" / "qmd" / "index.sqlite"

    # --- the CLI ---------------------------------------------------------------------------------

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``qmd ARGS``; raise QmdError on a nonzero exit unless ``check`` is false."""
        command = [str(NODE), str(QMD_BIN), *args]
        done = subprocess.run(
            command,
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            raise QmdError(
                f"qmd {' '.join(args)} exited {done.returncode}\n"
                f"stderr:\n{done.stderr}\nstdout:\n{done.stdout}"
            )
        return done

    def collection_add(self, path: Path | str, name: str, mask: str | None = None) -> str:
        """Add (and index) a folder as collection ``name``; qmd's default mask is ``**/*.md``."""
        args = ["collection", "add", str(Path(path).resolve()), "--name", name]
        if mask is not None:
            args += ["--mask", mask]
        return self.run(*args).stdout

    def context_add(self, target: str, text: str) -> str:
        """Attach context to ``target``: ``/`` (global), ``qmd://name/sub`` or a folder path."""
        return self.run("context", "add", target, text).stdout

    def update(self) -> str:
        """Rescan every collection (new, changed and removed files); qmd's report on stdout."""
        return self.run("update").stdout

    def status(self) -> str:
        """The human-readable ``qmd status`` report."""
        return self.run("status").stdout

    def search(
        self, query: str, limit: int = 10, collection: str | None = None
    ) -> list[dict[str, Any]]:
        """BM25 keyword search (``qmd search``), qmd's JSON rows best first."""
        args = ["search", "-n", str(limit), "--format", "json"]  # --format json == legacy --json
        if collection is not None:
            args += ["-c", collection]
        # `--` so a query starting with "-" (qmd's negation) is not read as an option.
        stdout = self.run(*args, "--", query).stdout
        return parse_rows(stdout)

    # --- the MCP server (`qmd mcp`, stdio) -------------------------------------------------------

    def mcp_parameters(self) -> StdioServerParameters:
        """How to spawn ``qmd mcp`` with this reference's environment (for a custom client)."""
        return StdioServerParameters(
            command=str(NODE), args=[str(QMD_BIN), "mcp"], env=self.env, cwd=self.work
        )

    @contextlib.asynccontextmanager
    async def mcp_session(self, mode: str = "auto") -> AsyncIterator[Client]:
        """A connected official-SDK client of ``qmd mcp``.

        qmd speaks 2026-07-28 (server/discover) and the 2025 initialize handshake, so the SDK's
        default "auto" negotiation works; ``mode="legacy"`` forces the handshake. qmd's stderr
        goes to ``mcp-stderr.log`` in the work folder, not the test's output.
        """
        with (self.work / "mcp-stderr.log").open("a", encoding="utf-8") as errlog:
            transport = stdio_client(self.mcp_parameters(), errlog=errlog)
            async with Client(transport, mode=mode, read_timeout_seconds=TIMEOUT) as client:
                yield client

    def mcp_call(self, calls: list[tuple[str, dict[str, Any]]]) -> list[CallToolResult]:
        """Make ``calls`` (tool name, arguments) in order in one session; the raw SDK results.

        A tool error (e.g. "Document not found") is a result with ``is_error`` set, not a raise.
        Runs its own event loop: from async code use ``mcp_session`` instead.
        """

        async def call_all() -> list[CallToolResult]:
            async with self.mcp_session() as client:
                return [await client.call_tool(name, arguments) for name, arguments in calls]

        return asyncio.run(call_all())

    def read_resource(self, uri: str) -> ReadResourceResult:
        """Read ``qmd://collection/path`` through the MCP server (line-numbered text)."""

        async def read() -> ReadResourceResult:
            async with self.mcp_session() as client:
                return await client.read_resource(uri)

        return asyncio.run(read())


def parse_rows(stdout: str) -> list[dict[str, Any]]:
    """qmd's ``--format json`` output; ``[]`` for a message such as "No results found."."""
    text = stdout.strip()
    if not text.startswith("["):  # no JSON when nothing matched on some paths
        return []
    return json.loads(text)
