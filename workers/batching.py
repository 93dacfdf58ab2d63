"""Batches of a queue's tasks: the message Celery delivered, plus the ones waiting behind it.

Celery hands a worker one message at a time (prefetch 1, acks late). A batch stage (the index
writer, the extract workers; the embed stage of semantic search next) takes that message,
pulls the messages waiting in the same queue straight from the broker, one at a time as it
asks for them — up to a count, for at most a short wait when the queue runs dry — and
acknowledges each pulled one only after its outcome is recorded. Celery acknowledges the
delivered one when the task returns.

Why nothing is lost or doubled: a pulled message sits in the broker's unacknowledged set
exactly like a delivered one, so a worker killed mid-batch gives every message back (after
the visibility timeout); every task is keyed by document id and content hash and idempotent,
so the redelivery repeats no effect. Redis losing its queues (a restart without persistence)
loses messages, not documents: the catalog still says what each document needs, and the
reconciler re-drives it. The one queue a batch stage drains carries only that stage's task
(see :mod:`workers.celery_app`): a message of another kind would have no place in the batch.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from kombu import Connection
from kombu.message import Message

log = logging.getLogger(__name__)

# How often an empty queue is asked again while a batch waits for more.
_POLL_SECONDS = 0.02


def redelivered(delivery_info: dict[str, Any] | None) -> bool:
    """Whether kombu gave this message back once (its holder died, or the visibility timeout
    passed): the document's last attempt was interrupted (see ``pipeline.run_extract``)."""
    return bool((delivery_info or {}).get("redelivered"))


@dataclass
class Item:
    """One task of a batch: its arguments, its retries so far, and its broker message (None
    for the message Celery delivered, which Celery acknowledges)."""

    args: tuple[Any, ...]
    retries: int = 0
    message: Message | None = None
    # The broker gave the message back once (its holder died): see pipeline.run_extract.
    redelivered: bool = False
    # When a retry's countdown runs out (Celery's ``eta``): a pulled message is not held
    # back for it, as Celery's own consumer would.
    eta: datetime | None = None

    def due_in(self) -> float:
        """Seconds until this item may run (0 when it may now)."""
        if self.eta is None:
            return 0.0
        return max(0.0, (self.eta - datetime.now(UTC)).total_seconds())

    def acknowledge(self) -> bool:
        """Acknowledge a pulled message (its outcome is recorded); False when Redis is away
        (the message comes back, and its task finds nothing left to do)."""
        if self.message is None:
            return True
        try:
            self.message.ack()
        except Exception:
            log.warning("could not acknowledge a batched message; it will be redelivered")
            return False
        return True


@dataclass
class Batch:
    """The items of one batch, first the delivered one."""

    items: list[Item] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.items)

    def acknowledge(self) -> None:
        """Acknowledge the pulled messages (their outcomes are recorded); stops at the first
        that fails (Redis is away: the others come back too)."""
        all(item.acknowledge() for item in self.items)


class QueueDrain:
    """Pulls one queue's waiting messages for batches, on a connection of this process."""

    def __init__(self, app: Celery, queue: str, task_name: str) -> None:
        self.app = app
        self.queue = queue
        self.task_name = task_name
        self._connection: Connection | None = None
        self._pid = 0

    def pull(self, count: int, wait_seconds: float = 0.0) -> Iterator[Item]:
        """Up to ``count`` waiting messages, one at a time as the caller asks for the next
        (what it does not ask for stays in the queue for other workers), waiting at most
        ``wait_seconds`` for more once the queue is empty.

        A broker error ends the pulling: the items are what was pulled so far.
        """
        pulled = 0
        try:
            for item in self._pull(count, time.monotonic() + wait_seconds):
                pulled += 1
                yield item
        except Exception:
            log.warning("could not pull more messages from %s after %d", self.queue, pulled)
            self.close()

    def _pull(self, count: int, wait_until: float) -> Iterator[Item]:
        pulled = 0
        channel = self._channel()
        while pulled < count:
            message = channel.basic_get(queue=self.queue, no_ack=False)
            if message is None:
                if time.monotonic() >= wait_until:
                    return
                time.sleep(_POLL_SECONDS)
                continue
            item = self._item(message)
            if item is None:
                continue
            pulled += 1
            yield item

    def _item(self, message: Message) -> Item | None:
        headers = message.headers or {}
        if headers.get("task") != self.task_name:
            # Only this task is routed here; anything else is sent back for a worker to run.
            log.warning("unexpected task %s in queue %s", headers.get("task"), self.queue)
            message.reject(requeue=True)
            return None
        args, _kwargs, _embed = message.payload
        eta = headers.get("eta")
        return Item(
            tuple(args),
            int(headers.get("retries") or 0),
            message,
            redelivered(message.delivery_info),
            datetime.fromisoformat(eta) if eta else None,
        )

    def _channel(self) -> Any:
        # A connection per process: the pool child forked from the worker must not share the
        # parent's socket.
        if self._connection is None or self._pid != os.getpid():
            self._connection = self.app.connection_for_read()
            self._pid = os.getpid()
        return self._connection.default_channel

    def close(self) -> None:
        if self._connection is not None and self._pid == os.getpid():
            try:
                self._connection.close()
            except Exception:
                log.debug("closing the drain connection failed", exc_info=True)
        self._connection = None
