"""The guide toolset through the official MCP client: sessions in a real Redis, over HTTP
(both protocol eras), stdio and in memory; the shipped trees walked to their ends."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from api.mcp import LdimsMCP, build_mcp_server
from ldims.caller import stdio_caller
from ldims.guide import SHIPPED_TREES, load_tree
from ldims.settings import Settings
from runtime import build_services
from tests.conftest import ApiServer, RedisServer, settings_env

TREE = """\
id: demo
title: Demo tree
language: en
keywords: [demo]
entry_nodes: [printers, network]
nodes:
  root:
    title: Start
    response: What do you need help with?
    keywords: [help]
    options:
      - {id: printers, description: Printers, next_node: printers}
      - {id: network, description: Network, next_node: network}
  printers:
    title: Printers
    response: Is the printer on?
    keywords: [printer, printing, paper jam, toner]
    options:
      - {id: yes, description: It is on, next_node: printer_on}
      - {id: no, description: It is off, next_node: printer_off}
  printer_on:
    title: Printer on
    response: Check the paper tray.
    keywords: [paper tray, paper]
  printer_off:
    title: Printer off
    response: Switch it on.
    keywords: [switch, power, cable]
  network:
    title: Network
    response: Restart the router.
    keywords: [wifi, router, network]
    options:
      - {id: done, description: Done, next_node: null}
