"""qmd's ways with text and names: docids, ``qmd://`` URIs, ``file:line`` arguments, line
numbers and snippets — each as qmd 2.8.3 does it (``dist/store.js``,
``dist/mcp/server.js``), so that the same folder gives the same answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

SNIPPET_CHARS = 300  # the seed's (and qmd's MCP tools')
_RANGE = re.compile(r":(\d+):(\d+)$")
_LINE = re.compile(r":(\d+)$")
_DOCID = re.compile(r"^#?([0-9a-fA-F]{6,64})$")
# JavaScript's encodeURIComponent leaves these unescaped.
_URI_SAFE = "-_.!~*'()"


def docid(sha256: str) -> str:
    """``#`` + the first 6 hex digits of the content's SHA-256 (qmd's short docid)."""
    return "#" + sha256[:6]


def docid_of(argument: str) -> str | None:
    """The lowercase hex of a docid argument (``#abc123``, ``abc123``, quoted), else None."""
    match = _DOCID.match(argument.strip().strip("\"'"))
    return match.group(1).lower() if match else None


def encode_path(path: str) -> str:
    """Each segment percent-encoded as JavaScript's ``encodeURIComponent``, slashes kept."""
    return "/".join(quote(segment, safe=_URI_SAFE) for segment in path.split("/"))


def qmd_uri(display_path: str) -> str:
    return "qmd://" + encode_path(display_path)


def decode_path(path: str) -> str:
    """A path from a ``qmd://`` URI, each segment URL-decoded once more while it still holds
    an escape (clients encode the URI, and some encode it twice)."""
    segments = []
    for segment in path.split("/"):
        for _ in range(3):
            decoded = unquote(segment)
            if decoded == segment:
                break
            segment = decoded
        segments.append(segment)
    return "/".join(segments)


@dataclass(frozen=True)
class FileArgument:
    lookup: str
    from_line: int | None
    max_lines: int | None


def parse_file_argument(
    file: str, from_line: int | None = None, max_lines: int | None = None
) -> FileArgument:
    """``path``, ``path:120`` (from line 120) or ``path:120:40`` (40 lines from 120); the
    explicit ``from_line`` / ``max_lines`` win over the suffix (qmd's ``get``)."""
    lookup = file
    ranged = _RANGE.search(lookup)
    if ranged:
        from_line = int(ranged.group(1)) if from_line is None else from_line
        max_lines = int(ranged.group(2)) if max_lines is None else max_lines
        lookup = lookup[: ranged.start()]
    else:
        line = _LINE.search(lookup)
        if line:  # stripped even when from_line is given (qmd's lookup strips it too)
            from_line = int(line.group(1)) if from_line is None else from_line
            lookup = lookup[: line.start()]
    if from_line is not None:
        from_line = max(1, from_line)
    return FileArgument(lookup, from_line, max_lines)


def add_line_numbers(text: str, start: int = 1) -> str:
    """``N: line`` for each line (qmd's ``addLineNumbers``)."""
    return "\n".join(f"{start + i}: {line}" for i, line in enumerate(text.split("\n")))


def with_context(text: str, context: str | None) -> str:
    return f"<!-- Context: {context} -->\n\n{text}" if context else text


def snippet(text: str, first_line: int, query: str, limit: int = SNIPPET_CHARS) -> tuple[int, str]:
    """The line of ``text`` (whose first line is ``first_line``) holding most of the query's
    words, with one line before and two after, cut to ``limit`` characters and numbered
    (qmd's ``extractSnippet`` + ``addLineNumbers``); and that line's number."""
    lines = text.split("\n")
    terms = [term for term in query.lower().split() if term]
    best, best_score = 0, -1
    for number, line in enumerate(lines):
        lower = line.lower()
        score = sum(1 for term in terms if term in lower)
        if score > best_score:
            best, best_score = number, score
    start = max(0, best - 1)
    excerpt = "\n".join(lines[start : best + 3])
    if len(excerpt) > limit:
        excerpt = excerpt[: limit - 3] + "..."
    return first_line + best, add_line_numbers(excerpt, first_line + start)
