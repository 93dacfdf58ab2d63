"""The proxy toolset's audit trail (seed §8.4): one record per call — tool, document, tenant,
user, key, tokens and bytes returned, rate-limit state, masked counts, trace id, outcome,
latency — to the ``ldims.proxy.audit`` log at once and to the catalog's ``audit_records``
table. Never the text, never the query.

Catalog rows are written by one background thread in batches (every ``flush_seconds`` or
``batch`` records), so a call does not wait for a commit, and eight clients do not queue on
SQLite's one writer. ``flush()`` writes what is pending (tests, shutdown).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select

from ldims.catalog import Catalog
from ldims.catalog.models import AuditRecord

log = logging.getLogger("ldims.proxy.audit")


@dataclass(frozen=True)
class AuditEntry:
    tenant: str
    tool: str
    outcome: str  # "ok" or the error code
    transport: str
    doc_id: str | None = None
    user_id: str | None = None
    key_id: str | None = None
    trace_id: str | None = None
    tokens: int = 0
    bytes: int = 0
    masked: dict[str, int] = field(default_factory=dict)
    rate_state: dict[str, object] = field(default_factory=dict)
    latency_ms: float = 0.0
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


class AuditTrail:
    def __init__(self, catalog: Catalog, flush_seconds: float = 0.5, batch: int = 200) -> None:
        self.catalog = catalog
        self.flush_seconds = flush_seconds
        self.batch = batch
        self._queue: queue.Queue[AuditEntry] = queue.Queue(maxsize=100_000)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def record(self, entry: AuditEntry) -> None:
        """Log ``entry`` now; queue it for the catalog."""
        fields = asdict(entry)
        fields["at"] = entry.at.isoformat()
        log.info("proxy call %s", json.dumps(fields, ensure_ascii=False, sort_keys=True))
        try:
            self._queue.put_nowait(entry)
        except queue.Full:  # the catalog is far behind: the log line is the record
            log.warning("audit queue full: a record went to the log only")
        self._start()

    def flush(self) -> None:
        """Write every queued record now."""
        with self._lock:
            self._write(self._drain())

    def query(
        self,
        tenant: str | None = None,
        since: datetime | None = None,
        tool: str | None = None,
        doc_id: str | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Records, newest first, filtered (``ldims audit``)."""
        self.flush()
        statement = select(AuditRecord).order_by(AuditRecord.id.desc()).limit(limit)
        if tenant:
            statement = statement.where(AuditRecord.tenant == tenant)
        if since:
            statement = statement.where(AuditRecord.at >= since)
        if tool:
            statement = statement.where(AuditRecord.tool == tool)
        if doc_id:
            statement = statement.where(AuditRecord.doc_id == doc_id)
        with self.catalog.session() as session:
            rows = list(session.scalars(statement))
            session.expunge_all()
            return rows

    # --- the writer thread ----------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="audit", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=60)
            except queue.Empty:
                return  # idle: the next record starts a writer again
            entries = [first, *self._drain(self.batch - 1)]
            with self._lock:
                try:
                    self._write(entries)
                except Exception:  # the catalog down: the log lines stay the record
                    log.exception("audit records lost to a catalog error (%d)", len(entries))
            threading.Event().wait(self.flush_seconds)

    def _drain(self, most: int = 1_000_000) -> list[AuditEntry]:
        out: list[AuditEntry] = []
        while len(out) < most:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return out

    def _write(self, entries: Sequence[AuditEntry]) -> None:
        if not entries:
            return
        with self.catalog.session() as session:
            session.add_all(
                AuditRecord(
                    at=entry.at,
                    tenant=entry.tenant,
                    user_id=entry.user_id,
                    key_id=entry.key_id,
                    transport=entry.transport,
                    tool=entry.tool,
                    doc_id=entry.doc_id,
                    trace_id=entry.trace_id,
                    outcome=entry.outcome,
                    tokens=entry.tokens,
                    bytes=entry.bytes,
                    masked=json.dumps(entry.masked) if entry.masked else None,
                    rate_state=json.dumps(entry.rate_state) if entry.rate_state else None,
                    latency_ms=round(entry.latency_ms, 3),
                )
                for entry in entries
            )
            session.commit()
