"""qmd's BM25: SQLite FTS5 beside the Whoosh index, so that the qmd toolset's ``search``
ranks as qmd 2.8.3 does — the same table (``filepath``, ``title``, ``body``; tokenizer
``porter unicode61``; Han, kana and Hangul runs spaced one character apart), the same column
weights (1.5, 4.0, 1.0), the same query syntax (every word a prefix, all required;
``"phrases"``; ``-negation``; hyphenated and dotted words) and the same 0..1 score,
``|bm25| / (1 + |bm25|)``.

One FTS5 table per tenant, so no statistic mixes two tenants' documents; a table of rows
maps each row to its document, tenant and collection (a delete knows only the id). The index
worker writes it in the same batches as Whoosh (:class:`~indexer.whoosh_index.Batch`), after
Whoosh's commit; searches open a read-only connection each, bounded in time by SQLite's
progress handler.

A row holds at most :data:`SEGMENT_CHARS` characters of a document: a longer document is
several rows (cut at line ends, a longer line in pieces), each with the number of its first
line, and a search ranks a document by its best row. Every document qmd's tests and most
notes hold is one row, ranked exactly as qmd ranks it; a 19 MB text is 190 rows, not one
19 MB row that a phrase search never finished and whose whole text every hit carried back.
(Across rows, every word of a query must be in one row to match.)
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import regex

from indexer.deadline import SearchOverdue
from indexer.model import QueryUnprocessable

FILE = "lexicon.sqlite3"
WEIGHTS = (1.5, 4.0, 1.0)  # filepath, title, body: qmd's bm25() weights
_CJK_CHAR = regex.compile(
    r"[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}]"
)
_CJK_RUN = regex.compile(
    r"[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}]+"
)
_NOT_TERM = regex.compile(r"[^\p{L}\p{N}'_]")
_HYPHENATED = regex.compile(r"^[\p{L}\p{N}][\p{L}\p{N}'-]*-[\p{L}\p{N}][\p{L}\p{N}'-]*$")
_DOTTED_PART = regex.compile(r"^[\p{L}\p{N}_]+$")
_SPACE = regex.compile(r"\s")
_STEPS_PER_CHECK = 1000  # SQLite VM steps between two looks at the clock
SEGMENT_CHARS = 100_000  # characters of a document in one row at most (see the module)
_ROWS = (
    "CREATE TABLE IF NOT EXISTS rows (rowid INTEGER PRIMARY KEY, document_id TEXT NOT NULL, "
    "tenant TEXT NOT NULL, collection TEXT NOT NULL, line_start INTEGER NOT NULL DEFAULT 1, "
    "body TEXT NOT NULL)"
)


@dataclass(frozen=True)
class LexicalHit:
    document_id: str
    bm25: float  # FTS5's (negative: lower is better)
    body: str  # the best row's text
    line_start: int = 1  # the number of its first line in the document

    @property
    def score(self) -> float:
        """qmd's 0..1 score."""
        return abs(self.bm25) / (1 + abs(self.bm25))


def qmd_title(title: str | None, path: str) -> str:
    """qmd's title of a file: its own (a Markdown heading, …), else its file name without the
    extension."""
    if title:
        return title
    name = path.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0] if "." in name[1:] else name
    return stem or name


def spaced_cjk(text: str) -> str:
    """Each run of Han, kana or Hangul characters spaced out (qmd's ``normalizeCjkForFTS``)."""
    return _CJK_RUN.sub(lambda run: " " + " ".join(run.group(0)) + " ", text)


def _term(word: str) -> str:
    return _NOT_TERM.sub("", word).lower()


def _dotted(word: str) -> bool:
    parts = word.split(".")
    return len(parts) >= 2 and all(part and _DOTTED_PART.match(part) for part in parts)


def _phrase(text: str) -> str:
    words = []
    for word in spaced_cjk(text).split():
        if _dotted(word):
            words += [term for part in word.split(".") if (term := _term(part))]
        elif term := _term(word):
            words.append(term)
    return " ".join(words)


