"""Limits and hostile files: zip and XML entity bombs, encrypted Office packages, wall time and
memory enforced on the extractor child process, which a failure never takes down for good."""

from __future__ import annotations

import os
import random
import signal
import string
import struct
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ldims.errors import PermanentError
from tests.conftest import DOCS
from workers.extraction import ExtractionLimits, ExtractionSandbox, detect_format, extract_file

BIG_PDF = DOCS / "unstructured__pdf2image-memory-error-test-400p.pdf"
DOCX_TEMPLATE = DOCS / "docling__word_sample.docx"
MIB = 1024 * 1024


def docx_with_body(target: Path, body: bytes) -> Path:
    """A copy of a real DOCX whose word/document.xml is replaced by ``body``."""
    with zipfile.ZipFile(DOCX_TEMPLATE) as source, zipfile.ZipFile(target, "w") as copy:
        for member in source.infolist():
            data = body if member.filename == "word/document.xml" else source.read(member)
            copy.writestr(member.filename, data, compress_type=zipfile.ZIP_DEFLATED)
    return target


def failure(path: Path, limits: ExtractionLimits | None = None) -> PermanentError:
    mime = detect_format(path.read_bytes()[:8192], path.name)
    with pytest.raises(PermanentError) as raised:
        extract_file(path, mime, limits or ExtractionLimits())
    return raised.value


def test_zip_bomb_by_ratio_is_hostile(tmp_path: Path) -> None:
    bomb = docx_with_body(tmp_path / "bomb.docx", b"<w:document/>" + b" " * (64 * MIB))
    error = failure(bomb)
    assert error.code == "HOSTILE_FILE" and "word/document.xml" in error.message


def test_zip_bomb_over_the_unzipped_limit_is_hostile(tmp_path: Path) -> None:
    noise = "".join(random.Random(7).choices(string.ascii_letters, k=3 * MIB)).encode()
    big = docx_with_body(tmp_path / "big.docx", noise)
    error = failure(big, ExtractionLimits(max_unzipped_bytes=2 * MIB))
    assert error.code == "HOSTILE_FILE" and "unzipped limit" in error.message


def test_member_larger_than_its_header_declares_is_hostile(tmp_path: Path) -> None:
    noise = "".join(random.Random(8).choices(string.ascii_letters, k=MIB)).encode()
    liar = docx_with_body(tmp_path / "liar.docx", noise)
    _declare_size(liar, "word/document.xml", 1000)
    error = failure(liar)
    assert error.code == "HOSTILE_FILE" and "larger than its header declares" in error.message


def test_xml_entity_bomb_is_hostile(tmp_path: Path) -> None:
    laughs = (
        b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
        b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
        b'<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
        b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        b"<w:body><w:p><w:r><w:t>&lol3;</w:t></w:r></w:p></w:body></w:document>"
    )
    error = failure(docx_with_body(tmp_path / "laughs.docx", laughs))
    assert error.code == "HOSTILE_FILE" and "entity" in error.message


def test_too_many_members_is_hostile(tmp_path: Path) -> None:
    many = docx_with_body(tmp_path / "many.docx", b"<x/>")
    with zipfile.ZipFile(many, "a") as archive:
        for number in range(60):
            archive.writestr(f"customXml/item{number}.xml", b"<x/>")
    error = failure(many, ExtractionLimits(max_zip_members=50))
    assert error.code == "HOSTILE_FILE" and "members" in error.message


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("tika__testWORD_protected_passtika.docx", "ENCRYPTED"),
        ("unstructured__password_protected.xlsx", "ENCRYPTED"),
        ("tika__testWORD_truncated.docx", "CORRUPT_FILE"),
    ],
)
def test_office_containers_that_cannot_be_opened(name: str, code: str) -> None:
    assert failure(DOCS / name).code == code


def test_a_zip_of_documents_is_read_and_a_broken_image_is_corrupt(tmp_path: Path) -> None:
    archive = tmp_path / "photos.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("notes/readme.txt", "just an archive")
    result = extract_file(archive, "application/zip", ExtractionLimits())
    assert "just an archive" in result.text and result.extractor == "zip"
    image = tmp_path / "scan.pdf"  # the name lies; the bytes are a PNG, and a broken one
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    error = failure(image)
    assert error.code == "CORRUPT_FILE" and "image" in error.message
    gzipped = tmp_path / "notes.gz"
    gzipped.write_bytes(b"\x1f\x8b\x08\x00" + bytes(60))
    assert failure(gzipped).code == "UNSUPPORTED_FORMAT"


