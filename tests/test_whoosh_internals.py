"""Whoosh's internals are used in one module, for the one version pinned (issue 36).

Behaviour of the paths themselves is held to Whoosh's own elsewhere (tests/test_index.py:
the segments the writer makes; tests/test_index_evaluate.py: postings read by blocks)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from indexer import DocumentIndex
from indexer.whoosh_internals import WHOOSH_VERSION, WhooshVersionError, check_whoosh_version

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("api", "indexer", "ldims", "runtime", "workers")
# What only indexer/whoosh_internals.py may name: private members of Whoosh's segment writer
# and block matcher, and the classes whose internals they are.
PRIVATE = re.compile(
    r"_flush_segment|_close_segment|_cleanup_on_error|_read_data|_next_block|_blocklength"
    r"|_byteids|perdocwriter|matcher\._data|W3LeafMatcher|(?<![A-Za-z])SegmentWriter\b"
)


def test_the_pin_is_the_version_the_internals_were_written_for() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [d for d in project["project"]["dependencies"] if d.startswith("whoosh3")]
    assert pins == [f"whoosh3=={WHOOSH_VERSION}"]
    check_whoosh_version()  # the installed one is that version: no error


def test_another_version_is_refused_with_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(WhooshVersionError) as refused:
        check_whoosh_version("3.55.0")
    message = str(refused.value)
    assert "whoosh3 3.55.0 is installed" in message
    assert f"pip install whoosh3=={WHOOSH_VERSION}" in message
    assert "\n" not in message


def test_opening_an_index_checks_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_whoosh_version.cache_clear()
    monkeypatch.setattr("indexer.whoosh_internals.metadata.version", lambda name: "3.60.1")
    try:
        with pytest.raises(WhooshVersionError, match="3.60.1"):
            DocumentIndex(tmp_path / "index")
        assert not (tmp_path / "index").exists()  # refused before anything was written
    finally:
        check_whoosh_version.cache_clear()


def test_no_other_module_reaches_into_whoosh() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "indexer" / "whoosh_internals.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PRIVATE.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
    # The rule sees what it is meant to: the module itself names each of them.
    source = (ROOT / "indexer" / "whoosh_internals.py").read_text(encoding="utf-8")
    assert {m.group() for m in PRIVATE.finditer(source)} >= {
        "_flush_segment",
        "_close_segment",
        "matcher._data",
        "_next_block",
        "W3LeafMatcher",
        "SegmentWriter",
    }
