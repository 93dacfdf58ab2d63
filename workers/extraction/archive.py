"""ZIP archives of documents: every member extracted as its own upload would be, its pages
headed by its path (:mod:`workers.extraction.embedded`: nesting, count and size bounds; a
member that fails is listed in ``metadata.member_errors``, the archive still counts).

The zip guard (:mod:`workers.extraction.guards`) has checked every member's real size and
ratio before this runs. Folders, and the hidden files archivers add (``__MACOSX/``,
``.DS_Store``, names starting with a dot), are skipped.

An archive too deep inside others to have its members read (past
:data:`~workers.extraction.embedded.MAX_DEPTH`) is ``HOSTILE_FILE``, the zip-bomb code: a
recursive bomb has that shape, and no one packs documents that deep. An archive of which
nothing could be read because a member was hostile is hostile too, with that member's reason;
otherwise (every member failed for other reasons, or none) it is ``EMPTY_FILE``.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from ldims.errors import PermanentError
from ldims.text import ExtractionResult
from workers.extraction.common import ensure_size
from workers.extraction.containers import ZIP_ERRORS
from workers.extraction.embedded import MAX_DEPTH, Inner
from workers.extraction.guards import hostile
from workers.extraction.result import ExtractionLimits

FORMAT = "application/zip"
EXTRACTOR = "zip"

Extract = Callable[[Path, str, ExtractionLimits], ExtractionResult]


def extract_zip(path: Path, limits: ExtractionLimits, extract: Extract) -> ExtractionResult:
    """The documents of the archive at ``path``; ``extract`` reads each (the registry's)."""
    ensure_size(path, limits)
    inner = Inner(limits)
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.is_dir() or _hidden(info.filename):
                    continue
                if limits.depth >= MAX_DEPTH:
                    raise hostile(f"archive nested deeper than {MAX_DEPTH} levels")
                with archive.open(info) as member:
                    data = member.read(limits.max_bytes + 1)
                inner.add_file(info.filename, data, extract)
    except ZIP_ERRORS as exc:
        raise PermanentError(
            "CORRUPT_FILE", f"The ZIP archive cannot be read ({type(exc).__name__})."
        ) from exc
    text = "\n\n".join(page.text for page in inner.pages if page.text)
    if not text.strip():
        hostile_member = next((f for f in inner.failures if f["code"] == "HOSTILE_FILE"), None)
        if hostile_member is not None:
            raise PermanentError(
                "HOSTILE_FILE", f"{hostile_member['name']}: {hostile_member['reason']}"
            )
        read = ", ".join(f"{f['name']}: {f['code']}" for f in inner.failures[:5])
        raise PermanentError(
            "EMPTY_FILE", f"No document in the archive could be read ({read or 'it is empty'})."
        )
    metadata: dict[str, object] = {"page_count": len(inner.pages), "members": inner.files}
    if inner.failures:
        metadata["member_errors"] = inner.failures
    return ExtractionResult(
        format=FORMAT, extractor=EXTRACTOR, text=text, pages=inner.pages, metadata=metadata
    )


def _hidden(name: str) -> bool:
    parts = PurePosixPath(name.replace("\\", "/")).parts
    return any(part.startswith(".") or part == "__MACOSX" for part in parts)
