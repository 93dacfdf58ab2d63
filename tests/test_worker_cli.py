"""``ldims worker``: the index queue gets exactly one process, whatever the options."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ldims.settings import Settings
from runtime.cli.main import cli, worker_argv


def _concurrency(argv: list[str]) -> int:
    return int(argv[argv.index("--concurrency") + 1])


@pytest.mark.parametrize(
    ("queues", "concurrency", "processes", "consumed"),
    [
        # the default: once two index processes
        ("extract,index", None, 1, "extract,index,extract-single,index-single"),
        ("index", None, 1, "index,index-single"),
        ("index", 1, 1, "index,index-single"),
        ("index,extract", 1, 1, "index,extract,extract-single,index-single"),
        ("extract", None, 3, "extract,extract-single"),  # LDIMS_EXTRACT_CONCURRENCY
        ("extract", 5, 5, "extract,extract-single"),
        ("extract-single", 2, 2, "extract-single"),
        ("ocr", None, 2, "ocr"),  # LDIMS_OCR_CONCURRENCY
        ("ocr", 3, 3, "ocr"),
    ],
)
def test_the_index_queue_runs_one_process(
    tmp_path: Path, queues: str, concurrency: int | None, processes: int, consumed: str
) -> None:
    settings = Settings(data_dir=tmp_path, extract_concurrency=3, ocr_concurrency=2)
    argv = worker_argv(settings, queues, concurrency, beat=False, hostname=None)
    assert _concurrency(argv) == processes
    # The writer's one-at-a-time queue always rides with the index queue.
    assert argv[argv.index("--queues") + 1] == consumed


def test_the_single_queue_alone_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="consumed with the index queue"):
        worker_argv(Settings(data_dir=tmp_path), "index-single", None, beat=False, hostname=None)


@pytest.mark.parametrize("queues", ["index", "extract,index", " index , extract"])
def test_more_than_one_index_process_is_refused(tmp_path: Path, queues: str) -> None:
    result = CliRunner().invoke(
        cli,
        ["worker", "--queues", queues, "--concurrency", "2"],
        env={"LDIMS_DATA_DIR": str(tmp_path)},
    )
    assert result.exit_code == 2  # a usage error, before any worker starts
    assert "one writer" in result.output


@pytest.mark.parametrize("queues", ["ocr,extract", "index,ocr"])
def test_the_ocr_queue_runs_alone(tmp_path: Path, queues: str) -> None:
    # Its workers run at their own CPU priority: sharing a pool would lower the others'.
    with pytest.raises(ValueError, match="OCR queue"):
        worker_argv(Settings(data_dir=tmp_path), queues, None, beat=False, hostname=None)


def test_no_queue_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one queue"):
        worker_argv(Settings(data_dir=tmp_path), " , ", None, beat=False, hostname=None)


def test_workers_leave_out_gossip_and_mingle(tmp_path: Path) -> None:
    # Their pub/sub can leave a worker taking nothing after a Redis restart (celery#8030).
    argv = worker_argv(Settings(data_dir=tmp_path), "index", None, beat=True, hostname=None)
    assert {"--without-gossip", "--without-mingle"} <= set(argv)
    assert "--without-heartbeat" not in argv  # Flower shows workers by their heartbeats
