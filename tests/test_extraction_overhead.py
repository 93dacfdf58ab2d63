"""The extractor process's own cost per file stays small next to a small file's extraction,
and its memory watch still sees every process the extractor starts."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from workers.extraction import ExtractionLimits, ExtractionSandbox
from workers.extraction.sandbox import _descendants, _rss

WORDS = ["archive", "ledger", "invoice", "contract", "policy", "budget", "sprint", "vendor"]
LINES = ["Отчёт о проверке качества данных за третий квартал.", "合同有效期延长至年底。"]


@pytest.fixture
def sandbox() -> Iterator[ExtractionSandbox]:
    box = ExtractionSandbox(recycle_after=1000)
    yield box
    box.close()


def small_files(directory: Path, count: int) -> list[Path]:
    rng = random.Random(15)
    paths = []
    for number in range(count):
        lines = [f"# Report {number}"]
        while sum(len(line) for line in lines) < rng.randint(1000, 6000):
            lines.append(
                " ".join(rng.choices(WORDS, k=12)) if rng.random() < 0.7 else rng.choice(LINES)
            )
        path = directory / f"report-{number}.md"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def test_small_files_cost_the_extractor_child_little_cpu(
    tmp_path: Path, sandbox: ExtractionSandbox
) -> None:
    # A full collection over the parsers' ~100,000 objects after every file made each small
    # file cost the child ~25 ms of CPU; the extraction itself takes under 1 ms.
    files = small_files(tmp_path, 100)
    limits = ExtractionLimits()
    sandbox.run(files[0], "text/markdown", limits)
    assert sandbox.pid is not None
    child = psutil.Process(sandbox.pid)
    before = sum(child.cpu_times()[:2])
    for path in files:
        assert sandbox.run(path, "text/markdown", limits).metadata["language"]
    per_file = (sum(child.cpu_times()[:2]) - before) / len(files)
    assert sandbox.pid == child.pid and per_file < 0.008


def test_the_memory_watch_counts_children_and_grandchildren() -> None:
    # The tree psutil finds by reading the stat file of every process on the machine.
    grandparent = "import subprocess, time; subprocess.Popen(['sleep', '30']); time.sleep(30)"
    outer = (
        "import subprocess, sys, time\n"
        "subprocess.Popen(['sleep', '30'])\n"
        f"subprocess.Popen([sys.executable, '-c', {grandparent!r}])\n"
        "time.sleep(30)\n"
    )
    started = subprocess.Popen([sys.executable, "-c", outer])
    process = psutil.Process(started.pid)
    try:
        deadline = time.monotonic() + 10
        while len(expected := process.children(recursive=True)) < 3:
            assert time.monotonic() < deadline, "the process tree did not start"
            time.sleep(0.05)
        assert sorted(_descendants(process)) == sorted(child.pid for child in expected)
        total = process.memory_info().rss + sum(child.memory_info().rss for child in expected)
        assert abs(_rss(process) - total) < 4 * 1024 * 1024
    finally:
        for child in process.children(recursive=True):
            child.kill()
        started.kill()
        started.wait()
