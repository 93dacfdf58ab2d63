"""The short forms of the load and fault harnesses.

``bench/load.py --short``: 4 official SDK clients over Streamable HTTP on every read tool and
resource of every toolset (sql on a fresh PostgreSQL database) for 20 s, while documents are
uploaded, replaced and deleted and a folder collection changes; it fails on any error under
load, any lost or stuck document, and any disagreement between catalog, index, vectors and the
folder collection.

``bench/faults.py --short``: during a small batch each, the extractor and the index writer
killed, the embedded Redis killed, ``ldims serve`` killed and started again; then with its own
Redis, PostgreSQL, Tika server and a small tmpfs: Redis restarted empty, Tika unreachable,
PostgreSQL crashed, the disk full. It fails on any lost or stuck document, a failure without a
code, or an upload refused other than with a 503 and a code.

``bench/attack.py --short``: tenant globex attacks tenant acme on a fresh ``ldims serve`` with
keys: a flood of expensive searches (acme's search and ``/health`` stay fast), the search
budget as an existence oracle (globex's answers do not change when acme uploads globex's query
words), raw PII through the proxy's highlighting, whole-document reads (memory stays bounded),
idle and slow connections (closed within the timeout).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def short_run(harness: str, output: Path, timeout: float) -> str:
    """Run ``bench/<harness>.py --short`` (none of this environment's LDIMS settings); its
    report, once it exited 0."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LDIMS_")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / harness), "--short", "--output", str(output)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    report = output.read_text() if output.exists() else ""
    assert done.returncode == 0, (report or done.stdout[-3000:]) + done.stderr[-3000:]
    return report


def test_the_short_load_run_passes_every_verdict(tmp_path: Path) -> None:
    report = short_run("load.py", tmp_path / "load.md", 400)
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


def test_the_short_fault_run_recovers_from_every_fault(tmp_path: Path) -> None:
    report = short_run("faults.py", tmp_path / "faults.md", 420)
    rows = [line.split(" | ") for line in report.splitlines() if line.startswith("| ")][1:]
    faults = {row[0].lstrip("| ") for row in rows}
    assert len(faults) == 8 and {"data folder's disk full", "Tika server unreachable"} <= faults
    for row in rows:
        documents, completed, verdict = int(row[4]), int(row[5]), row[-1].rstrip(" |")
        # Every batch's documents were all accepted (11) and all completed: none is a fault's.
        assert (documents, completed, verdict) == (11, 11, "PASS"), (row, _reasons(report))
    assert "**PASS**" in report


def test_the_short_attack_run_finds_no_hole(tmp_path: Path) -> None:
    report = short_run("attack.py", tmp_path / "attack.md", 600)
    verdicts = [line for line in report.splitlines() if line.startswith("**")]
    names = [line.split("**")[2].split(":")[0].strip() for line in verdicts]
    assert names == ["stall", "oracle", "PII", "reads", "idle connections"], report
    assert all(line.startswith("**PASS**") for line in verdicts), report


def _reasons(report: str) -> str:
    """The report's failure reasons and the warnings of the servers' logs, for a failure."""
    reasons = [line for line in report.splitlines() if "reason" in line.lower()]
    for stage in ("embedded", "external"):
        log = Path(tempfile.gettempdir()) / f"ldims-faults-{stage}.log"
        if log.exists():
            lines = log.read_text(errors="replace").splitlines()
            reasons += [
                f"{stage}: {line}" for line in lines if " WARNING " in line or " ERROR " in line
            ][-30:]
    return "\n".join(reasons)
