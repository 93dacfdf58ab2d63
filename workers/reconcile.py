"""The reconciler: re-drives documents that stopped moving (its sweep of orphans in the
index and the vectors is :mod:`workers.consistency`'s, run by ``ldims.reconcile``).

A document can stall when a worker dies and its message waits out the visibility
timeout, when Redis lost a queued message (the embedded one is persisted, a production
one may not be) or when the API recorded an upload but could not publish its task.
Documents queued or processing without progress for ``stuck_after_seconds`` are sent
again to the stage they need; after ``max_attempts`` they end ``failed``. A document
waiting in line (queued, handed to the OCR workers, or extracted and waiting for the index)
while its stage queue still holds messages is not stuck: it is left alone until that queue
drains or it has waited a whole visibility timeout. A document being extracted is kept fresh
by its holder's heartbeats; when the holder dies the broker gives its message back
(redelivered), and a lost message is re-driven here once the heartbeats stop.
"""

from __future__ import annotations

import logging
from collections.abc import Set
from dataclasses import dataclass, field
from datetime import timedelta

from ldims.catalog import DocumentStatus, repository, utcnow
from ldims.lifecycle import states
from workers.celery_app import EXTRACT_QUEUE, INDEX_QUEUE
from workers.pipeline import Runtime
from workers.queues import OCR_QUEUE

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    """What one pass decided: tasks to send and documents given up on."""

    fetch: list[tuple[str, str]] = field(default_factory=list)
    extract: list[tuple[str, str]] = field(default_factory=list)
    ocr: list[tuple[str, str]] = field(default_factory=list)
    index: list[tuple[str, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    orphans_removed: int = 0


def find_stuck(rt: Runtime, busy_queues: Set[str] = frozenset()) -> ReconcileReport:
    """Decide what to do with stalled documents and record it in the catalog.

    ``busy_queues`` names the queues that still hold messages: their documents wait.
    """
    report = ReconcileReport()
    cutoff = utcnow() - timedelta(seconds=rt.settings.stuck_after_seconds)
    patience = utcnow() - timedelta(seconds=rt.settings.broker_visibility_timeout_seconds)
    with rt.catalog.session() as session:
        for document in repository.stuck_documents(session, cutoff):
            extracted = document.sha256 is not None and rt.extracts.exists(
                document.sha256, document.format or ""
            )
            # Waiting in line (queued, or extracted and waiting for the index) while that
            # queue still holds messages: not stuck — unless it has waited implausibly long.
            waiting = document.status == DocumentStatus.QUEUED.value or extracted
            # Handed to the OCR workers: their queue, while they are running.
            ocr = document.waiting_for_ocr and rt.settings.ocr_queue_enabled
            queue = INDEX_QUEUE if extracted else OCR_QUEUE if ocr else EXTRACT_QUEUE
            if waiting and queue in busy_queues and document.status_changed_at > patience:
                continue
            if document.attempts >= rt.settings.max_attempts:
                states.fail(
                    session,
                    document.id,
                    document.sha256,
                    "WORKER_LOST",
                    f"No progress after {document.attempts} attempts; giving up.",
                )
                report.failed.append(document.id)
                continue
            if document.sha256 is None:
                if document.source_url:
                    report.fetch.append((document.id, document.source_url))
            elif extracted:
                # The index stage does not count attempts itself: count its re-drives here.
                states.count_attempt(document)
                report.index.append((document.id, document.sha256))
            else:
                (report.ocr if ocr else report.extract).append((document.id, document.sha256))
                # Back in line: the re-sent task must not take it for one a live worker holds.
                states.requeue(document, keep_attempts=True)
            states.redriven(document)
    redriven = len(report.fetch) + len(report.extract) + len(report.ocr) + len(report.index)
    if redriven or report.failed:
        log.warning(
            "reconciler: re-driving %d documents, %d given up", redriven, len(report.failed)
        )
    return report
