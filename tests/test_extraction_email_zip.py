"""E-mail messages (.eml) with attachments and ZIP archives of documents, made by the test
from corpus files: detected from their bytes, every attachment or member extracted as an
upload would be (OCR included), failures listed without failing the whole, nesting bounded."""

from __future__ import annotations

import io
import zipfile
from email.message import EmailMessage
from pathlib import Path

import pytest

from ldims.errors import PermanentError
from tests.conftest import DOCS
from workers.extraction import ExtractionLimits, detect_format, extract_file

LIMIT = ExtractionLimits()
DOCX_FILE = DOCS / "docling__word_sample.docx"
RUSSIAN_PDF = DOCS / "poppler-test__russian.pdf"
SCAN = DOCS / "docling__ocr_test.pdf"
LOCKED_PDF = DOCS / "pdfplumber__password-example.pdf"


def message(body: str = "Please find the reports attached.", html: bool = False) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = "Olga Petrova <olga@example.com>"
    mail["To"] = "archive@example.com"
    mail["Subject"] = "Quarterly reports, Q3"
    mail["Date"] = "Tue, 03 Nov 2026 10:15:00 +0300"
    if html:
        mail.set_content(f"<html><body><nav>Menu</nav><p>{body}</p></body></html>", subtype="html")
    else:
        mail.set_content(body)
    return mail


def attach(mail: EmailMessage, path: Path, name: str | None = None) -> None:
    mail.add_attachment(
        path.read_bytes(),
        maintype="application",
        subtype="octet-stream",
        filename=name or path.name,
    )


def extracted(tmp_path: Path, data: bytes, name: str) -> tuple[str, object]:
    path = tmp_path / name
    path.write_bytes(data)
    mime = detect_format(data[:8192], name)
    return mime, extract_file(path, mime, LIMIT)


def test_an_email_with_attachments_reads_message_and_every_attachment(tmp_path: Path) -> None:
    mail = message()
    attach(mail, DOCX_FILE, "summer.docx")
    attach(mail, RUSSIAN_PDF, "русский.pdf")
    attach(mail, SCAN, "scan.pdf")  # read by OCR
    mime, result = extracted(tmp_path, mail.as_bytes(), "mail.eml")
    assert mime == "message/rfc822"
    first = result.pages[0].text  # type: ignore[attr-defined]
    assert "Subject: Quarterly reports, Q3" in first and "Please find the reports" in first
    metadata = result.metadata  # type: ignore[attr-defined]
    assert metadata["title"] == "Quarterly reports, Q3"
    assert metadata["author"] == "Olga Petrova <olga@example.com>"
    assert metadata["created"] == "2026-11-03T10:15:00+03:00"
    files = {f["name"]: f for f in metadata["attachments"]}
    assert set(files) == {"summer.docx", "русский.pdf", "scan.pdf"}
    pages = {page.number: page.text for page in result.pages}  # type: ignore[attr-defined]
    start, end = files["summer.docx"]["pages"]
    assert pages[start].startswith("[summer.docx]")
    assert any("Summer activities" in pages[n] for n in range(start, end + 1))
    assert "редактировать" in pages[files["русский.pdf"]["pages"][0]]
    assert "Docling bundles PDF document conversion" in pages[files["scan.pdf"]["pages"][0]]
    assert "attachment_errors" not in metadata


def test_an_html_only_email_and_a_failed_attachment(tmp_path: Path) -> None:
    mail = message("Budget <b>approved</b> for 2027.", html=True)
    attach(mail, LOCKED_PDF, "locked.pdf")
    attach(mail, DOCX_FILE)
    _, result = extracted(tmp_path, mail.as_bytes(), "mail.eml")
    first = result.pages[0].text  # type: ignore[attr-defined]
    assert "Budget approved for 2027." in first and "<b>" not in first and "Menu" not in first
    errors = result.metadata["attachment_errors"]  # type: ignore[attr-defined]
    assert [(e["name"], e["code"]) for e in errors] == [("locked.pdf", "ENCRYPTED")]
    assert "Summer activities" in result.text  # type: ignore[attr-defined]


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_zip_of_documents_reads_every_member(tmp_path: Path) -> None:
    data = zipped(
        {
            "reports/summer.docx": DOCX_FILE.read_bytes(),
            "reports/russian.pdf": RUSSIAN_PDF.read_bytes(),
            "notes.txt": b"Minutes: the zebra budget was approved.",
            "__MACOSX/reports/._summer.docx": b"\x00\x05\x16\x07junk",
            ".DS_Store": b"\x00\x00\x00\x01Bud1",
            "tool.bin": bytes(range(256)) * 4,
        }
    )
    mime, result = extracted(tmp_path, data, "bundle.zip")
    assert mime == "application/zip"
    metadata = result.metadata  # type: ignore[attr-defined]
    assert [m["name"] for m in metadata["members"]] == [
        "reports/summer.docx",
        "reports/russian.pdf",
        "notes.txt",
    ]
    assert [(e["name"], e["code"]) for e in metadata["member_errors"]] == [
        ("tool.bin", "UNSUPPORTED_FORMAT")
    ]
    text = result.text  # type: ignore[attr-defined]
    assert "Summer activities" in text and "редактировать" in text and "zebra budget" in text
    assert "[notes.txt]" in text and "Bud1" not in text


