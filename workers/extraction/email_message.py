"""E-mail messages (``.eml``, RFC 5322 with MIME): the headers that say what it is, the body,
and every attachment extracted as its own file would be.

Python's ``email`` package parses the message (``policy.default``: decoded headers, charset
and transfer encodings undone). Page 1 is the message: From, To, Cc, Date and Subject lines,
then the plain-text body (the HTML one, through the HTML extractor, when there is no plain
one). Each attachment follows, its pages headed ``[name]``, through
:mod:`workers.extraction.embedded` (an attached e-mail or ZIP is read too, one level down;
a failed attachment is listed in ``metadata.attachment_errors``, the message still counts).
The subject becomes the title, the sender the author and the date the creation date.
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import tempfile
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path

from ldims.errors import PermanentError
from ldims.text import ExtractionResult
from workers.extraction.common import clean_text, ensure_size
from workers.extraction.embedded import Inner
from workers.extraction.html import extract_html
from workers.extraction.result import ExtractionLimits

FORMAT = "message/rfc822"
EXTRACTOR = "email"
_HEADERS = ("From", "To", "Cc", "Date", "Subject")

Extract = Callable[[Path, str, ExtractionLimits], ExtractionResult]


def extract_email(path: Path, limits: ExtractionLimits, extract: Extract) -> ExtractionResult:
    """The message at ``path``; ``extract`` reads its attachments (the registry's)."""
    ensure_size(path, limits)
    message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    if not isinstance(message, EmailMessage) or not any(message.get(h) for h in _HEADERS):
        raise PermanentError("CORRUPT_FILE", "The file is not an e-mail message (no headers).")
    inner = Inner(limits)
    header = "\n".join(f"{name}: {message[name]}" for name in _HEADERS if message.get(name))
    inner.add_page(clean_text(f"{header}\n\n{_body(message, limits)}"))
    for part in message.iter_attachments():
        data = part.get_payload(decode=True)
        if isinstance(part.get_payload(), EmailMessage | list) and not data:
            data = part.as_bytes()  # an attached message (message/rfc822)
        if not data:
            continue
        name = part.get_filename() or f"attachment.{part.get_content_subtype()}"
        inner.add_file(name, data, extract)
    metadata: dict[str, object] = {
        "title": str(message.get("Subject", "")) or None,
        "author": str(message.get("From", "")) or None,
        "created": _date(message.get("Date")),
        "page_count": len(inner.pages),
        "attachments": inner.files,
    }
    if inner.failures:
        metadata["attachment_errors"] = inner.failures
    text = "\n\n".join(page.text for page in inner.pages if page.text)
    if not text.strip():
        raise PermanentError("EMPTY_FILE", "The message has no text and no readable attachment.")
    return ExtractionResult(
        format=FORMAT,
        extractor=EXTRACTOR,
        text=text,
        pages=inner.pages,
        metadata=metadata,
    )


def _body(message: EmailMessage, limits: ExtractionLimits) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    content = part.get_content()
    if part.get_content_subtype() != "html":
        return str(content)
    with tempfile.TemporaryDirectory(prefix="ldims-mail-") as folder:
        page = Path(folder) / "body.html"
        page.write_text(str(content), encoding="utf-8")
        try:
            return extract_html(page, limits).text
        except PermanentError:
            return ""


def _date(value: object) -> str | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(str(value)).isoformat()
    except (TypeError, ValueError):
        return None
