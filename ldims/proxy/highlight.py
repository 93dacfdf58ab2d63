"""Snippets of ``doc_local_search``: masked first, highlighted after, on the masked text.

The index cuts a snippet around the query's words and marks them ``**bold**``. Masked after
that, a card number, an e-mail or a ``password=…`` pair split by the marks
(``**4111** 1111 1111 1111``, ``jane@**acme**.com``) no longer matches its pattern and came
back raw. So the proxy asks the index for a wide window (the whole chunk, as a rule: chunks
are shorter), takes the marks out, masks that text whole, and only then cuts the snippet and
marks the query's words, on the masked text: a word that only occurred inside a masked value
is not there to mark, and a marked word can no longer split a value.

A window narrower than its chunk may cut a value at its edge (half a card, the tail of a
token): its first and last words, and :data:`EDGE_CHARS` beside them, are dropped before
masking, so no fragment that masking could not recognise reaches the snippet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from indexer import snippet

ELLIPSIS = "…"
MARK = "**"
# Characters kept from the index per snippet: a chunk is at most 2,000 (ldims.text.chunking cuts
# a longer line in pieces), so the window holds a whole chunk with room to spare.
WIDE_CHARS = 4096
# Longer than any spaced value the masker knows (a card with separators, an IBAN in groups,
# a phone, a passport): a value cut by the wide window's edge lies within this much of it.
EDGE_CHARS = 64


def masked_snippet(
    wide: str, terms: Iterable[str], max_chars: int, mask: Callable[[str], str]
) -> str:
    """A snippet of about ``max_chars`` of ``wide`` (the index's marked window), masked by
    ``mask`` before the query ``terms`` are found and marked in it."""
    plain = wide.replace(MARK, "")  # the index's marks (and a document's own bold: cosmetic)
    if plain.startswith(ELLIPSIS):  # the window began inside its chunk
        plain = ELLIPSIS + _after_edge(plain[len(ELLIPSIS) :])
    if plain.endswith(ELLIPSIS):  # ended inside it
        plain = _before_edge(plain[: -len(ELLIPSIS)]) + ELLIPSIS
    return snippet(mask(plain), list(terms), False, max_chars)


def _after_edge(text: str) -> str:
    """``text`` without its first word and what follows it within :data:`EDGE_CHARS`."""
    first = text.find(" ")
    if first < 0:
        return ""
    cut = text.find(" ", first + EDGE_CHARS)
    return text[cut + 1 :] if cut >= 0 else ""


def _before_edge(text: str) -> str:
    """``text`` without its last word and what precedes it within :data:`EDGE_CHARS`."""
    last = text.rfind(" ")
    if last < 0:
        return ""
    cut = text.rfind(" ", 0, max(0, last - EDGE_CHARS))
    return text[:cut] if cut >= 0 else ""
