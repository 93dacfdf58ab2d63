"""The FastAPI application factory."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from api.deps import Services
from api.errors import install_error_handlers
from api.ingestion import IngestionService
from api.routes import documents, health, search, webhooks
from ldims import __version__
from ldims.catalog import Catalog
from ldims.settings import Settings, get_settings
from workers import Dispatcher


def build_services(settings: Settings) -> Services:
    catalog = Catalog(settings.catalog_url)
    dispatcher = Dispatcher(settings)
    return Services(
        settings=settings,
        catalog=catalog,
        dispatcher=dispatcher,
        ingestion=IngestionService(settings, catalog, dispatcher),
    )


def create_app(settings: Settings | None = None, migrate: bool = True) -> FastAPI:
    """The API; ``migrate`` brings the catalog schema up to date at start-up."""
    settings = settings or get_settings()
    services = build_services(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if migrate:
            services.catalog.upgrade()
        yield
        services.dispatcher.close()
        services.catalog.dispose()

    app = FastAPI(title="LDIMS", version=__version__, lifespan=lifespan)
    app.state.services = services
    install_error_handlers(app)
    app.include_router(documents.router)
    app.include_router(webhooks.router)
    app.include_router(search.router)
    app.include_router(health.router)
    return app
