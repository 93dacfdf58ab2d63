"""Text in UTF-16 or UTF-32 without a byte-order mark: which of the four encodings it is, if any.

Windows tools (PowerShell's ``>``, ``reg export``, some exporters) write UTF-16 LE with a mark,
but copies and other tools drop it; without it the bytes are neither UTF-8 nor any single-byte
code page, and charset detection guesses a code page and yields nonsense. Each encoding is
tried on a sample, strictly; it must decode to characters of the scripts text is written in
(letters of the common alphabets, CJK, punctuation, white space: no control characters,
private-use or unassigned ranges). UTF-32 is tried first: its text decodes as UTF-16 too, with
a NUL every other character. For UTF-16 the byte order is the one whose high bytes vary less
than its low bytes: a text in one script shares its high byte (00 for ASCII, 04 for Cyrillic,
4E–9F for CJK), which also tells a real UTF-16 text from single-byte text (cp1251, cp1252),
where both bytes of a pair vary alike.
"""

from __future__ import annotations

SAMPLE_BYTES = 64 * 1024
MIN_CHARACTERS = 8
PLAUSIBLE_SHARE = 0.95  # of the sample's characters
HIGH_BYTE_VARIETY = 0.6  # most distinct high bytes, as a share of the distinct low bytes
_WHITESPACE = frozenset("\t\n\r\f")
# Code points of written text: Latin (with extensions), Greek, Cyrillic, Armenian, Hebrew,
# Arabic, Devanagari … Thai, general punctuation and symbols, CJK (punctuation, kana, Han,
# Hangul) and full-width forms.
_TEXT_RANGES = (
    (0x0020, 0x007E),
    (0x00A0, 0x024F),
    (0x0370, 0x058F),
    (0x0590, 0x06FF),
    (0x0900, 0x0E7F),
    (0x1E00, 0x1FFF),
    (0x2000, 0x206F),
    (0x20A0, 0x20CF),
    (0x2100, 0x22FF),
    (0x2460, 0x27BF),
    (0x3000, 0x30FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7AF),
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),
)


def wide_encoding(data: bytes) -> str | None:
    """``utf-32-le``, ``utf-32-be``, ``utf-16-le`` or ``utf-16-be`` when ``data`` (without a
    byte-order mark) is text in it; else None."""
    sample = data[:SAMPLE_BYTES]
    for encoding in ("utf-32-le", "utf-32-be"):
        if _plausible(_decoded(sample, encoding, 4)):
            return encoding
    order = _utf16_byte_order(sample)
    if order is not None:
        encoding = f"utf-16-{order}"
        return encoding if _plausible(_decoded(sample, encoding, 2)) else None
    # Too short to tell by the bytes: the one order that reads as text, if only one does.
    readable = [e for e in ("utf-16-le", "utf-16-be") if _plausible(_decoded(sample, e, 2))]
    return readable[0] if len(readable) == 1 else None


def _decoded(sample: bytes, encoding: str, unit: int) -> str | None:
    usable = sample[: len(sample) - len(sample) % unit]
    for cut in (0, 2):  # the sample may end inside a surrogate pair
        try:
            return usable[: len(usable) - cut].decode(encoding)
        except UnicodeDecodeError:
            if unit != 2:
                return None
    return None


def _plausible(text: str | None) -> bool:
    if text is None or len(text) < MIN_CHARACTERS:
        return False
    good = sum(1 for char in text if char in _WHITESPACE or _in_text_range(ord(char)))
    return good >= PLAUSIBLE_SHARE * len(text)


def _in_text_range(code: int) -> bool:
    return any(low <= code <= high for low, high in _TEXT_RANGES)


def _utf16_byte_order(sample: bytes) -> str | None:
    """``le`` or ``be``: where the high bytes are (those that vary less), or None when
    neither position varies clearly less than the other."""
    usable = sample[: len(sample) - len(sample) % 2]
    if len(usable) < 2 * MIN_CHARACTERS:
        return None
    even, odd = len(set(usable[0::2])), len(set(usable[1::2]))
    if odd <= HIGH_BYTE_VARIETY * even:
        return "le"
    if even <= HIGH_BYTE_VARIETY * odd:
        return "be"
    return None
