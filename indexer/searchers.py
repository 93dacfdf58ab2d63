"""The searchers of one index folder: a pool, so that searches of several threads run at once.

A Whoosh searcher must never be used by two threads at once (its readers share file
positions), and one searcher behind one lock made every search of a process wait for the one
before it: eight slow searches held a 3 ms one for 35 s. Here each search takes a searcher of
its own:

* Searchers are pooled per *generation* (one commit of the folder, named by the folder's inode
  and the commit's number). A search takes an idle searcher of the latest generation, or
  opens one (file reads) when none is idle.
* When a commit lands, the next search to open a searcher starts a new generation: the old
  generation's idle searchers are closed at once, its busy ones when their searches return
  them. A folder swapped in by ``replace_folder`` (``ldims reindex``) is a new generation too,
  with a fresh :class:`~indexer.postings.PostingStore` (the old folder's arrays are dropped).
* At most ``max_idle`` searchers wait idle; more are opened under load and closed on return,
  up to ``max_open`` in all (then a search waits for one to come back, up to its deadline).
* Searchers are opened by one thread at a time: the order of openings is then the order of
  commits, so a new generation is always the latest, and a burst of searches after a commit
  reads the table of contents and segments once rather than once per thread. A search that
  finds an idle searcher never waits for an opening.

The searches of one generation share its :class:`~indexer.evaluate.CommitCaches`; each
searcher carries a :class:`~indexer.evaluate.Snapshot` over them. ``wait=False`` (a search on
an event loop) never opens a searcher: it takes an idle one of the latest generation or raises
:class:`SearcherBusy`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from indexer.deadline import CheckedSearcher, SearchOverdue, remaining
from indexer.evaluate import CommitCaches, Snapshot
from indexer.mapped import MappedStorage
from indexer.model import SearcherBusy
from indexer.postings import PostingStore
from indexer.scoring import weighting

log = logging.getLogger(__name__)

# Idle searchers kept: as many as searches usually run at once (a searcher maps each segment's
# file; opening one costs under a millisecond a segment, see indexer.mapped).
MAX_IDLE_SEARCHERS = 8
# Searchers open at once, idle or busy: past this a search waits for one to come back. Far
# above the searches a process runs at once (the GIL runs one at a time anyway); it bounds
# what a burst can open. ``max_open=1`` is the single searcher of old (one search at a time).
MAX_OPEN_SEARCHERS = 64

# (folder inode, commit generation)
_Key = tuple[int, int]


@dataclass(eq=False)
class _Generation:
    """The searchers of one commit, and what their searches share."""

    key: _Key
    caches: CommitCaches
    idle: list[Snapshot] = field(default_factory=list)
    retired: bool = False  # a later commit is current: searchers returned are closed


class SearcherPool:
    """Searchers of the latest commit of one index folder, one per concurrent search."""

    def __init__(
        self,
        path: Path,
        max_idle: int = MAX_IDLE_SEARCHERS,
        max_open: int = MAX_OPEN_SEARCHERS,
    ) -> None:
        self.path = path
        self.max_idle = min(max_idle, max_open)
        self.max_open = max_open
        # Guards the fields below (never held over a file read).
        self._lock = threading.Lock()
        self._current: _Generation | None = None
        self._open = 0  # idle and busy, of every generation (and slots taken to open one)
        self._returned = threading.Condition(self._lock)  # a searcher came back or closed
        # Held while opening a searcher (file reads); guards the index, store and identity.
        self._opening = threading.Lock()
        self._index = MappedStorage(path).open_index()
        self._identity = self._folder_identity()
        self._store = PostingStore()

    @property
    def open_searchers(self) -> int:
        """Searchers open now, idle or in use."""
        return self._open

    @contextlib.contextmanager
    def snapshot(self, wait: bool = True) -> Iterator[Snapshot]:
        """A searcher of the latest commit (with its view of the shared caches), for this
        thread alone during the block. ``wait=False``: :class:`SearcherBusy` rather than
        opening one; otherwise waiting to open one keeps to the search's deadline."""
        generation, snapshot = self._take(wait)
        try:
            yield snapshot
        finally:
            self._give_back(generation, snapshot)

    def latest_key(self) -> _Key:
        """Which commit is the latest (a stat and a directory listing)."""
        return self._folder_identity(), self._index.latest_generation()

    def _take(self, wait: bool) -> tuple[_Generation, Snapshot]:
        key = self.latest_key()
        with self._lock:
            taken = self._idle_of(key)
        if taken is not None:
            return taken
        if not wait:
            raise SearcherBusy("no idle searcher of the latest commit: one must be opened")
        left = remaining()  # a search with a deadline waits no longer than that
        if not self._opening.acquire(timeout=-1 if left is None else left):
            raise SearchOverdue
        try:
            return self._take_or_open()
        finally:
            self._opening.release()

    def _take_or_open(self) -> tuple[_Generation, Snapshot]:
        """Holding ``_opening``: an idle searcher of the latest commit (another thread may
        have given one back meanwhile), else a new one once fewer than ``max_open`` are open
        (waiting for one to come back no longer than the search's deadline)."""
        while True:
            key = self.latest_key()
            with self._lock:
                stale = self._retire_stale(key)
                if not stale:
                    taken = self._idle_of(key)
                    if taken is not None:
                        return taken
                    if self._open < self.max_open:
                        self._open += 1  # the slot of the searcher opened below
                        break
                    if not self._returned.wait(remaining()):  # None: no deadline
                        raise SearchOverdue
                    continue
            self._close_all(stale)  # slots freed: look again
        try:
            return self._open_searcher()
        except BaseException:
            with self._lock:
                self._open -= 1
                self._returned.notify()
            raise

    def _idle_of(self, key: _Key) -> tuple[_Generation, Snapshot] | None:
        """Under the lock: an idle searcher of commit ``key``, taken from the pool."""
        current = self._current
        if current is None or current.key != key or not current.idle:
            return None
        return current, current.idle.pop()

    def _retire_stale(self, key: _Key) -> list[Snapshot]:
        """Under the lock: retire the current generation if ``key`` is a later commit (its
        idle searchers, returned for closing, would only hold slots)."""
        current = self._current
        if current is None or current.key == key:
            return []
        self._current = None
        return self._retire(current)

    def _open_searcher(self) -> tuple[_Generation, Snapshot]:
        """Open a searcher of the latest commit (holding ``_opening`` and a slot)."""
        identity = self._folder_identity()
        if identity != self._identity:
            # `ldims reindex` swapped in a rebuilt folder: its segments are all new.
            log.info("index folder %s was replaced: reopening it", self.path)
            self._index = MappedStorage(self.path).open_index()
            self._identity = identity
            self._store = PostingStore()
        # reader() reads the latest table of contents. Segment readers are not reused: a reused
        # reader keeps the deletions it saw, and a delete-only commit would stay invisible.
        searcher = CheckedSearcher(
            self._index.reader(), weighting=weighting(), fromindex=self._index
        )
        key = (identity, searcher.reader().generation())
        caches = None
        current = self._current  # (read once: close() may clear it meanwhile)
        if current is None or current.key != key:
            # A new commit (openings are serialised, so it is later than the current one). Its
            # caches are made outside the lock: they may wait for the store's.
            caches = CommitCaches(searcher, self._store)
        to_close: list[Snapshot] = []
        with self._lock:
            current = self._current
            if current is None or current.key != key:
                if current is not None:
                    to_close = self._retire(current)
                if caches is None:  # close() ran meanwhile
                    caches = CommitCaches(searcher, self._store)
                current = self._current = _Generation(key, caches)
        self._close_all(to_close)
        return current, Snapshot(searcher, current.caches.store, current.caches)

    def _give_back(self, generation: _Generation, snapshot: Snapshot) -> None:
        with self._lock:
            keep = not generation.retired and len(generation.idle) < self.max_idle
            if keep:
                generation.idle.append(snapshot)
            else:
                self._open -= 1
            self._returned.notify()
        if not keep:
            snapshot.searcher.close()

    def _retire(self, generation: _Generation) -> list[Snapshot]:
        """Under the lock: mark ``generation`` retired and hand back its idle searchers to
        close (outside the lock); its busy ones are closed as they come back."""
        generation.retired = True
        idle, generation.idle = generation.idle, []
        self._open -= len(idle)
        self._returned.notify()
        return idle

    def _close_all(self, snapshots: list[Snapshot]) -> None:
        for snapshot in snapshots:
            snapshot.searcher.close()

    def _folder_identity(self) -> int:
        return os.stat(self.path).st_ino

    def close(self) -> None:
        """Close the idle searchers; those in use are closed when their searches end, and
        the next search opens a new one."""
        with self._lock:
            current, self._current = self._current, None
            to_close = self._retire(current) if current is not None else []
        self._close_all(to_close)
