"""Toolsets are plug-in units: a toolset added through the registry alone is served whole, every
error of every toolset has a REST status and a JSON-RPC code, instructions come from the
toolsets that are on."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from mcp import Client, MCPError
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

import ldims.errors
from api.mcp import REGISTRY, LdimsMCP, Toolset, build_mcp_server
from api.mcp.errors import COMMON_RPC_CODES, INTERNAL_ERROR
from ldims.caller import Caller
from ldims.errors import LdimsError
from ldims.services import Services
from runtime import build_services
from tests.conftest import RedisServer, make_settings


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


class Echoed(BaseModel):
    said: str
    tenant: str


class OutOfTune(LdimsError):
    code = "OUT_OF_TUNE"
    http_status = 422
    default_message = "The echo is out of tune."


def _register_echo(server: LdimsMCP) -> None:
    @server.tool(name="echo_back", description="Say it back.")
    async def echo_back(
        words: Annotated[str, Field(min_length=1, max_length=100)], ctx: Context
    ) -> Echoed:
        if words == "flat":
            raise OutOfTune(words=len(words))
        return Echoed(said=words, tenant=server.caller(ctx).tenant)

    @server.resource("echo://notes/{name}", name="note", mime_type="text/plain")
    def note(name: str) -> str:
        raise RuntimeError("served by the reader")

    def read(caller: Caller, params: dict[str, str]) -> list[ReadResourceContents]:
        if params["name"] == "missing":
            raise OutOfTune()
        text = f"note {params['name']} for {caller.tenant}"
        return [ReadResourceContents(content=text, mime_type="text/plain", meta=None)]

    server.add_resource_reader(r"echo://notes/(?P<name>[a-z]+)", read)


def _echo_instructions(services: Services, caller: Caller) -> str:
    return f"ECHO PARAGRAPH for {caller.tenant}."


ECHO = Toolset(
    name="echo",
    register=_register_echo,
    uri_schemes=frozenset({"echo"}),
    errors=(OutOfTune,),
    rpc_codes={"OUT_OF_TUNE": -32099},
    instructions=_echo_instructions,
)


@pytest.fixture
def services(tmp_path: Path, shared_redis: RedisServer) -> Iterator[Services]:
    made = build_services(make_settings(tmp_path, shared_redis.url))
    made.catalog.upgrade()
    yield made
    made.close()


def test_a_toolset_added_through_the_registry_alone_is_served(services: Services) -> None:
    server = build_mcp_server(services, registry=(*REGISTRY, ECHO))

    async def check() -> None:
        async with Client(server) as client:
            assert "ECHO PARAGRAPH for default." in (client.instructions or "")
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"echo_back", "searchDocuments"} <= names
            said = await client.call_tool("echo_back", {"words": "hello"})
            assert said.structured_content == {"said": "hello", "tenant": "default"}
            flat = await client.call_tool("echo_back", {"words": "flat"})
            assert flat.is_error and flat.structured_content["errorCode"] == "OUT_OF_TUNE"
            templates = (await client.list_resource_templates()).resource_templates
            assert "echo://notes/{name}" in {t.uri_template for t in templates}
            read = await client.read_resource("echo://notes/tune")
            assert read.contents[0].text == "note tune for default"
            with pytest.raises(MCPError) as failed:
                await client.read_resource("echo://notes/missing")
            assert failed.value.code == -32099
            assert failed.value.data["errorCode"] == "OUT_OF_TUNE"
            assert failed.value.data["status"] == 422
            with pytest.raises(MCPError) as bad:  # its scheme, but no reader takes the URI
                await client.read_resource("echo://notes/UPPER")
            assert bad.value.data["errorCode"] == "INVALID_INPUT"

    run(check())
    server.close()


def test_instructions_come_from_the_toolsets_that_are_on(services: Services) -> None:
    only_echo = services.settings.model_copy(update={"toolsets": ["echo"]})
    echo_services = Services(
        only_echo,
        services.catalog,
        services.dispatcher,
        services.documents,
        services.qmd,
        services.proxy,
        services.keys,
    )
    server = build_mcp_server(echo_services, registry=(*REGISTRY, ECHO))

    async def check() -> str:
        async with Client(server) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert tools == {"echo_back"}
            return client.instructions or ""

    text = run(check())
    assert "ECHO PARAGRAPH" in text and "Toolsets on: echo." in text
    assert "searchDocuments" not in text  # no documents text when documents is off
    server.close()


def _common_errors() -> list[type[LdimsError]]:
    return [
        value
        for _, value in inspect.getmembers(ldims.errors, inspect.isclass)
        if issubclass(value, LdimsError)
    ]


@pytest.mark.parametrize("toolset", REGISTRY, ids=lambda toolset: toolset.name)
def test_every_error_of_every_toolset_has_a_rest_status_and_a_json_rpc_code(
    services: Services, toolset: Toolset
) -> None:
    server = build_mcp_server(services, registry=(toolset,)) if toolset.name != "sql" else None
    codes = server.rpc_codes if server else {**COMMON_RPC_CODES, **toolset.rpc_codes}
    for error in (*_common_errors(), *toolset.errors):
        assert 200 <= error.http_status <= 599, error
        assert error.code in codes, (toolset.name, error.code)
        code = codes[error.code]
        assert -32768 <= code <= -32000, (error.code, code)
        if error.http_status < 500:  # a caller's mistake is never "internal error"
            assert code != INTERNAL_ERROR, error.code
    if server:
        server.close()
