"""Which files of a folder a collection holds: qmd's masks and its rules for what to skip.

A mask is one glob or several joined by commas (commas inside ``{…}`` or ``[…]`` do not
split it), matched against the file's path under the folder with globstar and braces, as
qmd's fast-glob does: ``*.md`` is the folder's own files, ``**/*.md`` every depth. As qmd:
hidden files and folders, and ``node_modules``, ``.git``, ``.cache``, ``vendor``, ``dist``
and ``build`` folders are skipped; symbolic links are never followed (a link to a file or a
folder is skipped), so no path leaves the folder.

Between the scan and the read a file can be swapped for a link to one outside (an outside
file was indexed in 2 of 25 such races when the read opened the path): :func:`open_file`
opens each folder of the path and the file itself without following a link, and reads only
the regular file the scan saw (the same device and inode).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from wcmatch import glob
from wcmatch._wcparse import (
    PatternLimitException,  # what a limit raises (not re-exported)
    WcRegexp,
)

DEFAULT_MASK = "**/*.md"  # qmd's
EXCLUDED_FOLDERS = frozenset({"node_modules", ".git", ".cache", "vendor", "dist", "build"})
_FLAGS = glob.GLOBSTAR | glob.BRACE
# Patterns a glob's braces may expand to (a folder's mask, multi_get's pattern): each is a
# regex tried on every path (one took 0.35 s over 50,000 paths here, ten 4.9 s), so
# `{1..100000}` is refused, not run.
GLOB_PATTERNS = 16
_NO_FOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class FolderFile:
    path: str  # under the folder, POSIX separators, as on disk
    absolute: Path
    size: int
    mtime_ns: int
    root: Path  # the collection's folder
    device: int  # st_dev and st_ino as scanned: the file a read must find
    inode: int


class TooManyPatterns(ValueError):
    """A glob whose braces expand to more than :data:`GLOB_PATTERNS` patterns."""


def compile_glob(patterns: str | list[str], flags: int) -> WcRegexp:
    """The matcher of ``patterns`` (wcmatch ``glob`` flags), compiled once; TooManyPatterns
    when their braces expand past the bound."""
    try:
        return glob.compile(patterns, flags=flags, limit=GLOB_PATTERNS)
    except PatternLimitException:
        raise TooManyPatterns(f"braces expand to more than {GLOB_PATTERNS} patterns") from None


def split_mask(mask: str) -> list[str]:
    """The globs of a mask: split at commas outside braces and brackets (qmd's
    ``splitGlobMask``); a mask of nothing but commas is itself."""
    parts, current, braces, brackets = [], "", 0, 0
    for char in mask:
        if char == "{":
            braces += 1
        elif char == "}" and braces:
            braces -= 1
        elif char == "[":
            brackets += 1
        elif char == "]" and brackets:
            brackets -= 1
        elif char == "," and not braces and not brackets:
            if current.strip():
                parts.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts or [mask]


def check_mask(mask: str) -> str:
    """``mask`` when it can select files under a folder (ValueError: it cannot)."""
    if not mask.strip():
        raise ValueError("the mask is empty")
    for part in split_mask(mask):
        if part.startswith("/") or ".." in part.split("/"):
            raise ValueError(f"the mask {part!r} leaves the folder (absolute or with '..')")
    try:
        compile_glob(split_mask(mask), _FLAGS)
    except TooManyPatterns as exc:
        raise TooManyPatterns(f"the mask's {exc}") from None
    return mask


def matches(path: str, mask: str) -> bool:
    """Whether the path under the folder is one the mask selects."""
    return bool(compile_glob(split_mask(mask), _FLAGS).match(path))


def scan(folder: Path, mask: str) -> Iterator[FolderFile]:
    """The regular files under ``folder`` that ``mask`` selects, in path order."""
    matcher = compile_glob(split_mask(mask), _FLAGS)
    for directory, folders, files in os.walk(folder, followlinks=False):
        # Pruned in place: os.walk then never enters them.
        folders[:] = sorted(
            name
            for name in folders
            if not name.startswith(".")
            and name not in EXCLUDED_FOLDERS
            and not os.path.islink(os.path.join(directory, name))
        )
        base = Path(directory)
        relative = base.relative_to(folder).as_posix()
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = name if relative == "." else f"{relative}/{name}"
            if not matcher.match(path):
                continue
            absolute = base / name
            try:
                info = absolute.lstat()
            except OSError:
                continue  # gone since it was listed, or unreadable
            if not stat.S_ISREG(info.st_mode):
                continue  # a link, a pipe, a device: never followed or read
            yield FolderFile(
                path, absolute, info.st_size, info.st_mtime_ns, folder, info.st_dev, info.st_ino
            )


def open_file(file: FolderFile) -> BinaryIO:
    """``file`` opened for reading: no link followed on the way (a folder of its path or
    the file itself swapped for one raises ``OSError`` ELOOP or ENOTDIR), and only the
    regular file the scan saw (another one there since raises ``OSError`` ESTALE)."""
    *folders, name = file.path.split("/")
    directory = os.open(file.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in folders:
            inner = os.open(part, _NO_FOLLOW | os.O_DIRECTORY, dir_fd=directory)
            os.close(directory)
            directory = inner
        # O_NONBLOCK: a pipe swapped in does not hang the open (fstat refuses it below).
        handle = os.open(name, _NO_FOLLOW | os.O_NONBLOCK, dir_fd=directory)
    finally:
        os.close(directory)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (
            file.device,
            file.inode,
        ):
            raise OSError(errno.ESTALE, "replaced since the folder was scanned")
        os.set_blocking(handle, True)
        return os.fdopen(handle, "rb")
    except BaseException:
        os.close(handle)
        raise