def fts_query(text: str) -> str | None:
    """qmd's FTS5 query for ``text`` (its ``buildFTS5Query``); None: nothing to search for."""
    positive: list[str] = []
    negative: list[str] = []
    s, i = text.strip(), 0
    while i < len(s):
        while i < len(s) and _SPACE.match(s[i]):
            i += 1
        if i >= len(s):
            break
        negated = s[i] == "-"
        if negated:
            i += 1
        found: list[str] = []
        if i < len(s) and s[i] == '"':
            start = i + 1
            i += 1
            while i < len(s) and s[i] != '"':
                i += 1
            phrase = s[start:i].strip()
            i += 1
            if phrase and (cleaned := _phrase(phrase)):
                found = [f'"{cleaned}"']
        else:
            start = i
            while i < len(s) and not _SPACE.match(s[i]) and s[i] != '"':
                i += 1
            word = s[start:i]
            if _HYPHENATED.match(word):
                cleaned = " ".join(t for part in word.split("-") if (t := _term(part)))
                found = [f'"{cleaned}"'] if cleaned else []
            elif _dotted(word):
                parts = [f'"{t}"*' for part in word.split(".") if (t := _term(part))]
                found = ["(" + " AND ".join(parts) + ")"] if parts and negated else parts
            elif _CJK_CHAR.search(word):
                cleaned = _phrase(word)
                found = [f'"{cleaned}"'] if cleaned else []
            elif cleaned := _term(word):
                found = [f'"{cleaned}"*']
        (negative if negated else positive).extend(found)
    if not positive:
        return None
    query = " AND ".join(positive)
    for excluded in negative:
        query = f"{query} NOT {excluded}"
    return query


def _table(tenant: str) -> str:
    # Tenant names are [A-Za-z0-9_.-]: hashed anyway, so no name reaches the SQL as text.
    return "fts_" + hashlib.sha256(tenant.encode()).hexdigest()[:24]


class Lexicon:
    """The FTS5 tables of one index folder."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / FILE
        self._lock = threading.Lock()

    # --- whether it holds every document (see ldims.lifecycle.index) ---------------------------
    @property
    def complete(self) -> bool:
        """Whether the file holds every indexed document: it was rebuilt (or started with the
        index), or it is of a version that always wrote it. A file a writer had to create
        beside a full index is not."""
        if not self.path.exists():
            return False
        connection = self._connect(readonly=True)
        try:
            names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
            if "meta" not in names:
                return "rows" in names  # written before this flag: always with the index
            row = connection.execute("SELECT value FROM meta WHERE key = 'complete'").fetchone()
            return row is not None and row[0] == "1"
        finally:
            connection.close()

    def document_ids(self) -> set[str]:
        """The documents with rows (for ``ldims check``)."""
        if not self.path.exists():
            return set()
        connection = self._connect(readonly=True)
        try:
            if not connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'rows'").fetchone():
                return set()
            return {row[0] for row in connection.execute("SELECT DISTINCT document_id FROM rows")}
        finally:
            connection.close()

    def mark_complete(self) -> None:
        with self._lock:
            connection = self._connect(readonly=False)
            try:
                connection.execute("UPDATE meta SET value = '1' WHERE key = 'complete'")
                connection.commit()
            finally:
                connection.close()

    def drop(self) -> bool:
        """Remove the file (and SQLite's journal files); whether there was one."""
        with self._lock:
            existed = self.path.exists()
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    Path(f"{self.path}{suffix}").unlink()
            return existed

    # --- writing (the index worker) ------------------------------------------------------------
    @contextlib.contextmanager
    def writer(self) -> Iterator[LexiconWriter]:
        """One transaction of replaces and deletes (committed when the block ends)."""
        with self._lock:
            connection = self._connect(readonly=False)
            try:
                writer = LexiconWriter(connection)
                yield writer
                connection.commit()
            except BaseException:
                connection.rollback()
                raise
            finally:
                connection.close()

    # --- reading -------------------------------------------------------------------------------
    def search(
        self,
        tenant: str,
        text: str,
        limit: int,
        collection: str | None = None,
        within: float | None = None,
    ) -> list[LexicalHit]:
        """The ``limit`` best documents of ``tenant`` (of ``collection``) for qmd's query
        ``text``, best first (equal scores in the order they were written, as qmd's)."""
        query = fts_query(text)
        if query is None:
            raise QueryUnprocessable("The query has nothing to search for.")
        if not self.path.exists():
            return []
        table = _table(tenant)
        connection = self._connect(readonly=True)
        if within is not None:
            end = time.monotonic() + within
            connection.set_progress_handler(lambda: int(time.monotonic() > end), _STEPS_PER_CHECK)
        try:
            if not connection.execute(
                "SELECT 1 FROM sqlite_master WHERE name = ?", (table,)
            ).fetchone():
                return []
            scope = "AND r2.collection = ?" if collection else ""
            parameters: tuple[object, ...] = (
                (query, collection, limit) if collection else (query, limit)
            )
            line_start = "r.line_start" if _has_line_start(connection) else "1"
            # Each document by its best row (ties: the row written first, as qmd's files).
            found = connection.execute(
                f"SELECT r.document_id, m.s, r.body, {line_start} FROM ("
                "SELECT rid, s, ROW_NUMBER() OVER (PARTITION BY document_id ORDER BY s, rid) "
                "AS n FROM ("
                f"SELECT f.rowid AS rid, bm25({table}, {', '.join(map(str, WEIGHTS))}) AS s, "
                f"r2.document_id AS document_id FROM {table} AS f "
                f"JOIN rows AS r2 ON r2.rowid = f.rowid WHERE {table} MATCH ? {scope})"
                ") AS m JOIN rows AS r ON r.rowid = m.rid WHERE m.n = 1 ORDER BY m.s, m.rid "
                "LIMIT ?",
                parameters,
            ).fetchall()
        except sqlite3.OperationalError as exc:
            if "interrupted" in str(exc):
                raise SearchOverdue("the BM25 search ran out of time") from exc
            if "fts5" in str(exc).lower() or "syntax" in str(exc).lower():
                raise QueryUnprocessable(f"The query cannot be searched: {exc}") from exc
            raise
        finally:
            connection.close()
        return [
            LexicalHit(document_id, float(score), body, int(line))
            for document_id, score, body, line in found
        ]

    def _connect(self, readonly: bool) -> sqlite3.Connection:
        if readonly:
            uri = f"file:{self.path}?mode=ro"
            connection = sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)
            return connection
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=30)
        connection.execute("PRAGMA journal_mode=WAL")
        exists = connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'rows'").fetchone()
        if not connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
            # A file of an earlier version (rows, no flag) was always written with the index:
            # complete. A new one is not until a rebuild says so (mark_complete).
            connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            connection.execute("INSERT INTO meta VALUES ('complete', ?)", ("1" if exists else "0",))
            connection.commit()
        if exists and not _has_line_start(connection):
            # A file of one row per document: its rows kept (rowids too), the new columns added.
            connection.execute("ALTER TABLE rows RENAME TO rows_whole")
            connection.execute(_ROWS)
            connection.execute(
                "INSERT INTO rows (rowid, document_id, tenant, collection, line_start, body) "
                "SELECT rowid, document_id, tenant, collection, 1, body FROM rows_whole"
            )
            connection.execute("DROP TABLE rows_whole")
            connection.commit()
        connection.execute(_ROWS)
        connection.execute("CREATE INDEX IF NOT EXISTS rows_collection ON rows (collection)")
        connection.execute("CREATE INDEX IF NOT EXISTS rows_document ON rows (document_id)")
        return connection


