"""Extraction results on disk, named by the original's sha256 and the extractor version.

Content-addressed like the originals: the same bytes are extracted once, a task that runs
twice finds the result already there, and a new extractor version extracts again.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from ldims.text import ExtractionResult

EXTRACTOR_VERSION = 2


class ExtractStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str, mime: str) -> Path:
        # Only the Markdown/plain-text reading of the same bytes differs; every other type is
        # fixed by the content (and refined from "zip" to "docx" during extraction, so the
        # upload-time type and the final one must find the same file).
        flavour = "markdown" if mime == "text/markdown" else "content"
        return self.root / sha256[:2] / f"{sha256}.{flavour}.v{EXTRACTOR_VERSION}.json"

    def exists(self, sha256: str, mime: str) -> bool:
        return self.path(sha256, mime).is_file()

    def save(self, sha256: str, result: ExtractionResult) -> None:
        target = self.path(sha256, result.format)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(result.to_json())
            os.replace(name, target)
        except BaseException:
            # A half-written result (a full disk) must not stay and take the room left.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise

    def load(self, sha256: str, mime: str) -> ExtractionResult:
        return ExtractionResult.from_json(self.path(sha256, mime).read_text(encoding="utf-8"))

    def stored(self) -> dict[Path, tuple[str, float]]:
        """Every stored result of this extractor version: its path, with the content's sha256
        and the file's modification time (``ldims check``'s listing)."""
        found: dict[Path, tuple[str, float]] = {}
        for path in self.root.glob(f"??/*.v{EXTRACTOR_VERSION}.json"):
            sha256 = path.name.split(".", 1)[0]
            if len(sha256) != 64 or path.parent.name != sha256[:2]:
                continue  # not a name of ours (a temporary file, say)
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                found[path] = (sha256, path.stat().st_mtime)
        return found

    def delete(self, sha256: str) -> None:
        """Remove every stored result of this content (all formats and versions)."""
        for path in (self.root / sha256[:2]).glob(f"{sha256}.*.json"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
