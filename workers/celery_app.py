"""The Celery application: queues ``extract``, ``extract-single``, ``index``,
``index-single``, ``embed`` and ``ocr``, at-least-once delivery.

``extract`` carries only the documents to extract: an extract task takes the ones waiting
behind it too (:mod:`workers.batching`); ``extract-single`` carries webhook downloads and
documents retried after a backoff, and extract workers consume both. ``index`` carries only
the documents to index, which the index worker writes in batches; ``index-single`` carries
the writer's other work, one task at a time: a document retried alone, deletes, the
scheduled optimize and reconciler. The index worker consumes both. ``embed`` and ``ocr``
have workers of their own, at a lower CPU priority: vectors, and the files an extract worker
found to need text recognition.

Tasks are acknowledged late and rejected back to the queue when their worker dies, so a
killed worker loses nothing; every task is idempotent (keyed by document id + content
hash), which makes a second delivery harmless. ``celery -A workers.celery_app`` (Flower)
uses the module-level :data:`app`.

Logging is ours, not Celery's: the worker, its pool children and the embedded beat write
through :func:`ldims.logs.setup_logging`, and every line logged inside a task carries the
task id.
"""

from __future__ import annotations

import logging
import signal
from contextvars import Token
from datetime import timedelta
from typing import Any

from celery import Celery, signals
from kombu import Exchange, Queue

from ldims.child_processes import die_with_parent
from ldims.logs import request_id, setup_logging
from ldims.settings import Settings, get_settings
from workers.queues import (
    EMBED_QUEUE,
    EXTRACT_QUEUE,
    EXTRACT_SINGLE_QUEUE,
    INDEX_QUEUE,
    INDEX_SINGLE_QUEUE,
    OCR_QUEUE,
)


def kombu_url(redis_url: str) -> str:
    """redis-py's ``unix://`` URLs are ``redis+socket://`` to kombu."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    return redis_url


def make_celery(settings: Settings) -> Celery:
    app = Celery("ldims", broker=kombu_url(settings.effective_redis_url), include=["workers.tasks"])
    transport_options: dict[str, object] = {
        "visibility_timeout": settings.broker_visibility_timeout_seconds,
        "socket_connect_timeout": 2,
        "socket_timeout": 10,
        "retry_on_timeout": True,
    }
    if settings.redis_key_prefix:
        transport_options["global_keyprefix"] = settings.redis_key_prefix
    app.conf.update(
        # Each queue on its own direct exchange: no cross-binding between them.
        task_queues=tuple(
            Queue(name, Exchange(name, type="direct"), routing_key=name)
            for name in (
                EXTRACT_QUEUE,
                EXTRACT_SINGLE_QUEUE,
                INDEX_QUEUE,
                INDEX_SINGLE_QUEUE,
                EMBED_QUEUE,
                OCR_QUEUE,
            )
        ),
        task_default_queue=EXTRACT_QUEUE,
        task_routes={
            "ldims.fetch": {"queue": EXTRACT_SINGLE_QUEUE},
            "ldims.index": {"queue": INDEX_QUEUE},
            "ldims.embed": {"queue": EMBED_QUEUE},
            "ldims.ocr": {"queue": OCR_QUEUE},
            "ldims.index_one": {"queue": INDEX_SINGLE_QUEUE},
            "ldims.delete_from_index": {"queue": INDEX_SINGLE_QUEUE},
            "ldims.reindex_documents": {"queue": INDEX_SINGLE_QUEUE},
            "ldims.reconcile": {"queue": INDEX_SINGLE_QUEUE},
            "ldims.optimize_index": {"queue": INDEX_SINGLE_QUEUE},
        },
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_soft_time_limit=settings.task_soft_time_limit_seconds,
        task_time_limit=settings.task_time_limit_seconds,
        worker_prefetch_multiplier=1,
        worker_max_memory_per_child=settings.worker_max_memory_mib * 1024,
        # Flower follows a task from the worker's events (received, started, succeeded…).
        # The producer's own "sent" event cost a fifth of every publish (~0.4 ms of each
        # upload and of each extract task); the backlog is the queue length on Flower's
        # Broker page.
        worker_send_task_events=True,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options=transport_options,
        # Publishing while Redis is down must fail fast: the API answers 503 instead.
        task_publish_retry_policy={
            "max_retries": 2,
            "interval_start": 0,
            "interval_step": 0.2,
            "interval_max": 0.5,
        },
        beat_schedule={
            "reconcile": {
                "task": "ldims.reconcile",
                "schedule": timedelta(seconds=settings.reconcile_interval_seconds),
            },
            "optimize_index": {
                "task": "ldims.optimize_index",
                "schedule": timedelta(seconds=settings.index_optimize_interval_seconds),
            },
        },
    )
    return app


app = make_celery(get_settings())


@signals.worker_process_init.connect
def _die_with_the_worker(**_: Any) -> None:
    # A pool process whose worker was killed (kill -9, the OOM killer) would idle, orphaned,
    # for good; its unacknowledged task is redelivered to the next worker anyway.
    die_with_parent(signal.SIGKILL)


@signals.beat_embedded_init.connect
def _beat_dies_with_the_worker(**_: Any) -> None:
    # The reconciler's schedule (``--beat``) is a process of its own too; SIGTERM lets it save
    # its schedule file first.
    die_with_parent(signal.SIGTERM)


@signals.setup_logging.connect
def _log_our_way(loglevel: int, **_: Any) -> None:
    """Our handler and format instead of Celery's (a receiver here makes Celery keep off).

    Celery's own set-up would give its task loggers a handler of their own, in its own
    format, without our request id.
    """
    setup_logging(loglevel)
    logging.getLogger("celery.app.trace").addFilter(_not_an_expected_failure)


def _not_an_expected_failure(record: logging.LogRecord) -> bool:
    """Drop Celery's "raised expected" line: those tasks log their failure themselves.

    ``workers.tasks.PipelineTask`` declares the document failures as ``throws``; recording
    one logs a line with the document id and code. Celery's line would repeat it with the
    error's message, which may name parts of the document.
    """
    # Celery hands its log context to handlers as ``extra={"data": ...}``.
    data = getattr(record, "data", None)
    return not (isinstance(data, dict) and data.get("description") == "raised expected")


# The tokens of the ids bound by running tasks, so each task's end restores what was before.
_bound: dict[str, Token[str | None]] = {}


@signals.task_prerun.connect
def _bind_task_id(task_id: str, **_: Any) -> None:
    _bound[task_id] = request_id.set(task_id)


@signals.task_postrun.connect
def _unbind_task_id(task_id: str, **_: Any) -> None:
    token = _bound.pop(task_id, None)
    if token is not None:
        request_id.reset(token)