def test_nesting_is_bounded(tmp_path: Path) -> None:
    innermost = zipped({"deep.txt": b"too deep to read"})
    middle = zipped({"inner.zip": innermost, "middle.txt": b"read at the second level"})
    mail = message()
    mail.add_attachment(middle, maintype="application", subtype="zip", filename="middle.zip")
    _, result = extracted(tmp_path, mail.as_bytes(), "mail.eml")
    text = result.text  # type: ignore[attr-defined]
    assert "read at the second level" in text and "too deep to read" not in text
    [attachment] = result.metadata["attachments"]  # type: ignore[attr-defined]
    assert attachment["name"] == "middle.zip"


def test_text_that_merely_starts_like_a_header_stays_text(tmp_path: Path) -> None:
    note = b"From: the desk of the editor\nWe met on Monday.\n\nSubject: none\n"
    assert detect_format(note, "note.txt") == "text/plain"
    with pytest.raises(PermanentError) as failed:
        extracted(tmp_path, zipped({"tool.bin": bytes(range(256))}), "only.zip")
    assert (
        failed.value.code == "EMPTY_FILE" and "tool.bin: UNSUPPORTED_FORMAT" in failed.value.message
    )


FLAT_TEXT = """<?xml version="1.0" encoding="UTF-8"?>
<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"
 xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" office:version="1.3"
 office:mimetype="application/vnd.oasis.opendocument.text">
 <office:body><office:text>
  <text:h text:outline-level="1">Отчёт об выдрах</text:h>
  <text:p>The otters built a dam upstream in 2026.</text:p>
 </office:text></office:body>
</office:document>
"""


def test_a_flat_opendocument_file_reads_with_its_headings(tmp_path: Path) -> None:
    mime, result = extracted(tmp_path, FLAT_TEXT.encode(), "report.fodt")
    assert mime == "application/vnd.oasis.opendocument.flat.text"
    assert "The otters built a dam upstream in 2026." in result.text  # type: ignore[attr-defined]
    assert "<text:p>" not in result.text  # type: ignore[attr-defined]
    headings = [s.heading for s in result.sections]  # type: ignore[attr-defined]
    assert headings == ["Отчёт об выдрах"]


def test_a_flat_opendocument_file_declaring_entities_is_refused(tmp_path: Path) -> None:
    bomb = FLAT_TEXT.replace(
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;">]>',
    )
    with pytest.raises(PermanentError) as failed:
        extracted(tmp_path, bomb.encode(), "bomb.fodt")
    assert failed.value.code == "HOSTILE_FILE"


def test_an_archive_nested_too_deep_is_refused_as_hostile_not_empty(tmp_path: Path) -> None:
    """A ZIP in a ZIP in a ZIP: the innermost archive is past the nesting bound, and an
    archive made only of such nesting is a hostile file (a recursive zip bomb's shape), with
    a reason that says so, not EMPTY_FILE."""
    innermost = zipped({"deep.txt": b"too deep to read"})
    chain = zipped({"level2.zip": zipped({"level3.zip": innermost})})
    with pytest.raises(PermanentError) as refused:
        extracted(tmp_path, chain, "chain.zip")
    assert refused.value.code == "HOSTILE_FILE"
    assert "archive nested deeper than 2 levels" in refused.value.message
    assert "\n" not in refused.value.message

    # Beside a readable member, the too-deep chain is listed with that code; the rest is read.
    beside = zipped({"chain.zip": chain, "ok.txt": b"shallow words"})
    _, result = extracted(tmp_path, beside, "beside.zip")
    assert "shallow words" in result.text  # type: ignore[attr-defined]
    errors = result.metadata["member_errors"]  # type: ignore[attr-defined]
    assert [(e["name"], e["code"]) for e in errors] == [("chain.zip", "HOSTILE_FILE")]
    assert "nested deeper than 2 levels" in errors[0]["reason"]
