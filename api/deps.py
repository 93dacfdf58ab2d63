"""Request dependencies: the process's services and the caller's tenant."""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from api.ingestion import IngestionService
from indexer import DocumentIndex
from ldims.catalog import Catalog
from ldims.errors import InvalidInput, Unauthorized
from ldims.settings import Settings
from workers import Dispatcher

TENANT_HEADER = "X-LDIMS-Tenant"
_TENANT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass
class Services:
    """Long-lived objects of one API process, built in the app factory."""

    settings: Settings
    catalog: Catalog
    dispatcher: Dispatcher
    ingestion: IngestionService

    @functools.cached_property
    def index(self) -> DocumentIndex:
        """The index, opened once per process (its searchers refresh on their own)."""
        return DocumentIndex(self.settings.index_dir)


def get_services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


def get_tenant(request: Request, services: Annotated[Services, Depends(get_services)]) -> str:
    """The caller's tenant (see :func:`tenant_from_headers`)."""
    return tenant_from_headers(request.headers, services.settings)


def tenant_from_headers(headers: Mapping[str, str], settings: Settings) -> str:
    """The caller's tenant: from its API key when keys are configured, else from a header.

    ``headers`` must look names up case-insensitively (Starlette's ``Headers`` does), or
    hold them in lower case.
    """
    keys = settings.api_keys
    if keys:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("Send 'Authorization: Bearer <API key>'.")
        digest = hashlib.sha256(token.encode()).hexdigest()
        for known, tenant in keys.items():
            if hmac.compare_digest(known, digest):
                return tenant
        raise Unauthorized("Unknown API key.")
    tenant = headers.get(TENANT_HEADER.lower(), settings.default_tenant)
    if not _TENANT.match(tenant):
        raise InvalidInput("Bad tenant name.", field=TENANT_HEADER)
    return tenant


ServicesDep = Annotated[Services, Depends(get_services)]
Tenant = Annotated[str, Depends(get_tenant)]
