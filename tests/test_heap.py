"""A long-lived worker gives its freed heap back: ``release_free_memory`` (malloc_trim)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT

# In a fresh interpreter: 200 MiB in blocks above pymalloc's size (glibc's heap, below its
# mmap threshold), freed except one block allocated last, which pins the top of the heap:
# glibc keeps the rest resident until told to give it back.
_SCRIPT = textwrap.dedent(
    """
    import psutil
    from workers.heap import release_free_memory

    def rss():
        return psutil.Process().memory_info().rss >> 20

    blocks = [bytes(4000 + i % 64) for i in range(50_000)]
    pin = bytes(5000)
    del blocks
    before = rss()
    release_free_memory()
    print(before, rss())
    """
)


def test_freed_heap_memory_goes_back_to_the_system() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    before, after = map(int, out.split())
    assert before - after > 150, (before, after)
