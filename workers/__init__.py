"""The pipeline's workers: extraction, indexing, embedding, URL fetching and reconciliation on
Celery.

Producers (the API, the CLI) use :class:`Dispatcher` to queue work and the read-side
helpers below; the tasks themselves live in ``workers.tasks`` and run in worker processes.
"""

from workers.backlog import EmbedBacklog, EmbedRates, embedding_backlog
from workers.dispatch import Dispatcher
from workers.extraction import (
    ExtractionResult,
    Page,
    Section,
    detect_format,
    extract_file,
    self_check,
)
from workers.extracts import ExtractStore
from workers.fetch import check_url

__all__ = [
    "Dispatcher",
    "EmbedBacklog",
    "EmbedRates",
    "ExtractStore",
    "ExtractionResult",
    "Page",
    "Section",
    "check_url",
    "detect_format",
    "embedding_backlog",
    "extract_file",
    "self_check",
]
