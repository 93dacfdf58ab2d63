"""A document's text read from its stored extract in bounded pieces, never whole.

An extract is one JSON object on disk (``ExtractionResult.to_json``: ``text``, then
``pages``, then the rest), up to three times the size of the text; loading it whole for a
read of 100,000 characters once cost a 19 MB document ~150 MB of memory per concurrent
reader. :func:`text_pieces` walks the file instead, 64 KiB at a time, and yields the pages'
texts (or ``text`` when there are no pages) decoded piece by piece, a separator between two
pages; :func:`window` takes the lines a reader asked for from such pieces, within a size
bound, and says where the rest starts. Memory is the block plus the window, whatever the
document's size.

A file this walk cannot follow (pages out of order, a shape it does not know) raises
:class:`UnreadableStream`; :func:`read_extract` then reads the extract the ordinary way (the
one place that does, logging it once per file).

A text's sizes (:func:`text_measures`: its length, its line count) cost a walk of the whole
extract; they are kept in a small in-process cache, as extracts are content-addressed and
never change, so paging through a long text or listing many files walks each extract once,
not once per read.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

from ldims.text import ExtractionResult, Separator, line_count, page_texts

BLOCK = 1 << 16
_WHITE = b" \t\r\n"
# The longest run of a JSON string's contents: plain bytes and complete escapes.
_CONTENT = re.compile(rb'(?:[^"\\]+|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*')
_LONGEST_ESCAPE = 6  # \uXXXX
# A long line is cut after a white space of the window's last part when it has one.
_SOFT_CUT = 0.8
# Extracts whose sizes are remembered (a few hundred bytes each): the files one busy
# server reads again within minutes.
MEASURED_EXTRACTS = 4096
log = logging.getLogger(__name__)
T = TypeVar("T")


class UnreadableStream(ValueError):
    """The extract is not laid out as :func:`text_pieces` expects."""


def text_pieces(path: Path, separator: Separator) -> Iterator[str]:
    """The text of the extract at ``path``: its pages' texts in order, ``separator(n)``
    before page ``n`` (n >= 2), or its ``text`` when it has no pages."""
    with open(path, "rb") as handle:
        scanner = _Scanner(handle)
        scanner.take(ord("{"))
        text_at: int | None = None
        while True:
            key = "".join(scanner.string())
            scanner.take(ord(":"))
            if key == "text":
                text_at = scanner.offset()
                scanner.skip_value()
            elif key == "pages":
                pages = _pages(scanner, separator)
                first = next(pages, None)
                if first is not None:
                    yield first
                    yield from pages
                    return
                if text_at is not None:
                    scanner.seek(text_at)
                    yield from scanner.string()
                    return
            else:
                scanner.skip_value()
            if scanner.peek() == ord("}"):
                break
            scanner.take(ord(","))
        if text_at is None:
            raise UnreadableStream("no text in the extract")
        scanner.seek(text_at)
        yield from scanner.string()


def text_value(path: Path) -> Iterator[str]:
    """The extract's ``text`` value itself (what REST's ``content`` pages through by
    character), decoded piece by piece."""
    with open(path, "rb") as handle:
        scanner = _Scanner(handle)
        scanner.take(ord("{"))
        while True:
            key = "".join(scanner.string())
            scanner.take(ord(":"))
            if key == "text":
                yield from scanner.string()
                return
            scanner.skip_value()
            if scanner.peek() == ord("}"):
                raise UnreadableStream("no text in the extract")
            scanner.take(ord(","))


@dataclass(frozen=True)
class Measures:
    """The sizes of an extract's text (what a reader says of the whole without reading it)."""

    pages: int  # pages of text (1: it has none, its ``text`` alone)
    page_chars: int  # characters of the pages' texts, no separators counted
    lines: int  # the document's lines (ldims.text.lines)
    text_chars: int  # characters of the ``text`` value (REST's ``content``)