@pytest.fixture
def sandbox() -> Iterator[ExtractionSandbox]:
    box = ExtractionSandbox()
    yield box
    box.close()


def test_wall_time_is_enforced_and_the_next_file_still_extracts(
    sandbox: ExtractionSandbox,
) -> None:
    with pytest.raises(PermanentError) as raised:
        sandbox.run(BIG_PDF, "application/pdf", ExtractionLimits(timeout_seconds=0.3))
    assert raised.value.code == "TIMEOUT" and "0.3 s" in raised.value.message
    result = sandbox.run(DOCS / "pypdf__multilang.pdf", "application/pdf", ExtractionLimits())
    assert "Привет, мир" in result.text


def test_memory_limit_is_enforced_and_the_next_file_still_extracts(
    sandbox: ExtractionSandbox,
) -> None:
    sandbox.run(DOCS / "pypdf__multilang.pdf", "application/pdf", ExtractionLimits())
    idle_mib = sandbox.last_peak_rss // MIB
    tight = ExtractionLimits(max_memory_mib=idle_mib + 10)
    with pytest.raises(PermanentError) as raised:
        sandbox.run(BIG_PDF, "application/pdf", tight)
    assert raised.value.code == "TOO_LARGE" and "MiB of memory" in raised.value.message
    result = sandbox.run(DOCS / "poppler-test__russian.pdf", "application/pdf", ExtractionLimits())
    assert "Простой" in result.text


def _kill_children(sandbox: ExtractionSandbox, times: int) -> tuple[threading.Thread, set[int]]:
    """Kill the sandbox's child ``times`` times, each 0.3 s after it took its file."""
    killed: set[int] = set()

    def kill() -> None:
        deadline = time.monotonic() + 60
        while len(killed) < times and time.monotonic() < deadline:
            watched = sandbox._watched  # set once a child is ready, just before it gets the file
            if watched is not None and watched.pid not in killed:
                time.sleep(0.3)
                os.kill(watched.pid, signal.SIGKILL)
                killed.add(watched.pid)
            time.sleep(0.01)

    thread = threading.Thread(target=kill)
    thread.start()
    return thread, killed


def test_one_outside_kill_of_the_extractor_is_read_again(sandbox: ExtractionSandbox) -> None:
    sandbox.run(DOCS / "pypdf__multilang.pdf", "application/pdf", ExtractionLimits())
    first = sandbox.pid
    # An operator's (or a container runtime's) kill -9: not the file's fault, it is read again.
    killer, killed = _kill_children(sandbox, times=1)
    result = sandbox.run(BIG_PDF, "application/pdf", ExtractionLimits())
    killer.join()
    assert killed == {first} and len(result.pages) == 400 and sandbox.pid not in (None, first)


def test_a_twice_killed_extractor_is_reported_and_replaced(sandbox: ExtractionSandbox) -> None:
    sandbox.run(DOCS / "pypdf__multilang.pdf", "application/pdf", ExtractionLimits())
    first = sandbox.pid
    assert first is not None
    # What the kernel's OOM killer looks like from the worker: the child vanishes mid-file, and
    # again in the fresh child that reads the file once more.
    killer, killed = _kill_children(sandbox, times=2)
    with pytest.raises(PermanentError) as raised:
        sandbox.run(BIG_PDF, "application/pdf", ExtractionLimits())
    killer.join()
    assert len(killed) == 2 and first in killed
    assert raised.value.code == "TOO_LARGE" and "killed by the system twice" in raised.value.message
    result = sandbox.run(DOCS / "pypdf__multilang.pdf", "application/pdf", ExtractionLimits())
    assert "你好世界" in result.text and sandbox.pid != first


