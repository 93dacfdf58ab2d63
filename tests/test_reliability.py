"""The load harness's short form (``bench/load.py --short``): 4 official SDK clients over
Streamable HTTP on every read tool and resource of every toolset (sql on a fresh PostgreSQL
database) for 20 s, while documents are uploaded, replaced and deleted and a folder collection
changes; it fails on any error under load, any lost or stuck document, and any disagreement
between catalog, index, vectors and the folder collection."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_short_load_run_passes_every_verdict(tmp_path: Path) -> None:
    output = tmp_path / "load.md"
    env = {key: value for key, value in os.environ.items() if not key.startswith("LDIMS_")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "load.py"), "--short", "--output", str(output)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    report = output.read_text() if output.exists() else ""
    assert done.returncode == 0, (report or done.stdout[-3000:]) + done.stderr[-3000:]
    verdicts = [line for line in report.splitlines() if line.startswith("**")]
    assert len(verdicts) == 3 and all(line.startswith("**PASS**") for line in verdicts), report
    # Every toolset was driven, and every operation had successful calls.
    for operation in (
        "searchDocuments semantic",
        "qmd vsearch",
        "read-query",
        "guide session",
        "read_doc_pages",
        "ldims:// lines",
        "qmd:// resource",
    ):
        row = next(line for line in report.splitlines() if line.startswith(f"| {operation} |"))
        assert int(row.split("|")[2]) > 0, row
