"""What every benchmark prints with: percentiles, milliseconds, Markdown tables, and a line
on the machine, including how much CPU the hypervisor took away during the run."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

DASH = "—"


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Linear-interpolated percentile (``pct`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ms(value: float | None) -> str:
    """Seconds as milliseconds with one decimal, or a dash."""
    return DASH if value is None else f"{value * 1000:.1f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _cpu_times() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs since boot; None where /proc/stat is missing."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    values = [int(value) for value in fields]
    steal = values[7] if len(values) > 7 else 0
    # guest times are already counted in user/nice
    return steal, sum(values[:8])


_AT_START = _cpu_times()


def cpu_reference_ms() -> float:
    """Best of five timings of a fixed pure-Python loop.

    Compare it between two reports before comparing their timings: the virtual machines
    this runs on differ from day to day, and pure-Python work scales with it.
    """
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        sum(range(1_000_000))
        best = min(best, time.perf_counter() - started)
    return best * 1000


def machine_line() -> str:
    """The machine, and the CPU share stolen by the hypervisor since the benchmark started.

    This machine is a virtual one whose host is sometimes busy: with half the CPU stolen,
    every timing doubles, so each report says how much was taken while it ran.
    """
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    steal = ""
    end = _cpu_times()
    if _AT_START is not None and end is not None and end[1] > _AT_START[1]:
        share = (end[0] - _AT_START[0]) / (end[1] - _AT_START[1])
        steal = f", CPU stolen by the hypervisor during the run {share:.0%}"
    return (
        f"Machine: os.cpu_count()={os.cpu_count()}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()} {platform.machine()}, load average "
        f"{os.getloadavg()[0]:.2f} at the end{steal}, CPU reference "
        f"`sum(range(10**6))` {cpu_reference_ms():.1f} ms, {now}."
    )


def tenth_rates(times: Sequence[float], total: int | None = None) -> list[float | None]:
    """Rate of each tenth of a run by completion order.

    ``times`` are the completion times (seconds from the start of the run), one per item;
    ``total`` the run's size (default: ``len(times)``). Tenth ``i`` is the items completed
    between the ``i*N/10``-th and the ``(i+1)*N/10``-th completion (the 0th completion is
    the start of the run, t = 0); its rate is its items over that interval. ``None`` for a
    tenth not reached, or one whose items all completed at one instant (a single commit).
    """
    ordered = sorted(times)
    total = len(ordered) if total is None else total
    bounds = [round(i * total / 10) for i in range(11)]

    def at(k: int) -> float | None:
        return 0.0 if k == 0 else ordered[k - 1] if k <= len(ordered) else None

    rates: list[float | None] = []
    for low, high in zip(bounds, bounds[1:], strict=False):
        start, end = at(low), at(high)
        if start is None or end is None or end <= start or high <= low:
            rates.append(None)
        else:
            rates.append((high - low) / (end - start))
    return rates


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def publish(text: str, path: Path) -> None:
    """Print a benchmark's report and write it to ``path`` (overwritten)."""
    print()
    print(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"written to {path}")


def publish_section(page: Path, name: str, text: str) -> None:
    """Write the report ``text`` (its ``# `` title line dropped) as the section ``name`` of
    ``page``, a page several harnesses write (docs/reliability.md); the others' stay."""
    start, end = f"<!-- section {name}: written by bench/{name}.py -->", f"<!-- end {name} -->"
    body = text.split("\n", 1)[1].strip() if text.startswith("# ") else text.strip()
    block = f"{start}\n{body}\n{end}"
    current = page.read_text(encoding="utf-8") if page.exists() else ""
    if start in current and end in current:
        before, rest = current.split(start, 1)
        updated = before + block + rest.split(end, 1)[1]
    else:
        updated = current.rstrip("\n") + "\n\n" + block + "\n"
    page.write_text(updated, encoding="utf-8")
    print(f"section {name} written to {page}")
