"""Files inside files (an e-mail's attachments, a ZIP's members): each extracted by the registry
like an upload, within what is left of the outer file's limits, its failure recorded rather
than failing the outer file.

Bounds: :data:`MAX_DEPTH` levels of nesting (a ZIP in an e-mail is read, a ZIP in that ZIP is
not), :data:`MAX_FILES` inner files, their bytes within the outer file's ``max_bytes``, every
page counted against ``max_pages`` and every character against ``max_chars``. An inner file
gets a temporary copy under its own folder, removed after it is read.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from ldims.errors import OcrDeferred, PermanentError, ProcessingError
from ldims.text import ExtractionResult, Page
from workers.extraction.common import clean_text, ensure_chars, ensure_pages
from workers.extraction.detect import detect_format
from workers.extraction.result import ExtractionLimits

MAX_DEPTH = 2
MAX_FILES = 200
HEAD_BYTES = 8192


@dataclass
class Inner:
    """The outer file's pages and what its inner files added or failed with."""

    limits: ExtractionLimits
    pages: list[Page] = field(default_factory=list)
    files: list[dict[str, object]] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)
    bytes_read: int = 0

    chars: int = 0  # of the pages so far

    def add_page(self, text: str) -> None:
        self.pages.append(Page(len(self.pages) + 1, text))
        self.chars += len(text)
        ensure_pages(len(self.pages), self.limits)
        ensure_chars(self.chars, self.limits)

    def add_file(
        self,
        name: str,
        data: bytes,
        extract: Callable[[Path, str, ExtractionLimits], ExtractionResult],
    ) -> None:
        """Extract the inner file ``name`` (its bytes ``data``) and add its pages, each headed
        by its name; a failure is recorded with its code."""
        if len(self.files) + len(self.failures) >= MAX_FILES:
            self.failures.append({"name": name, "code": "TOO_LARGE", "reason": "too many files"})
            return
        self.bytes_read += len(data)
        if self.bytes_read > self.limits.max_bytes:
            raise PermanentError(
                "TOO_LARGE",
                f"The files inside are larger than {self.limits.max_bytes:,} bytes in all.",
            )
        if self.limits.depth >= MAX_DEPTH:
            self.failures.append(
                {"name": name, "code": "UNSUPPORTED_FORMAT", "reason": "nested too deep"}
            )
            return
        safe = PurePosixPath(name.replace("\\", "/")).name or "file"
        with tempfile.TemporaryDirectory(prefix="ldims-inner-") as folder:
            path = Path(folder) / safe
            path.write_bytes(data)
            mime = detect_format(data[:HEAD_BYTES], safe)
            left = replace(
                self.limits,
                depth=self.limits.depth + 1,
                max_pages=max(1, self.limits.max_pages - len(self.pages)),
                max_chars=max(1, self.limits.max_chars - self.chars),
            )
            try:
                result = extract(path, mime, left)
            except OcrDeferred:
                raise  # the whole file goes to the OCR workers, its scans read there
            except ProcessingError as exc:
                self.failures.append({"name": name, "code": exc.code, "reason": exc.message})
                return
        first = len(self.pages) + 1
        for page in result.pages:
            heading = f"[{name}]" if page.number == 1 else f"[{name}, page {page.number}]"
            self.add_page(clean_text(f"{heading}\n{page.text}"))
        self.files.append(
            {"name": name, "format": result.format, "pages": [first, len(self.pages)]}
        )
