"""The trees of ``LDIMS_GUIDE_DIR``, reloaded when their files change (no restart needed).

At most once per ``check_interval`` a call looks at the directory's file names, sizes and
modification times; changed files are parsed again. A file that stops validating keeps its
last good version in service (and the error is logged with file and line), so an author's
half-saved edit never takes a tree away from users.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from ldims.guide.trees import Tree, TreeError, load_tree, tree_files

log = logging.getLogger(__name__)


class TreeStore:
    def __init__(self, directory: Path, check_interval: float = 1.0) -> None:
        self.directory = directory
        self.check_interval = check_interval
        self._lock = threading.Lock()
        self._checked = float("-inf")
        self._signatures: dict[Path, tuple[int, int]] = {}
        self._by_path: dict[Path, Tree] = {}

    def trees(self) -> dict[str, Tree]:
        """Tree id → tree, fresh to within ``check_interval``."""
        with self._lock:
            if time.monotonic() - self._checked >= self.check_interval:
                self._refresh()
                self._checked = time.monotonic()
            by_file = sorted(self._by_path.items())
        trees: dict[str, Tree] = {}
        for _, tree in by_file:
            trees.setdefault(tree.id, tree)  # a duplicate id: the first file (by name) wins
        return dict(sorted(trees.items()))

    def _refresh(self) -> None:
        try:
            paths = tree_files(self.directory)
        except OSError as exc:
            log.error("guide: cannot list %s: %s", self.directory, exc)
            return
        present = set(paths)
        for gone in set(self._by_path) - present:
            log.info("guide: %s was removed", gone.name)
            self._by_path.pop(gone, None)
            self._signatures.pop(gone, None)
        for path in paths:
            try:
                stat = path.stat()
            except OSError:
                continue
            signature = (stat.st_mtime_ns, stat.st_size)
            if self._signatures.get(path) == signature:
                continue
            self._signatures[path] = signature
            try:
                self._by_path[path] = load_tree(path)
            except TreeError as exc:
                kept = "keeping the previous version" if path in self._by_path else "not loaded"
                log.error("guide: %s has errors (%s): %s", path.name, kept, exc.problems[0])
