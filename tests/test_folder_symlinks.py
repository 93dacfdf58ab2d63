"""A folder collection's file is read only if it is still the regular file the scan saw:
a file or a folder of its path swapped for a link to something outside after the scan is
refused, never read (issue 33: an outside file was indexed in 2 of 25 such races)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ldims.qmd.folders import GLOB_PATTERNS, FolderFile, check_mask, open_file, scan

SECRET = b"the other tenant's secret\n"


def scanned(folder: Path) -> dict[str, FolderFile]:
    return {file.path: file for file in scan(folder, "**/*.md")}


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_bytes(b"# A\n")
    (folder / "sub" / "b.md").write_bytes(b"# B\n")
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.md").write_bytes(SECRET)
    (outside / "sub" / "b.md").write_bytes(SECRET)
    return folder, outside


def test_the_scanned_files_are_read(tree: tuple[Path, Path]) -> None:
    folder, _ = tree
    files = scanned(folder)
    with open_file(files["a.md"]) as handle:
        assert handle.read() == b"# A\n"
    with open_file(files["sub/b.md"]) as handle:
        assert handle.read() == b"# B\n"


def test_a_file_swapped_for_a_link_after_the_scan_is_refused(tree: tuple[Path, Path]) -> None:
    folder, outside = tree
    file = scanned(folder)["a.md"]  # the scan saw a regular file
    (folder / "a.md").unlink()
    (folder / "a.md").symlink_to(outside / "secret.md")  # then the swap
    with pytest.raises(OSError) as refused:
        open_file(file)
    assert refused.value.errno == errno.ELOOP
    # Even a scan-time FolderFile of the link's own inode does not make it readable.
    linked = os.lstat(folder / "a.md")
    forged = FolderFile("a.md", folder / "a.md", 0, 0, folder, linked.st_dev, linked.st_ino)
    with pytest.raises(OSError):
        open_file(forged)


def test_a_folder_swapped_for_a_link_after_the_scan_is_refused(tree: tuple[Path, Path]) -> None:
    folder, outside = tree
    file = scanned(folder)["sub/b.md"]
    (folder / "sub" / "b.md").unlink()
    (folder / "sub").rmdir()
    (folder / "sub").symlink_to(outside / "sub")
    with pytest.raises(OSError) as refused:
        open_file(file)
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR)


def test_a_file_replaced_by_another_after_the_scan_is_refused(tree: tuple[Path, Path]) -> None:
    folder, outside = tree
    file = scanned(folder)["a.md"]
    # A hard link to the outside file, renamed over the scanned one: a regular file at the
    # same path, not a link at all, but another inode than the scan saw.
    os.link(outside / "secret.md", folder / "swap.tmp")
    os.replace(folder / "swap.tmp", folder / "a.md")
    with pytest.raises(OSError) as refused:
        open_file(file)
    assert refused.value.errno == errno.ESTALE


def test_a_pipe_swapped_in_is_refused_without_hanging(tree: tuple[Path, Path]) -> None:
    folder, _ = tree
    file = scanned(folder)["a.md"]
    (folder / "a.md").unlink()
    os.mkfifo(folder / "a.md")
    with pytest.raises(OSError) as refused:
        open_file(file)
    assert refused.value.errno == errno.ESTALE


def test_a_mask_whose_braces_expand_past_the_bound_is_refused() -> None:
    assert check_mask("{notes,docs}/**/*.{md,txt}") == "{notes,docs}/**/*.{md,txt}"
    with pytest.raises(ValueError, match=f"more than {GLOB_PATTERNS} patterns"):
        check_mask("{1..100000}.md")
