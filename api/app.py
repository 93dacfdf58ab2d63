"""The FastAPI application: REST routes, the error handlers, and the MCP server at ``/mcp``
(and, when on, its legacy SSE transport at ``/sse``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from api.body_limits import BodyLimits
from api.deps import ReaderDep
from api.errors import install_error_handlers, without_validation_422
from api.mcp import build_mcp_server, mcp_http_routes
from api.mcp.build import http_authenticator
from api.mcp.sse import mcp_sse_routes
from api.request_ids import RequestIds
from api.routes import documents, health, proxy, search, webhooks
from ldims import __version__
from ldims.semantic import embedder_for
from ldims.services import Services

log = logging.getLogger(__name__)


def _load_embedder(services: Services) -> None:
    try:
        embedder_for(services.settings)
    except Exception:  # searches fall back to keywords and say why; the API still starts
        log.warning("the embedding model could not be loaded", exc_info=True)


def build_app(services: Services, migrate: bool = True) -> FastAPI:
    """The API over ``services``; ``migrate`` brings the catalog schema up to date at start-up."""
    mcp_server = build_mcp_server(services)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if migrate:
            services.catalog.upgrade()
        # The embedding model before the first request: the onnx engine takes ~1-2 s to load
        # (its vocabulary and graph), which the first search would otherwise wait for.
        await asyncio.to_thread(_load_embedder, services)
        async with mcp_server.session_manager.run():
            yield
        mcp_server.close()
        services.close()

    # The OpenAPI schema and its pages are routes of our own: with API keys on they need one.
    app = FastAPI(
        title="LDIMS",
        version=__version__,
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )

    def declared_openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = without_validation_422(FastAPI.openapi(app))
        return app.openapi_schema

    app.openapi = declared_openapi  # type: ignore[method-assign]

    @app.get("/openapi.json", include_in_schema=False)
    def openapi(_caller: ReaderDep) -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def docs(_caller: ReaderDep) -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="LDIMS API")

    app.state.services = services
    app.state.mcp = mcp_server
    install_error_handlers(app)
    app.include_router(documents.router)
    app.include_router(webhooks.router)
    app.include_router(search.router)
    app.include_router(health.router)
    app.include_router(proxy.router)
    # The MCP app is one route (/mcp) without middleware: taking the route rather than
    # mounting the app at "/" keeps FastAPI's own 404 (in the seed's shape) for other paths.
    # It goes first: matching a request against every API route before it cost each MCP call
    # a tenth of the server's time (measured).
    app.router.routes[0:0] = mcp_http_routes(mcp_server)
    if services.settings.sse_enabled:  # the legacy transport, for clients without /mcp
        sse_routes, app.state.sse_sessions = mcp_sse_routes(
            mcp_server, http_authenticator(mcp_server)
        )
        app.router.routes[1:1] = sse_routes
    # Inside RequestIds (added last, so outermost): a 413 carries its request id too.
    app.add_middleware(BodyLimits, settings=services.settings)
    app.add_middleware(RequestIds)
    return app
