"""A small Tika-server stand-in over iscc-tika, so the REST backend is tested over real HTTP.

It implements what ``tika-client`` and health checks use, with Tika server's status codes:

* ``GET /tika`` (the greeting health checks look for) and ``GET /version``;
* ``PUT /tika`` (raw body) and ``POST /tika/form`` (multipart field ``upload-file``). With
  ``Accept: application/json`` the answer is Tika's metadata (one value as a string, several
  as a list) plus ``X-TIKA:content``, the XHTML; otherwise the XHTML itself.
* 422 for an encrypted file (the body names ``EncryptedDocumentException``, as a server
  started with ``-stackTrace`` does), for a parse error, and for an empty body
  (``ZeroByteFileException``); 500 for anything else.

It parses with the same Extractor as the in-process backend, so both give the same results.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.conftest import ThreadedServer
from workers.extraction.tika import tika_extractor

_GREETING = "This is Tika Server (LDIMS test double over iscc-tika). Please PUT\n"
_ENCRYPTED = (
    "org.apache.tika.exception.EncryptedDocumentException: Unable to process: document is encrypted"
)
_ZERO_BYTES = "org.apache.tika.exception.ZeroByteFileException: InputStream must have > 0 bytes"


class _ParseFailure(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(body)
        self.status = status
        self.body = body


def _parse(path: Path) -> tuple[str, dict[str, list[str]]]:
    """Stream the XHTML like the in-process backend; learn the reason of a failure like it."""
    extractor = tika_extractor()
    try:
        reader, metadata = extractor.extract_file(str(path))
        chunks = []
        while chunk := reader.read(1024 * 1024):
            chunks.append(bytes(chunk))
    except OSError:  # the stream hides Tika's message; a string parse reveals it
        try:
            extractor.extract_file_to_string(str(path))
        except TypeError as error:
            raise _failure(str(error)) from error
        raise _ParseFailure(500, "org.apache.tika.exception.TikaException: stream failed") from None
    except TypeError as error:
        raise _failure(str(error)) from error
    return b"".join(chunks).decode("utf-8", errors="replace"), metadata


def _failure(message: str) -> _ParseFailure:
    if "ParseError" not in message:  # IoError and the like: not the document's fault
        return _ParseFailure(500, message)
    lowered = message.lower()
    if "encrypt" in lowered or "password" in lowered:
        return _ParseFailure(422, f"{_ENCRYPTED}\n{message}")
    return _ParseFailure(422, f"org.apache.tika.exception.TikaException: {message}")


def _tika_json(metadata: dict[str, list[str]], xhtml: str) -> dict[str, Any]:
    body: dict[str, Any] = {k: v[0] if len(v) == 1 else list(v) for k, v in metadata.items()}
    body["X-TIKA:content"] = xhtml
    return body


async def _answer(request: Request, data: bytes, filename: str | None) -> Response:
    if not data:
        return PlainTextResponse(_ZERO_BYTES, status_code=422)
    suffix = Path(filename or "upload").suffix
    with tempfile.TemporaryDirectory(prefix="tika-server-") as folder:
        path = Path(folder) / f"upload{suffix}"
        path.write_bytes(data)
        try:
            xhtml, metadata = await run_in_threadpool(_parse, path)
        except _ParseFailure as failure:
            return PlainTextResponse(failure.body, status_code=failure.status)
    content_type = (metadata.get("Content-Type") or [""])[0]
    if content_type.endswith("-protected"):
        return PlainTextResponse(_ENCRYPTED, status_code=422)
    if "application/json" in request.headers.get("accept", ""):
        return JSONResponse(_tika_json(metadata, xhtml))
    return Response(xhtml, media_type="text/html; charset=UTF-8")


async def tika_get(request: Request) -> Response:
    return PlainTextResponse(_GREETING)


async def version_get(request: Request) -> Response:
    return PlainTextResponse(f"Apache Tika (iscc-tika {version('iscc-tika')})")


async def tika_put(request: Request) -> Response:
    return await _answer(request, await request.body(), None)


async def tika_form(request: Request) -> Response:
    async with request.form() as form:
        upload = form.get("upload-file")
        if not isinstance(upload, UploadFile):
            return PlainTextResponse("Expected a multipart field named upload-file", 400)
        data = await upload.read()
        return await _answer(request, data, upload.filename)


def create_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/tika", tika_get, methods=["GET"]),
            Route("/tika", tika_put, methods=["PUT"]),
            Route("/tika/form", tika_form, methods=["POST"]),
            Route("/version", version_get, methods=["GET"]),
        ]
    )


@contextmanager
def running_tika_server() -> Iterator[str]:
    """Start the server; yield its base URL (``http://127.0.0.1:<port>``); stop it."""
    server = ThreadedServer(create_app()).start()
    try:
        yield server.url
    finally:
        server.stop()
