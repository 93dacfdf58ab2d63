"""The pipeline's workers: extraction, indexing, embedding, URL fetching and reconciliation on
Celery.

Producers (the API, the CLI) use :class:`Dispatcher` to queue work and the read-side
helpers below; the tasks themselves live in ``workers.tasks`` and run in worker processes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.backlog import EmbedBacklog, EmbedRates, embedding_backlog
    from workers.dispatch import Dispatcher
    from workers.extraction import (
        detect_format,
        extract_file,
        self_check,
    )
    from workers.fetch import check_url

# Loaded when first asked for: a module of the package (``workers.queues``, say) is then
# imported without the extractors, Celery and NumPy (the CLI's start-up).
_WHERE = {
    "Dispatcher": "workers.dispatch",
    "EmbedBacklog": "workers.backlog",
    "EmbedRates": "workers.backlog",
    "check_url": "workers.fetch",
    "detect_format": "workers.extraction",
    "embedding_backlog": "workers.backlog",
    "extract_file": "workers.extraction",
    "self_check": "workers.extraction",
}

__all__ = [
    "Dispatcher",
    "EmbedBacklog",
    "EmbedRates",
    "check_url",
    "detect_format",
    "embedding_backlog",
    "extract_file",
    "self_check",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'workers' has no attribute {name!r}")
