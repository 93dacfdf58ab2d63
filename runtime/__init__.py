"""The composition root of LDIMS: builds the services and the apps, and the ``ldims`` command.

It is the only package that imports the adapters (``api``) together with the cores and the
workers; nothing imports it back (``make test`` checks the import contracts).
"""

from runtime.services import build_services, create_app

__all__ = ["build_services", "create_app"]
