"""An optional reranker: a user-supplied ONNX cross-encoder that scores (query, passage) pairs.

No package on the registries ships cross-encoder weights, so none is bundled and reranking is
off by default. A user who exports one (e.g. a BGE or MiniLM reranker with Hugging Face's
``optimum`` exporter) points ``LDIMS_RERANKER_MODEL`` at the ``.onnx`` file and
``LDIMS_RERANKER_TOKENIZER`` at its ``tokenizer.json``; semantic searches then reorder their
best ``LDIMS_RERANK_TOP`` documents by its score of the query against each one's passage.

The model is run with ``onnxruntime`` on the CPU; its inputs are taken from its own graph
(``input_ids``, ``attention_mask``, and ``token_type_ids`` when it has one), the pair encoded
by the ``tokenizers`` library, truncated to ``max_tokens``. Its first output is the score:
one logit per pair, or per class (the last is taken: "relevant").
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

import numpy as np

__all__ = ["OnnxCrossEncoder", "Reranker"]


class Reranker(Protocol):
    def scores(self, query: str, passages: list[str]) -> np.ndarray:
        """One relevance score per passage (higher is better)."""
        ...


class OnnxCrossEncoder:
    """A cross-encoder exported to ONNX, with its Hugging Face ``tokenizer.json``."""

    def __init__(self, model: Path, tokenizer: Path, max_tokens: int = 512) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # searches run side by side; one core each
        self._session = onnxruntime.InferenceSession(
            str(model), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {item.name for item in self._session.get_inputs()}
        self._tokenizer = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.enable_truncation(max_tokens)
        self._tokenizer.enable_padding()
        self._lock = threading.Lock()  # the tokenizer's padding state is shared

    def scores(self, query: str, passages: list[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float32)
        with self._lock:
            encoded = self._tokenizer.encode_batch([(query, passage) for passage in passages])
        feeds = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
        }
        outputs = self._session.run(None, {k: v for k, v in feeds.items() if k in self._inputs})
        logits = np.asarray(outputs[0], dtype=np.float32)
        return logits.reshape(len(passages), -1)[:, -1]