"""


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture
def settings(tmp_path: Path, shared_redis: RedisServer) -> Settings:
    trees = tmp_path / "trees"
    trees.mkdir()
    (trees / "demo.yaml").write_text(TREE)
    return Settings(
        data_dir=tmp_path / "data",
        redis_url=shared_redis.url,
        redis_key_prefix=f"t{uuid.uuid4().hex[:8]}:",
        guide_dir=trees,
    )


@pytest.fixture
def server(settings: Settings) -> Iterator[LdimsMCP]:
    services = build_services(settings)
    services.catalog.upgrade()
    made = build_mcp_server(services)
    yield made
    made.close()
    services.dispatcher.close()
    services.catalog.dispose()


async def _calls(server: LdimsMCP, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    async with Client(server) as client:
        return [await client.call_tool(name, arguments) for name, arguments in calls]


def state(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.structured_content
    return result.structured_content  # type: ignore[no-any-return]


def error(result: Any) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    return result.structured_content  # type: ignore[no-any-return]


def initiate(server: LdimsMCP, query: str) -> dict[str, Any]:
    return state(run(_calls(server, ("initiate_session", {"user_query": query})))[0])


def navigate(server: LdimsMCP, session: str, option: str, text: str | None = None) -> Any:
    arguments: dict[str, Any] = {"session_id": session, "selected_option_id": option}
    if text is not None:
        arguments["user_input"] = text
    return run(_calls(server, ("navigate_session", arguments)))[0]


def test_a_question_lands_on_its_entry_node_and_a_path_runs_to_its_end(
    server: LdimsMCP,
) -> None:
    first = initiate(server, "my printer has a paper jam")
    assert first["node_id"] == "printers" and first["current_step"] == "Printers"
    assert [o["id"] for o in first["options"]] == ["yes", "no"]
    assert first["is_complete"] is False and first["session_id"].startswith("gs_")
    leaf = state(navigate(server, first["session_id"], "yes"))
    assert leaf["response"] == "Check the paper tray." and leaf["is_complete"] is True
    assert leaf["options"] == []


def test_nothing_matching_starts_at_the_root_with_the_topics(server: LdimsMCP) -> None:
    fallback = initiate(server, "what is the weather tomorrow")
    assert fallback["node_id"] == "root"
    assert [o["id"] for o in fallback["options"]] == ["printers", "network"]
    assert fallback["notice"]


def test_back_and_end_work_on_every_step(server: LdimsMCP) -> None:
    session = initiate(server, "help")["session_id"]
    at_start = state(navigate(server, session, "back"))
    assert at_start["node_id"] == "root" and "nothing to go back" in at_start["notice"]
    state(navigate(server, session, "printers"))
    state(navigate(server, session, "no"))
    back = state(navigate(server, session, "back"))  # back from a leaf
    assert back["node_id"] == "printers" and back["is_complete"] is False
    assert state(navigate(server, session, "back"))["node_id"] == "root"
    ended = state(navigate(server, session, "end"))
    assert ended["is_complete"] is True and ended["options"] == []
    assert error(navigate(server, session, "printers"))["errorCode"] == "SESSION_COMPLETE"


def test_an_option_with_a_null_next_node_ends_the_session(server: LdimsMCP) -> None:
    session = initiate(server, "wifi router")["session_id"]
    done = state(navigate(server, session, "done"))
    assert done["is_complete"] is True and done["current_step"] == "end"


def test_an_unknown_option_lists_the_valid_ids(server: LdimsMCP) -> None:
    session = initiate(server, "printer toner")["session_id"]
    body = error(navigate(server, session, "maybe"))
    assert body["errorCode"] == "INVALID_OPTION"
    assert body["errorDetails"]["validOptions"] == [
        "yes",
        "no",
        "back",
        "end",
        "provide_more_info",
    ]
    assert state(navigate(server, session, "yes"))["node_id"] == "printer_on"  # still usable


def test_provide_more_info_rematches_within_the_subtree(server: LdimsMCP) -> None:
    session = initiate(server, "printer")["session_id"]
    moved = state(navigate(server, session, "provide_more_info", "the power cable is unplugged"))
    assert moved["node_id"] == "printer_off"
    session = initiate(server, "printer")["session_id"]
    # Words that only match outside the subtree (the network branch) do not move the session.
    stayed = state(navigate(server, session, "provide_more_info", "the wifi router"))
    assert stayed["node_id"] == "printers" and stayed["notice"]
    missing = error(navigate(server, session, "provide_more_info"))
    assert missing["errorCode"] == "INVALID_INPUT"
    assert missing["errorDetails"]["field"] == "user_input"


def test_unknown_expired_and_foreign_sessions_are_clear_errors(
    settings: Settings, server: LdimsMCP
) -> None:
    assert error(navigate(server, "gs_nope", "yes"))["errorCode"] == "SESSION_NOT_FOUND"

    short = settings.model_copy(update={"guide_session_ttl_seconds": 1})
    short_services = build_services(short)
    short_server = build_mcp_server(short_services)
    try:
        session = initiate(short_server, "printer")["session_id"]
        time.sleep(1.2)
        assert error(navigate(short_server, session, "yes"))["errorCode"] == "SESSION_EXPIRED"
    finally:
        short_server.close()
        short_services.catalog.dispose()
        short_services.dispatcher.close()

    other_services = build_services(settings)
    other_services.catalog.upgrade()
    other_tenant = build_mcp_server(other_services, stdio=stdio_caller("other"))
    try:
        session = initiate(server, "printer")["session_id"]
        # another tenant's session is not found, exactly like one that never existed
        foreign = error(navigate(other_tenant, session, "yes"))
        unknown = error(navigate(other_tenant, "gs_" + "x" * 32, "yes"))
        assert foreign["errorCode"] == unknown["errorCode"] == "SESSION_NOT_FOUND"
        assert foreign["errorMessage"] == unknown["errorMessage"]
        assert state(navigate(server, session, "yes"))["node_id"] == "printer_on"
    finally:
        other_tenant.close()
        other_services.dispatcher.close()
        other_services.catalog.dispose()


def test_a_tree_edited_mid_session_continues_or_ends_cleanly(
    settings: Settings, server: LdimsMCP
) -> None:
    tree_file = settings.guide_dir / "demo.yaml"  # type: ignore[operator]
    kept = initiate(server, "printer")["session_id"]
    gone = initiate(server, "wifi router")["session_id"]
    edited = (
        TREE.replace("Switch it on.", "Press the power button.")
        .replace("      - {id: network, description: Network, next_node: network}\n", "")
        .replace("[printers, network]", "[printers]")
    )
    edited = edited[: edited.index("  network:")]
    time.sleep(0.01)
    tree_file.write_text(edited)
    time.sleep(1.1)  # the store looks at the files at most once a second
    continued = state(navigate(server, kept, "no"))
    assert continued["response"] == "Press the power button."
    assert continued["notice"]  # the user hears that the knowledge base changed
    ended = state(navigate(server, gone, "done"))
    assert ended["is_complete"] is True and ended["current_step"] == "tree_changed"
    assert "new session" in ended["response"]


def test_a_broken_edit_keeps_the_last_good_tree(settings: Settings, server: LdimsMCP) -> None:
    tree_file = settings.guide_dir / "demo.yaml"  # type: ignore[operator]
    session = initiate(server, "printer")["session_id"]
    tree_file.write_text(TREE.replace("next_node: printer_on", "next_node: nowhere"))
    time.sleep(1.1)
    assert state(navigate(server, session, "yes"))["node_id"] == "printer_on"


async def _walk_all_paths(client: Client, tree_id: str, root_query: str) -> int:
    """Follow every option of every step from the root; each path must end."""
    tree = next(
        load_tree(p)
        for p in SHIPPED_TREES.iterdir()
        if p.suffix in (".yaml", ".yml", ".json") and load_tree(p).id == tree_id
    )
    completed = 0
    stack: list[list[str]] = [[]]
    while stack:
        path = stack.pop()
        current = state(await client.call_tool("initiate_session", {"user_query": root_query}))
        assert current["tree_id"] == tree_id and current["node_id"] == tree.root
        for option in path:
            arguments = {"session_id": current["session_id"], "selected_option_id": option}
            current = state(await client.call_tool("navigate_session", arguments))
        if current["is_complete"]:
            completed += 1
            continue
        assert current["options"], current
        for option in current["options"]:
            if option["id"] not in ("back", "end") and len(path) <= 12:
                stack.append([*path, option["id"]])
    return completed


SHIPPED = [
    ("tech-investment", "科技行业投资咨询"),
    ("ingestion-troubleshooting", "ingestion failure"),
]


@pytest.fixture
def walk_settings(tmp_path: Path, shared_redis: RedisServer) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        redis_url=shared_redis.url,
        redis_key_prefix=f"t{uuid.uuid4().hex[:8]}:",
        guide_match_threshold=1.0,  # always the root: the walk starts at the top
    )


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_every_path_of_the_shipped_trees_ends_over_http(walk_settings: Settings, mode: str) -> None:
    api = ApiServer(walk_settings).start()

    async def walk() -> list[int]:
        async with (
            httpx2.AsyncClient(timeout=30) as http,
            Client(streamable_http_client(f"{api.url}/mcp", http_client=http), mode=mode) as client,  # type: ignore[arg-type]
        ):
            # The root query must choose the right tree even though it falls back to the root.
            return [await _walk_all_paths(client, tree, query) for tree, query in SHIPPED]

    try:
        completed = run(walk())
    finally:
        api.stop()
    assert all(count >= 3 for count in completed), completed


def test_every_path_of_the_shipped_trees_ends_over_stdio(walk_settings: Settings) -> None:
    env = settings_env(walk_settings)
    env["LDIMS_GUIDE_MATCH_THRESHOLD"] = "1.0"
    env["LDIMS_REDIS_KEY_PREFIX"] = walk_settings.redis_key_prefix
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "runtime.cli.main", "mcp"], env=env
    )

    async def walk() -> list[int]:
        async with Client(parameters) as client:
            return [await _walk_all_paths(client, tree, query) for tree, query in SHIPPED]

    completed = run(walk())
    assert all(count >= 3 for count in completed), completed


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_session_survives_an_api_restart_over_http(settings: Settings, mode: str) -> None:
    async def call(url: str, name: str, arguments: dict[str, Any]) -> Any:
        async with (
            httpx2.AsyncClient(timeout=30) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,  # type: ignore[arg-type]
        ):
            return await client.call_tool(name, arguments)

    api = ApiServer(settings).start()
    try:
        first = state(run(call(api.url, "initiate_session", {"user_query": "printer"})))
    finally:
        api.stop()
    restarted = ApiServer(settings).start()
    try:
        arguments = {"session_id": first["session_id"], "selected_option_id": "no"}
        after = state(run(call(restarted.url, "navigate_session", arguments)))
    finally:
        restarted.stop()
    assert after["node_id"] == "printer_off"


def test_the_guide_over_stdio(settings: Settings) -> None:
    env = settings_env(settings)
    env["LDIMS_GUIDE_DIR"] = str(settings.guide_dir)
    env["LDIMS_REDIS_KEY_PREFIX"] = settings.redis_key_prefix
    parameters = StdioServerParameters(
        command=sys.executable, args=["-m", "runtime.cli.main", "mcp"], env=env
    )

    async def walk() -> list[dict[str, Any]]:
        async with Client(parameters) as client:
            first = state(
                await client.call_tool("initiate_session", {"user_query": "paper jam printer"})
            )
            second = state(
                await client.call_tool(
                    "navigate_session",
                    {"session_id": first["session_id"], "selected_option_id": "yes"},
                )
            )
            return [first, second]

    first, second = run(walk())
    assert first["node_id"] == "printers" and second["is_complete"] is True


def test_guide_validate_reports_file_and_line(tmp_path: Path) -> None:
    import subprocess

    folder = tmp_path / "trees"
    folder.mkdir()
    broken = TREE.replace("next_node: printer_on", "next_node: nowhere")
    (folder / "broken.yaml").write_text(broken)
    command = [sys.executable, "-m", "runtime.cli.main", "guide", "validate", str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    line = next(n for n, text in enumerate(broken.splitlines(), 1) if "nowhere" in text)
    assert f"broken.yaml:{line}: error: node 'printers' option 'yes'" in result.stderr
    assert "nowhere" in result.stderr and "1 error(s)" in result.stdout

    (folder / "broken.yaml").write_text(TREE)
    fixed = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert fixed.returncode == 0 and "0 error(s), 0 warning(s)" in fixed.stdout


def test_back_end_bad_options_and_tenants_over_http(settings: Settings) -> None:
    async def calls(url: str) -> list[Any]:
        async def client_for(tenant: str) -> tuple[Any, Any]:
            http = httpx2.AsyncClient(timeout=30, headers={"X-LDIMS-Tenant": tenant})
            client = Client(streamable_http_client(f"{url}/mcp", http_client=http))  # type: ignore[arg-type]
            return http, client

        http_a, client_a = await client_for("acme")
        http_b, client_b = await client_for("globex")
        async with http_a, http_b, client_a as a, client_b as b:
            first = state(await a.call_tool("initiate_session", {"user_query": "printer toner"}))
            session = first["session_id"]

            def step(option: str) -> dict[str, Any]:
                return {"session_id": session, "selected_option_id": option}

            return [
                first,
                await a.call_tool("navigate_session", step("maybe")),
                await b.call_tool("navigate_session", step("yes")),
                await a.call_tool("navigate_session", step("yes")),
                await a.call_tool("navigate_session", step("back")),
                await a.call_tool("navigate_session", step("end")),
                await a.call_tool("navigate_session", step("back")),
            ]

    api = ApiServer(settings).start()
    try:
        first, bad, foreign, leaf, back, ended, after_end = run(calls(api.url))
    finally:
        api.stop()
    assert first["node_id"] == "printers"
    assert error(bad)["errorCode"] == "INVALID_OPTION"
    assert error(foreign)["errorCode"] == "SESSION_NOT_FOUND"
    assert state(leaf)["is_complete"] is True
    assert state(back)["node_id"] == "printers"
    assert state(ended)["is_complete"] is True
    assert error(after_end)["errorCode"] == "SESSION_COMPLETE"


def test_sessions_are_capped_per_tenant_and_keys_live_as_long_as_sessions(
    settings: Settings, shared_redis: RedisServer
) -> None:
    capped = settings.model_copy(update={"guide_max_sessions_per_tenant": 5})
    services = build_services(capped)
    services.catalog.upgrade()
    acme = build_mcp_server(services, stdio=stdio_caller("acme"))
    other = build_mcp_server(services, stdio=stdio_caller("other"))
    client = redis.Redis.from_url(shared_redis.url)
    try:
        others = [initiate(other, "printer")["session_id"] for _ in range(3)]
        made = [initiate(acme, "printer")["session_id"] for _ in range(12)]
        prefix = capped.redis_key_prefix
        live = [s for s in made if client.exists(f"{prefix}ldims:guide:session:{s}")]
        assert live == made[-5:]  # the newest five; the rest ended, not leaked
        assert error(navigate(acme, made[0], "yes"))["errorCode"] == "SESSION_NOT_FOUND"
        assert state(navigate(acme, made[-1], "yes"))["node_id"] == "printer_on"
        # another tenant's sessions are untouched by acme's
        assert all(client.exists(f"{prefix}ldims:guide:session:{s}") for s in others)
        ttl = client.ttl(f"{prefix}ldims:guide:session:{made[-1]}")
        assert capped.guide_session_ttl_seconds < ttl <= capped.guide_session_ttl_seconds + 300
        assert client.zcard(f"{prefix}ldims:guide:tenant:acme") == 5
    finally:
        acme.close()
        other.close()
        services.dispatcher.close()
        services.catalog.dispose()