class _Lru:
    """A bounded map, least recently used out first (shared by a server's threads)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[Hashable, object] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Hashable) -> object | None:
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: object) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


_measured = _Lru(MEASURED_EXTRACTS)
_warned = _Lru(MEASURED_EXTRACTS)


def _key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path), stat.st_size, stat.st_mtime_ns


def read_extract(
    path: Path, streamed: Callable[[], T], whole: Callable[[ExtractionResult], T]
) -> T:
    """``streamed()`` (a read of the extract at ``path`` in pieces); when the walk cannot
    follow the file, ``whole`` of the extract read the ordinary way. That is logged at
    WARNING once per file (its name and why, never its text): a reader paging through it
    does not repeat the line on every page."""
    try:
        return streamed()
    except UnreadableStream as exc:
        key = _key(path)
        if _warned.get(key) is None:
            _warned.put(key, True)
            log.warning("extract %s read whole: %s", path.name, exc)
        return whole(ExtractionResult.from_json(path.read_text(encoding="utf-8")))


def text_measures(path: Path) -> Measures:
    """The sizes of the extract's text, walked once per file (then remembered by path, size
    and modification time)."""
    key = _key(path)
    known = _measured.get(key)
    if isinstance(known, Measures):
        return known
    measures = read_extract(path, lambda: _measure(path), _measure_whole)
    _measured.put(key, measures)
    return measures


def _measure(path: Path) -> Measures:
    """The sizes, from a walk of the pages with nothing between them."""
    pages = 1
    chars = newlines = 0

    def between(number: int) -> str:
        nonlocal pages
        pages += 1
        return ""

    for piece in text_pieces(path, between):
        chars += len(piece)
        newlines += piece.count("\n")
    text_chars = sum(len(piece) for piece in text_value(path))
    return Measures(pages, chars, line_count(newlines, pages), text_chars)


def _measure_whole(result: ExtractionResult) -> Measures:
    texts = page_texts(result)
    newlines = sum(text.count("\n") for text in texts)
    return Measures(
        len(texts), sum(map(len, texts)), line_count(newlines, len(texts)), len(result.text)
    )


def character_slice(pieces: Iterable[str], offset: int, limit: int) -> str:
    """Characters ``offset..offset+limit`` of the text in ``pieces`` (walked no further than
    the slice's end; only the slice is kept)."""
    kept: list[str] = []
    seen = 0
    end = offset + limit
    for piece in pieces:
        start = seen
        seen += len(piece)
        if seen > offset and start < end:
            kept.append(piece[max(offset - start, 0) : end - start])
        if seen >= end:
            break
    return "".join(kept)


def read_pages(path: Path, first: int, last: int, budget: int) -> tuple[list[str], int]:
    """Pages ``first..last`` (counted from 1) of the extract at ``path``, in order, each at
    most ``budget + 1`` characters, no more once ``budget`` characters are gathered (a
    reader showing at most ``budget`` stops there); and how many pages it has (its text
    alone is page 1 when it has no pages)."""
    with open(path, "rb") as handle:
        scanner = _Scanner(handle)
        scanner.take(ord("{"))
        text_at: int | None = None
        count = 0
        texts: list[str] = []
        while True:
            key = "".join(scanner.string())
            scanner.take(ord(":"))
            if key == "text":
                text_at = scanner.offset()
                scanner.skip_value()
            elif key == "pages":
                count = _gather(scanner, first, last, budget, texts)
            else:
                scanner.skip_value()
            if scanner.peek() == ord("}"):
                break
            scanner.take(ord(","))
        if count:
            return texts, count
        if text_at is None:
            raise UnreadableStream("no text in the extract")
        scanner.seek(text_at)
        return ([_beginning(scanner.string(), budget + 1)] if first == 1 else []), 1


def _gather(scanner: _Scanner, first: int, last: int, budget: int, texts: list[str]) -> int:
    """The pages of the ``pages`` array wanted by :func:`read_pages` into ``texts``; how
    many there are."""
    count = gathered = 0
    for count in _page_texts(scanner):
        if first <= count <= last and gathered <= budget:
            texts.append(_beginning(scanner.string(), budget + 1))
            gathered += len(texts[-1])
        else:
            scanner.skip_value()
    return count


def _beginning(pieces: Iterator[str], most: int) -> str:
    """At most ``most`` characters of ``pieces`` (the rest read through, not kept)."""
    kept: list[str] = []
    size = 0
    for piece in pieces:
        if size < most:
            kept.append(piece[: most - size])
            size += len(kept[-1])
    return "".join(kept)


def _pages(scanner: _Scanner, separator: Separator) -> Iterator[str]:
    """The pages' texts (with separators) of the ``pages`` array at the scanner."""
    for position in _page_texts(scanner):
        if position > 1:
            yield separator(position)
        yield from scanner.string()


def _page_texts(scanner: _Scanner) -> Iterator[int]:
    """Walk the ``pages`` array at the scanner: each page's position (from 1), yielded with
    the scanner at that page's text, which the caller reads or skips before going on."""
    scanner.take(ord("["))
    previous = position = 0
    first = True
    while scanner.peek() != ord("]"):
        if not first:
            scanner.take(ord(","))
        first = False
        scanner.take(ord("{"))
        number: int | None = None
        while True:
            key = "".join(scanner.string())
            scanner.take(ord(":"))
            if key == "number":
                number = scanner.integer()
            elif key == "text":
                if number is None or number <= previous:
                    raise UnreadableStream("pages out of order")  # ordered by number to read
                previous = number
                position += 1
                yield position
            else:
                scanner.skip_value()
            if scanner.peek() == ord("}"):
                scanner.take(ord("}"))
                break
            scanner.take(ord(","))
    scanner.take(ord("]"))


class _Scanner:
    """Just enough of a JSON reader over a binary file, one block in memory."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.buf = b""
        self.pos = 0
        self.base = 0  # the file offset of buf[0]

    def offset(self) -> int:
        self.peek()
        return self.base + self.pos

    def seek(self, offset: int) -> None:
        self.handle.seek(offset)
        self.buf, self.pos, self.base = b"", 0, offset

    def _fill(self) -> bool:
        data = self.handle.read(BLOCK)
        if not data:
            return False
        self.base += self.pos
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def peek(self) -> int:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WHITE:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                raise UnreadableStream("the extract ends early")

    def take(self, char: int) -> None:
        if self.peek() != char:
            raise UnreadableStream(f"expected {chr(char)!r} in the extract")
        self.pos += 1

    def string(self) -> Iterator[str]:
        """The string at the scanner, decoded, in pieces of at most a block."""
        self.take(ord('"'))
        while True:
            end = _CONTENT.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            closed = end < len(self.buf) and self.buf[end] == ord('"')
            if not closed and len(self.buf) - end > _LONGEST_ESCAPE:
                raise UnreadableStream("a bad string in the extract")
            cut = end if closed else _utf8_cut(self.buf, self.pos, end)
            if cut > self.pos:
                yield json.loads(b'"' + self.buf[self.pos : cut] + b'"')
            self.pos = cut
            if closed:
                self.pos += 1
                return
            if not self._fill():
                raise UnreadableStream("the extract ends inside a string")

    def integer(self) -> int:
        digits = self._scalar()
        try:
            return int(digits)
        except ValueError:
            raise UnreadableStream("a page number that is not a number") from None

    def _scalar(self) -> bytes:
        self.peek()
        out = b""
        while True:
            start = self.pos
            while self.pos < len(self.buf) and self.buf[self.pos] not in b",]}" + _WHITE:
                self.pos += 1
            out += self.buf[start : self.pos]
            if self.pos < len(self.buf) or not self._fill():
                return out

    def skip_value(self) -> None:
        """Past the value at the scanner (a string never decoded)."""
        head = self.peek()
        if head == ord('"'):
            self.pos += 1
            self._skip_string_body()
        elif head in (ord("{"), ord("[")):
            self.pos += 1
            depth = 1
            while depth:
                char = self.peek()
                self.pos += 1
                if char == ord('"'):
                    self._skip_string_body()
                elif char in (ord("{"), ord("[")):
                    depth += 1
                elif char in (ord("}"), ord("]")):
                    depth -= 1
        else:
            self._scalar()

    def _skip_string_body(self) -> None:
        while True:
            quote = self.buf.find(b'"', self.pos)
            while quote != -1 and _escaped(self.buf, quote):
                quote = self.buf.find(b'"', quote + 1)
            if quote != -1:
                self.pos = quote + 1
                return
            # Keep only a trailing run of backslashes: it escapes the next block's quote.
            end = len(self.buf)
            while end > self.pos and self.buf[end - 1] == ord("\\"):
                end -= 1
            self.pos = end
            if not self._fill():
                raise UnreadableStream("the extract ends inside a string")


def _escaped(buf: bytes, quote: int) -> bool:
    backslashes = 0
    while quote - backslashes - 1 >= 0 and buf[quote - backslashes - 1] == ord("\\"):
        backslashes += 1
    return backslashes % 2 == 1


def _utf8_cut(buf: bytes, start: int, end: int) -> int:
    """``end``, or before a UTF-8 sequence that the block cut in two."""
    lead = end - 1
    while lead >= start and buf[lead] & 0xC0 == 0x80:
        lead -= 1
    if lead < start or buf[lead] < 0xC0:
        return end
    length = 2 if buf[lead] < 0xE0 else 3 if buf[lead] < 0xF0 else 4
    return end if lead + length <= end else lead


@dataclass(frozen=True)
class Window:
    """Lines of a text within a size bound, and where the rest starts."""

    text: str
    first_line: int
    last_line: int  # the last line shown, wholly or its beginning (first_line - 1: none)
    next_line: int | None  # where the rest starts (None: nothing is left)
    next_char: int  # the character of ``next_line`` it starts at (0: the whole line)
    cut: bool  # stopped by the size bound (not by ``max_lines`` or the end)


def window(
    pieces: Iterable[str],
    limit: int,
    from_line: int = 1,
    from_char: int = 0,
    max_lines: int | None = None,
    numbered: bool = False,
) -> Window:
    """Lines ``from_line``.. of the text in ``pieces`` (the first from its character
    ``from_char``), at most ``max_lines``, the result at most ``limit`` characters (with
    ``N: `` before each line when ``numbered``): whole lines, or the beginning of a line
    longer than the bound, cut after a white space when there is one near the end."""
    segments = _from(_segments(pieces), from_line, from_char)
    out: list[str] = []
    size = 0
    line, start = from_line, from_char
    current: list[str] = []
    held = 0  # characters of the current line kept (at most its room + 1)
    for segment, ends in segments:
        prefix = f"{line}: " if numbered else ""
        room = limit - size - (1 if out else 0) - len(prefix)
        if held <= room:
            kept = segment[: room + 1 - held]
            current.append(kept)
            held += len(kept)
        if held > room:  # the line does not fit what is left
            if out:
                return Window("\n".join(out), from_line, line - 1, line, start, True)
            piece = _cut("".join(current), max(room, 1))
            text = prefix + piece
            return Window(text, from_line, line, line, start + len(piece), True)
        if ends is None:  # the end of the text
            out.append(prefix + "".join(current))
            return Window("\n".join(out), from_line, line, None, 0, False)
        if ends:
            out.append(prefix + "".join(current))
            size += len(out[-1]) + (1 if len(out) > 1 else 0)
            line, start, current, held = line + 1, 0, [], 0
            if max_lines is not None and len(out) >= max_lines:
                return Window("\n".join(out), from_line, line - 1, line, 0, False)
    # Past the end before from_line: nothing to show.
    return Window("", from_line, from_line - 1, None, 0, False)


def line_beginnings(pieces: Iterable[str], first: int, most: int) -> Iterator[str]:
    """The lines of the text in ``pieces`` from line ``first`` (counted from 1), each its
    first ``most`` characters at most."""
    current: list[str] = []
    held = 0
    for segment, ends in _from(_segments(pieces), first, 0):
        if held < most:
            current.append(segment[: most - held])
            held += len(current[-1])
        if ends is not False:
            yield "".join(current)
            if ends is None:
                return
            current, held = [], 0


def _cut(text: str, room: int) -> str:
    """At most ``room`` characters of ``text``, ending after a white space of the last part
    when there is one."""
    text = text[:room]
    soft = int(room * _SOFT_CUT)
    space = max(text.rfind(" ", soft), text.rfind("\t", soft))
    return text[: space + 1] if space >= 0 else text


def _segments(pieces: Iterable[str]) -> Iterator[tuple[str, bool | None]]:
    """The text as (part of a line, whether a line end follows); the last is
    (rest, None)."""
    for piece in pieces:
        parts = piece.split("\n")
        if len(parts) == 1:
            if parts[0]:
                yield parts[0], False
            continue
        yield parts[0], True
        for part in parts[1:-1]:
            yield part, True
        if parts[-1]:
            yield parts[-1], False
    yield "", None


def _from(
    segments: Iterator[tuple[str, bool | None]], from_line: int, from_char: int
) -> Iterator[tuple[str, bool | None]]:
    """``segments`` from character ``from_char`` of line ``from_line`` (counted from 1)."""
    line = 1
    for segment, ends in segments:
        if line == from_line:
            if from_char:
                if len(segment) <= from_char:
                    from_char -= len(segment)
                    segment = ""
                else:
                    segment, from_char = segment[from_char:], 0
            yield segment, ends
            if ends is not False:  # the line is over: the rest follows unchanged
                yield from segments
                return
        elif ends is None:
            return
        if ends:
            line += 1
