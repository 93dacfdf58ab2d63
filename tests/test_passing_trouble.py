"""Troubles of the server, not of the document — a full disk, the catalog database away — are
retried, never recorded as the document's failure (the fault harness, ``bench/faults.py``,
shows it end to end: PostgreSQL crashed, the disk full)."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy

from ldims.errors import TransientError, passing_trouble, passing_trouble_is_transient
from tests.conftest import RedisServer, Stack, free_port, wait_until


def test_a_full_disk_or_quota_is_a_passing_trouble() -> None:
    for number in (errno.ENOSPC, errno.EDQUOT):
        trouble = passing_trouble(OSError(number, os.strerror(number)))
        assert trouble is not None and trouble.code == "DISK_FULL"
    assert passing_trouble(OSError(errno.EACCES, "denied")) is None
    assert passing_trouble(ValueError("a bad file")) is None


def test_an_unreachable_catalog_database_is_a_passing_trouble() -> None:
    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none",
        connect_args={"connect_timeout": 2},
    )
    with pytest.raises(TransientError) as raised, passing_trouble_is_transient():
        engine.connect()
    engine.dispose()
    assert raised.value.code == "CATALOG_UNAVAILABLE"


def test_anything_else_goes_through_unchanged() -> None:
    with pytest.raises(KeyError), passing_trouble_is_transient():
        raise KeyError("not ours to retry")
    # /dev/full: the kernel's always-full device.
    with (
        pytest.raises(TransientError) as raised,
        passing_trouble_is_transient(),
        open("/dev/full", "wb") as full,
    ):
        full.write(b"x")
    assert raised.value.code == "DISK_FULL"


def test_sqlite_finding_its_database_full_is_a_full_disk(tmp_path: Path) -> None:
    # max_page_count: SQLite's own "database or disk is full" (SQLITE_FULL), as on a full disk.
    connection = sqlite3.connect(tmp_path / "lexicon.sqlite3")
    connection.execute("PRAGMA max_page_count = 2")
    with pytest.raises(TransientError) as raised, passing_trouble_is_transient():
        connection.execute("CREATE TABLE chunks (body TEXT)")
        connection.execute("INSERT INTO chunks VALUES (?)", ("x" * 100_000,))
    assert raised.value.code == "DISK_FULL"
    with pytest.raises(sqlite3.OperationalError), passing_trouble_is_transient():
        connection.execute("SELECT * FROM no_such_table")  # a mistake, not a full disk
    connection.close()
    # The same through SQLAlchemy (an SQLite catalog): a full disk, not a catalog away.
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'catalog.sqlite3'}")
    with (
        pytest.raises(TransientError) as raised,
        passing_trouble_is_transient(),
        engine.connect() as catalog,
    ):
        catalog.exec_driver_sql("PRAGMA max_page_count = 2")
        catalog.exec_driver_sql("CREATE TABLE documents (body TEXT)")
        catalog.exec_driver_sql("INSERT INTO documents VALUES (?)", ("x" * 100_000,))
    engine.dispose()
    assert raised.value.code == "DISK_FULL"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts a 1 MiB tmpfs on a folder of the data folder; the filler file is returned."""
    mounted: list[Path] = []

    def mount(folder: str) -> Path:
        mountpoint = tmp_path / "data" / folder
        mountpoint.mkdir(parents=True, exist_ok=True)
        command = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mountpoint)]
        subprocess.run(command, check=True)
        mounted.append(mountpoint)
        return mountpoint / "filler.bin"

    yield mount
    for mountpoint in mounted:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def fill(filler: Path) -> None:
    """Write ``filler`` until its disk is full."""
    with open(filler, "wb", buffering=0) as file, contextlib.suppress(OSError):
        while True:
            file.write(b"\0" * 4096)


@pytest.mark.parametrize("folder", ["extracts", "index"])
def test_a_full_disk_is_waited_out_past_every_retry_and_the_reconcilers_patience(
    stack_factory: Callable[..., Stack],
    redis_server: RedisServer,
    small_disk: Callable[[str], Path],
    folder: str,
) -> None:
    filler = small_disk(folder)
    # One retry and a 3-second patience: a document's own trouble would fail it in seconds.
    stack = stack_factory(
        redis_server.url,
        task_max_retries=1,
        retry_backoff_max_seconds=1,
        stuck_after_seconds=3,
        reconcile_interval_seconds=1,
    )
    fill(filler)
    document_id = stack.upload("waits.txt", b"Written once the disk has room.").json()["documentId"]
    logs = (stack.extract_worker.log_path, stack.index_worker.log_path)

    def retried_often() -> bool:
        text = "".join(log.read_text(errors="replace") for log in logs)
        return text.count(f"{document_id} waits out DISK_FULL") >= 4

    wait_until(retried_often, 60, 0.2)
    record = stack.client.get(f"/api/documents/{document_id}").json()
    assert record["status"] == "processing", record

    filler.unlink()  # the remedy: room again
    record = stack.wait_final(document_id, timeout=60)
    assert (record["status"], record["error"]) == ("completed", None), record
    found = stack.client.get("/api/search", params={"query": "room", "searchMode": "exact"}).json()
    assert [hit["documentId"] for hit in found["results"]] == [document_id], found
