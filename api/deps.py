"""Request dependencies of the REST routes: the process's services and the caller."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from ldims.caller import Caller, resolve_caller
from ldims.documents import Documents
from ldims.services import Services


def get_services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


def get_caller(request: Request, services: Annotated[Services, Depends(get_services)]) -> Caller:
    """The caller, resolved once per request (FastAPI caches a dependency per request)."""
    return resolve_caller(request.headers, services.settings, services.keys)


def get_documents(services: Annotated[Services, Depends(get_services)]) -> Documents:
    return services.documents


ServicesDep = Annotated[Services, Depends(get_services)]
CallerDep = Annotated[Caller, Depends(get_caller)]
DocumentsDep = Annotated[Documents, Depends(get_documents)]


def _scoped(scope: str) -> Callable[..., Caller]:
    def caller_with_scope(caller: CallerDep) -> Caller:
        """The caller, when its key has ``scope``; else 403 ``FORBIDDEN``."""
        caller.require(scope)
        return caller

    return caller_with_scope


# search, list, read whole documents: never granted by the 'proxy' scope alone
ReaderDep = Annotated[Caller, Depends(_scoped("read"))]
IngestDep = Annotated[Caller, Depends(_scoped("ingest"))]  # upload, delete