class LexiconWriter:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        # Known per transaction only: a rebuild (ldims reindex) swaps the whole file.
        self._tables: set[str] = set()

    def _ensure(self, table: str) -> None:
        if table not in self._tables:
            self._connection.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING "
                "fts5(filepath, title, body, tokenize='porter unicode61')"
            )
            self._tables.add(table)

    def replace(
        self, document_id: str, tenant: str, collection: str, path: str, title: str, body: str
    ) -> None:
        """The document's rows (new rowids: a replaced document ranks after older ties, as a
        qmd file written later does), each of at most :data:`SEGMENT_CHARS` characters."""
        self.delete(document_id)
        table = _table(tenant)
        self._ensure(table)
        filepath, heading = spaced_cjk(f"{collection}/{path}"), spaced_cjk(title)
        for line_start, text in segments(body):
            cursor = self._connection.execute(
                "INSERT INTO rows (document_id, tenant, collection, line_start, body) "
                "VALUES (?, ?, ?, ?, ?)",
                (document_id, tenant, collection, line_start, text),
            )
            self._connection.execute(
                f"INSERT INTO {table} (rowid, filepath, title, body) VALUES (?, ?, ?, ?)",
                (cursor.lastrowid, filepath, heading, spaced_cjk(text)),
            )

    def delete(self, document_id: str) -> None:
        rows = self._connection.execute(
            "SELECT rowid, tenant FROM rows WHERE document_id = ?", (document_id,)
        ).fetchall()
        for rowid, tenant in rows:
            table = _table(tenant)
            self._ensure(table)
            self._connection.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
            self._connection.execute("DELETE FROM rows WHERE rowid = ?", (rowid,))


def segments(body: str, limit: int = SEGMENT_CHARS) -> Iterator[tuple[int, str]]:
    """``body`` in rows of at most ``limit`` characters, each with its first line's number:
    whole lines, a longer line in pieces (cut after a space when one is near the end).
    One row, the body itself, when it fits."""
    if len(body) <= limit:
        yield 1, body
        return
    start, line = 0, 1
    while start < len(body):
        end = min(len(body), start + limit)
        if end < len(body):
            newline = body.rfind("\n", start, end)
            if newline >= start:
                end = newline + 1  # whole lines
            else:  # one line longer than a row
                space = body.rfind(" ", start + limit // 2, end)
                end = space + 1 if space >= 0 else end
        text = body[start:end]
        yield line, text.removesuffix("\n")
        line += text.count("\n")
        start = end


def _has_line_start(connection: sqlite3.Connection) -> bool:
    columns = connection.execute("PRAGMA table_info(rows)").fetchall()
    return any(column[1] == "line_start" for column in columns)
