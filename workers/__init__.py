"""The pipeline's workers: extraction, indexing, URL fetching and reconciliation on Celery.

Producers (the API, the CLI) use :class:`Dispatcher` to queue work and the read-side
helpers below; the tasks themselves live in ``workers.tasks`` and run in worker processes.
"""

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
    "ExtractStore",
    "ExtractionResult",
    "Page",
    "Section",
    "check_url",
    "detect_format",
    "extract_file",
    "self_check",
]
