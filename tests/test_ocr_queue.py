"""Scans go to the OCR workers (queue ``ocr``): the extract pass hands on what needs OCR
instead of reading it, text documents behind a scan never wait for it, the scan waits in its
own line (which its status says) and is read once an OCR worker is there; the reconciler
re-drives a lost OCR message to the OCR queue, not to extraction."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import timedelta
from email.message import EmailMessage
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from ldims.catalog import Catalog, repository, utcnow
from ldims.documents import status_of
from ldims.errors import OcrDeferred, PermanentError
from ldims.lifecycle import states
from ldims.settings import Settings
from tests.conftest import DOCS, Stack, document_row, key_of
from workers import pipeline, reconcile
from workers.extraction import ExtractionLimits, ExtractionSandbox, detect_format, extract_file

SCAN = DOCS / "docling__ocr_test.pdf"  # one page, an image and no text layer
TEXT_PDF = DOCS / "poppler-test__russian.pdf"
DEFERRING = replace(ExtractionLimits(), ocr=replace(ExtractionLimits().ocr, defer=True))
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"


def page_image(text: str = "Invoice number 4711 is due on the first of March.") -> bytes:
    image = Image.new("L", (1600, 300), 255)
    ImageDraw.Draw(image).text((60, 100), text, font=ImageFont.truetype(FONT, 48), fill=0)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def extract_bytes(tmp_path: Path, name: str, data: bytes, limits: ExtractionLimits) -> object:
    path = tmp_path / name
    path.write_bytes(data)
    return extract_file(path, detect_format(data[:8192], name), limits)


def test_the_extract_pass_hands_on_scans_images_and_mail_with_scans(tmp_path: Path) -> None:
    with pytest.raises(OcrDeferred):
        extract_bytes(tmp_path, "scan.pdf", SCAN.read_bytes(), DEFERRING)
    with pytest.raises(OcrDeferred):
        extract_bytes(tmp_path, "page.png", page_image(), DEFERRING)
    mail = EmailMessage()
    mail["From"] = "Olga Petrova <olga@example.com>"
    mail["To"] = "archive@example.com"
    mail["Date"] = "Tue, 03 Nov 2026 10:15:00 +0300"
    mail["Subject"] = "The scanned invoice"
    mail.set_content("See the attached scan.")
    mail.add_attachment(page_image(), maintype="image", subtype="png", filename="invoice.png")
    # An attachment that needs OCR takes the whole message to the OCR workers (not a failed
    # attachment and a message without it).
    with pytest.raises(OcrDeferred):
        extract_bytes(tmp_path, "mail.eml", mail.as_bytes(), DEFERRING)
    # What needs no OCR is read in the extract pass as ever.
    result = extract_bytes(tmp_path, "text.pdf", TEXT_PDF.read_bytes(), DEFERRING)
    assert "редактировать" in result.text  # type: ignore[attr-defined]
    # The OCR pass reads them.
    read = extract_bytes(tmp_path, "page.png", page_image(), ExtractionLimits())
    assert "4711" in read.text  # type: ignore[attr-defined]


def test_what_cannot_be_read_fails_in_the_extract_pass_not_after_a_wait(tmp_path: Path) -> None:
    # A file named and shaped like an image that does not decode: CORRUPT_FILE at once.
    broken = page_image()[:60]
    with pytest.raises(PermanentError) as caught:
        extract_bytes(tmp_path, "broken.png", broken, DEFERRING)
    assert caught.value.code == "CORRUPT_FILE"
    # No language data: no OCR worker could read it either, so it fails now with what to install.
    empty = tmp_path / "tessdata"
    empty.mkdir()
    missing = replace(DEFERRING, ocr=replace(DEFERRING.ocr, tessdata=str(empty)))
    with pytest.raises(PermanentError) as caught:
        extract_bytes(tmp_path, "scan.pdf", SCAN.read_bytes(), missing)
    assert caught.value.code == "OCR_UNAVAILABLE" and "apt-get install" in caught.value.message


def test_the_hand_off_crosses_the_extractor_process(tmp_path: Path) -> None:
    with ExtractionSandbox() as sandbox:
        with pytest.raises(OcrDeferred):
            sandbox.run(SCAN, "application/pdf", DEFERRING)
        # The child stays usable for the next file.
        assert "редактировать" in sandbox.run(TEXT_PDF, "application/pdf", DEFERRING).text


def test_a_scan_never_holds_up_the_text_documents_behind_it(stack: Stack) -> None:
    stack.ocr_worker.stop()  # no OCR worker yet: the scan must wait without blocking anything
    scan = stack.upload("scan.pdf", SCAN.read_bytes()).json()["documentId"]
    texts = [
        stack.upload(f"note-{n}.txt", f"note {n}: the quarterly figures".encode()).json()[
            "documentId"
        ]
        for n in range(3)
    ]
    assert [stack.wait_final(i)["status"] for i in texts] == ["completed"] * 3
    catalog = Catalog(stack.settings.catalog_url)
    with catalog.session() as session:
        waiting = repository.get_document(session, key_of(scan))
        assert waiting is not None and waiting.waiting_for_ocr
        status = status_of(waiting)
    # In line for OCR, and it says so; the extract pass did not count as an attempt.
    assert status.status == "queued" and "OCR" in status.stage
    assert status.attempts == 0 and status.retryAfterSeconds
    stack.ocr_worker.start()
    record = stack.wait_final(scan, timeout=120)
    assert record["status"] == "completed", record["error"]
    assert record["ocrPages"] == [1] and record["ocrConfidence"] > 80
    found = stack.client.get(
        "/api/search", params={"query": "self contained package", "searchMode": "exact"}
    ).json()
    assert [hit["pageNumber"] for hit in found["results"] if hit["documentId"] == scan] == [1]
    with catalog.session() as session:
        done = repository.get_document(session, key_of(scan))
        assert done is not None and done.attempts == 1 and not done.waiting_for_ocr
        assert "ready" in status_of(done).stage
    catalog.dispose()


def _stale_scan(catalog: Catalog, doc_id: str, sha: str) -> None:
    now = utcnow()
    with catalog.session() as session:
        session.add(
            document_row(
                doc_id,
                name="scan.pdf",
                sha256=sha,
                format="application/pdf",
                status="processing",
                attempts=1,
            )
        )
    with catalog.session() as session:
        assert states.wait_for_ocr(session, doc_id, sha)
        assert not states.wait_for_ocr(session, doc_id, "f" * 64)  # another version: no
    with catalog.session() as session:
        document = repository.get_document(session, doc_id)
        assert document is not None and document.attempts == 0
        document.status_changed_at = now - timedelta(seconds=60)


@pytest.mark.parametrize("ocr_queue", [True, False])
def test_the_reconciler_re_drives_a_lost_ocr_message_to_its_queue(
    tmp_path: Path, ocr_queue: bool
) -> None:
    settings = Settings(data_dir=tmp_path / "data", stuck_after_seconds=5, ocr_queue=ocr_queue)
    rt = pipeline.Runtime(settings)
    rt.catalog.upgrade()
    sha = "a" * 64
    _stale_scan(rt.catalog, "t/scan", sha)
    if ocr_queue:
        # Its queue still holds messages: it waits its turn, whatever the other queues hold.
        assert reconcile.find_stuck(rt, {"ocr"}).ocr == []
        assert reconcile.find_stuck(rt, {"extract"}).ocr == [("t/scan", sha)]
    else:
        # No OCR workers any more (LDIMS_OCR_QUEUE=false): the extract workers read it inline.
        report = reconcile.find_stuck(rt, set())
        assert report.extract == [("t/scan", sha)] and report.ocr == []
    rt.catalog.dispose()
