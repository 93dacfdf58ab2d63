"""The embed stage's calls of the model: a call that fails is split until the chunk it fails on
is found, and that chunk alone is given up.

A model call fails for one of two reasons: the model (or its endpoint) is not answering —
every chunk must wait, none is at fault — or one input is bad for it: a TEI endpoint with
truncation off refuses (4xx) a passage over its length, a model raises on a text, or gives a
vector that is not finite or is zero. After a failure a cheap probe (a query's embedding)
tells the two apart: when the model answers the probe, the failing call is cut in halves and
each half called alone, down to the single chunk that fails — found in about 2·log2(n)
calls — while the other chunks still get their vectors. When it does not, the task stops and
the work waits (:class:`EmbedderDown`). A reason never quotes the text or the error's message
(they may quote the document): only what kind of failure it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from celery.exceptions import SoftTimeLimitExceeded

from indexer.embedding import Embedder, EmbedderUnavailable

BAD_VECTOR = "the model gave no usable vector (not finite, or zero)"


class EmbedderDown(Exception):
    """The model or its endpoint is not answering: every chunk waits."""


class OutOfTime(Exception):
    """The task's time budget ran out in the middle of a split call."""


@dataclass
class Calls:
    """One task's calls of ``embedder``: whether it is known to answer, and the budget."""

    embedder: Embedder
    deadline: float = float("inf")  # time.monotonic() after which no split goes on
    answering: bool = False
    clock: Callable[[], float] = field(default=time.monotonic)

    def embed(self, texts: list[str]) -> tuple[np.ndarray, dict[int, str]]:
        """The vectors of ``texts`` (zero rows for the failed ones) and the failed indexes,
        with the reason. Raises :class:`EmbedderDown` when the model does not answer."""
        try:
            vectors = np.asarray(self.embedder.passages(list(texts)), dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(texts):
                raise ValueError("the model answered with the wrong shape")
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:
            if not self._answers():
                raise EmbedderDown(_reason(exc)) from exc
            if len(texts) == 1:
                return np.zeros((1, self.embedder.dim), np.float32), {0: _reason(exc)}
            return self._split(texts)
        bad = _unusable(vectors)
        if len(bad) < len(texts):
            self.answering = True
        if not bad:
            return vectors, {}
        if len(texts) == 1:
            return np.zeros_like(vectors), {0: BAD_VECTOR}
        failed: dict[int, str] = {}
        for index in bad:  # each again alone: a batch effect, or this text
            self._check_time()
            again, why = self.embed([texts[index]])
            vectors[index] = again[0]
            if why:
                failed[index] = why[0]
        return vectors, failed

    def _split(self, texts: list[str]) -> tuple[np.ndarray, dict[int, str]]:
        middle = len(texts) // 2
        self._check_time()
        left, left_failed = self.embed(texts[:middle])
        self._check_time()
        right, right_failed = self.embed(texts[middle:])
        failed = left_failed | {middle + index: why for index, why in right_failed.items()}
        return np.concatenate([left, right]), failed

    def _check_time(self) -> None:
        if self.clock() >= self.deadline:
            raise OutOfTime()

    def _answers(self) -> bool:
        """Whether the model answers at all: known from an earlier call, else probed."""
        if not self.answering:
            try:
                probe = np.asarray(self.embedder.query("probe"), dtype=np.float32)
                self.answering = not _unusable(probe.reshape(1, -1))
            except SoftTimeLimitExceeded:
                raise
            except Exception:
                self.answering = False
        return self.answering


def _unusable(vectors: np.ndarray) -> list[int]:
    """Rows that are not finite or are (about) zero: normalised vectors have length 1."""
    finite = np.isfinite(vectors).all(axis=1)
    norms = np.linalg.norm(np.where(np.isfinite(vectors), vectors, 0), axis=1)
    return [int(i) for i in np.flatnonzero(~finite | (norms < 0.5))]


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _reason(exc: BaseException) -> str:
    """What kind of failure ``exc`` is, in words (never its message)."""
    chain = _causes(exc)
    for cause in chain:
        response = getattr(cause, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            verb = "refused it" if 400 <= status < 500 else "failed on it"
            return f"the embedding endpoint {verb} ({status})"
    if any("Timeout" in type(cause).__name__ for cause in chain):
        return "the embedding endpoint did not answer in time"
    if isinstance(exc, EmbedderUnavailable):
        inner = chain[1] if len(chain) > 1 else exc
        return f"the embedding endpoint failed on it ({type(inner).__name__})"
    return f"the model failed on it ({type(exc).__name__})"
