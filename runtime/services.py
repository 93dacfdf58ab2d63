"""Service wiring: settings → catalog, broker, documents core → the API and MCP servers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ldims.catalog import Catalog
from ldims.documents import Documents
from ldims.keys import KeyRing
from ldims.proxy import build_proxy
from ldims.qmd import Qmd
from ldims.services import Services
from ldims.settings import Settings, get_settings
from workers import Dispatcher

if TYPE_CHECKING:
    from fastapi import FastAPI


def build_services(settings: Settings) -> Services:
    """The process's services (the catalog's schema is not touched here)."""
    catalog = Catalog(settings.catalog_url)
    dispatcher = Dispatcher(settings)
    documents = Documents(settings, catalog, dispatcher)
    return Services(
        settings=settings,
        catalog=catalog,
        dispatcher=dispatcher,
        documents=documents,
        qmd=Qmd(settings, catalog, documents),
        proxy=build_proxy(
            settings,
            catalog,
            lambda: documents.index,
            documents.search.admission.slot,  # the same shares as every search
            documents.search.query_vector,
        ),
        keys=KeyRing(settings, catalog),
    )


def create_app(settings: Settings | None = None, migrate: bool = True) -> FastAPI:
    """The REST + MCP app; ``migrate`` brings the catalog schema up to date at start-up. (The
    API is imported here: the CLI's qmd commands build the services alone, without it.)"""
    from api import build_app

    return build_app(build_services(settings or get_settings()), migrate=migrate)
