"""Streaming multipart parsing of uploads straight into the blob store.

Starlette's ``request.form()`` would spool the whole body before our code runs, so a
too-large upload would fill the disk first and get its 413 last. Here the body is fed
chunk by chunk to python-multipart's parser: the ``file`` part (each ``file`` part of a bulk
upload) goes to a :class:`~ldims.blobs.BlobWriter` (hashed and size-capped as it streams);
the other parts are small text fields.

Every part counts, whatever it is (a file, a field, a part without a name or without headers,
a name sent again): at most the files the route allows plus :data:`MAX_FIELDS`. The part past
the limit is refused as it begins, so the rest of the body is never read (parts without a name
were once not counted at all: 1.5 M of them were accepted in one upload). A part's headers are
bounded by python-multipart itself (8 lines of 4 KiB).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from python_multipart.multipart import MultipartParseError, MultipartParser, parse_options_header

from ldims.blobs import BlobStore, BlobWriter, StoredBlob
from ldims.errors import InvalidInput, PayloadTooLarge
from ldims.lifecycle.contents import receive_original

MAX_FIELD_BYTES = 64 * 1024
MAX_FIELDS = 32  # the forms have at most six fields; the rest is room, not a use


@dataclass
class ParsedUpload:
    """The stored file of a multipart upload plus its text fields."""

    blob: StoredBlob
    head: bytes
    filename: str
    fields: dict[str, str] = field(default_factory=dict)


@dataclass
class ParsedFile:
    """One stored file of a bulk upload."""

    blob: StoredBlob
    head: bytes
    filename: str


class _Collector:
    """Parser callbacks: route each part's bytes to a blob writer or a field buffer."""

    def __init__(
        self, blobs: BlobStore, max_bytes: int, max_files: int = 1, max_total: int | None = None
    ) -> None:
        self.blobs = blobs
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.max_total = max_total
        self.max_parts = max_files + MAX_FIELDS
        self.parts = 0
        self.total = 0
        self.fields: dict[str, str] = {}
        self.files: list[tuple[BlobWriter, str]] = []
        self.writer: BlobWriter | None = None
        self._header_name = b""
        self._header_value = b""
        self._part_name = ""
        self._part_is_file = False
        self._buffer = bytearray()

    @property
    def filename(self) -> str:
        return self.files[0][1] if self.files else ""

    def on_part_begin(self) -> None:
        self.parts += 1
        if self.parts > self.max_parts:
            raise InvalidInput(
                f"The multipart body has more than {self.max_parts} parts "
                f"({self.max_files} for files, {MAX_FIELDS} for form fields)."
            )
        self._part_name, self._part_is_file, self._buffer = "", False, bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        if self._header_name.lower() == b"content-disposition":
            _, options = parse_options_header(self._header_value)
            self._part_name = options.get(b"name", b"").decode("utf-8", "replace")
            if self._part_name == "file":
                if len(self.files) >= self.max_files:
                    if self.max_files == 1:
                        raise InvalidInput("Only one file per upload.", field="file")
                    raise InvalidInput(
                        f"At most {self.max_files} files per bulk upload.", field="file"
                    )
                self._part_is_file = True
                filename = options.get(b"filename", b"").decode("utf-8", "replace")
                self.writer = receive_original(self.blobs, self.max_bytes)
                self.files.append((self.writer, filename))
        self._header_name, self._header_value = b"", b""

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._part_is_file:
            assert self.writer is not None
            self.total += end - start
            if self.max_total is not None and self.total > self.max_total:
                raise PayloadTooLarge(
                    f"The files are larger than the limit of {self.max_total} bytes in all.",
                    limitBytes=self.max_total,
                )
            self.writer.write(data[start:end])
            return
        self._buffer += data[start:end]
        if len(self._buffer) > MAX_FIELD_BYTES:
            raise InvalidInput("A form field is too long.", field=self._part_name)

    def on_part_end(self) -> None:
        if not self._part_is_file and self._part_name:
            if len(self.fields) >= MAX_FIELDS:
                raise InvalidInput("Too many form fields.")
            self.fields[self._part_name] = self._buffer.decode("utf-8", "replace")

    def callbacks(self) -> dict[str, object]:
        names = [
            "part_begin",
            "header_field",
            "header_value",
            "header_end",
            "part_data",
            "part_end",
        ]
        return {f"on_{name}": getattr(self, f"on_{name}") for name in names}


async def _parse(
    content_type: str, body: AsyncIterator[bytes], collector: _Collector, what: str
) -> None:
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise InvalidInput(
            f"Send {what} as multipart/form-data with a part named 'file'.", field="file"
        )
    parser = MultipartParser(boundary, collector.callbacks())  # type: ignore[arg-type]
    try:
        async for chunk in body:
            parser.write(chunk)
        parser.finalize()
    except MultipartParseError as exc:
        _abort(collector)
        raise InvalidInput("The multipart body is malformed.", field="file") from exc
    except BaseException:
        _abort(collector)
        raise
    if not collector.files:
        _abort(collector)
        raise InvalidInput("The upload has no part named 'file'.", field="file")


def _abort(collector: _Collector) -> None:
    for writer, _filename in collector.files:
        writer.abort()


async def parse_upload(
    content_type: str, body: AsyncIterator[bytes], blobs: BlobStore, max_bytes: int
) -> ParsedUpload:
    """Stream a ``multipart/form-data`` body; the part named ``file`` is the document."""
    collector = _Collector(blobs, max_bytes)
    await _parse(content_type, body, collector, "the document")
    writer, filename = collector.files[0]
    blob = writer.commit()
    return ParsedUpload(blob, writer.head, filename, collector.fields)


async def parse_bulk_upload(
    content_type: str,
    body: AsyncIterator[bytes],
    blobs: BlobStore,
    max_bytes: int,
    max_files: int,
    max_total: int,
) -> tuple[list[ParsedFile], dict[str, str]]:
    """Stream a ``multipart/form-data`` body of up to ``max_files`` parts named ``file`` (each
    at most ``max_bytes``, ``max_total`` in all): the stored files in order, and the text
    fields."""
    collector = _Collector(blobs, max_bytes, max_files, max_total)
    await _parse(content_type, body, collector, "the documents")
    files = []
    try:
        for writer, filename in collector.files:
            files.append(ParsedFile(writer.commit(), writer.head, filename))
    except BaseException:
        _abort(collector)
        raise
    return files, collector.fields