def _declare_size(path: Path, name: str, size: int) -> None:
    """Rewrite the uncompressed size recorded for ``name`` in both of the zip's headers."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        member = archive.getinfo(name)
    struct.pack_into("<I", data, member.header_offset + 22, size)
    position = data.find(b"PK\x01\x02")
    while position != -1:
        name_length = struct.unpack_from("<H", data, position + 28)[0]
        if data[position + 46 : position + 46 + name_length] == name.encode():
            struct.pack_into("<I", data, position + 24, size)
        position = data.find(b"PK\x01\x02", position + 4)
    path.write_bytes(bytes(data))


def test_an_interrupted_file_never_answers_for_the_next_one(sandbox: ExtractionSandbox) -> None:
    # Celery's soft time limit raises inside the waiting worker; here a timer does the same.
    class Interrupted(Exception):
        pass

    def interrupt() -> None:
        raise Interrupted

    sandbox.run(DOCS / "pypdf__multilang.pdf", "application/pdf", ExtractionLimits())
    with pytest.raises(Interrupted):
        _interrupted_run(sandbox, interrupt)
    result = sandbox.run(DOCS / "poppler-test__russian.pdf", "application/pdf", ExtractionLimits())
    assert "Простой" in result.text and len(result.pages) == 1


def _interrupted_run(sandbox: ExtractionSandbox, interrupt: Callable[[], None]) -> None:
    previous = signal.signal(signal.SIGALRM, lambda *_: interrupt())
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        sandbox.run(BIG_PDF, "application/pdf", ExtractionLimits())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.timeout(10)
def test_long_runs_of_blanks_do_not_stall_the_text_cleanup(tmp_path: Path) -> None:
    # Both regexes were super-linear on blanks: minutes for a few kilobytes of spaces.
    page = tmp_path / "blanks.md"
    page.write_text("# a" + " " * 20_000 + "x\n" + "word" + " " * 1_000_000 + "end\n")
    result = extract_file(page, "text/markdown", ExtractionLimits())
    assert result.sections[0].heading.startswith("a") and result.text.rstrip().endswith("end")


def test_a_utf16_xml_part_declaring_entities_is_hostile(tmp_path: Path) -> None:
    laughs = '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE d [<!ENTITY x "x">]><d>&x;</d>'
    bomb = docx_with_body(tmp_path / "utf16.docx", laughs.encode("utf-16"))
    assert failure(bomb).code == "HOSTILE_FILE"


def test_a_zip_with_undecodable_member_names_is_corrupt(tmp_path: Path) -> None:
    broken = docx_with_body(tmp_path / "names.docx", b"<x/>")
    data = bytearray(broken.read_bytes())
    # Flag every name as UTF-8 (general purpose bit 11) and make one of them invalid UTF-8.
    position = data.find(b"PK\x01\x02")
    struct.pack_into(
        "<H", data, position + 8, struct.unpack_from("<H", data, position + 8)[0] | 0x800
    )
    data[position + 46] = 0xFF
    broken.write_bytes(bytes(data))
    assert failure(broken).code == "CORRUPT_FILE"


def test_utf32_text_and_odd_declared_charsets_are_read(tmp_path: Path) -> None:
    utf32 = tmp_path / "utf32.txt"
    utf32.write_bytes("Привет, мир".encode("utf-32"))
    assert extract_file(utf32, "text/plain", ExtractionLimits()).text == "Привет, мир"
    page = tmp_path / "page.html"
    page.write_bytes(b'<html><head><meta charset="base64"></head><body><p>plain words</p></body>')
    assert extract_file(page, "text/html", ExtractionLimits()).text == "plain words"


def test_the_child_is_recycled_after_native_parser_files_only(tmp_path: Path) -> None:
    text = tmp_path / "note.md"
    text.write_text("# Note\n\nPlain words.\n", encoding="utf-8")
    pdf = DOCS / "pypdf__multilang.pdf"
    with ExtractionSandbox(recycle_after=2) as sandbox:
        sandbox.run(pdf, "application/pdf", ExtractionLimits())
        first = sandbox.pid
        # Plain text is read by our own code: it wears out nothing and does not count.
        for _ in range(5):
            assert "Plain words" in sandbox.run(text, "text/markdown", ExtractionLimits()).text
            assert sandbox.pid == first
        sandbox.run(pdf, "application/pdf", ExtractionLimits())  # the second native one
        assert sandbox.pid is None  # replaced: the next file starts a fresh child
        sandbox.run(text, "text/markdown", ExtractionLimits())
        assert sandbox.pid not in (None, first)
