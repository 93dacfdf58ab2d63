"""The composition root of LDIMS: builds the services and the apps, and the ``ldims`` command.

It is the only package that imports the adapters (``api``) together with the cores and the
workers; nothing imports it back (``make test`` checks the import contracts).

``build_services`` and ``create_app`` are loaded when first asked for: a command of the CLI
that needs neither (``ldims --help``, ``status``, ``update``) does not import the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.services import build_services, create_app

__all__ = ["build_services", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from runtime import services

        return getattr(services, name)
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
