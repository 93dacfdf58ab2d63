"""Server processes of the benchmarks: a free port, a clean environment, the process and its
log (in its own process group, so whatever it starts goes with it)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(data_dir: Path) -> dict[str, str]:
    """This environment without LDIMS settings, plus the data dir and a quiet log."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LDIMS_")}
    env.pop("LOG_LEVEL", None)
    env.update(LDIMS_DATA_DIR=str(data_dir), LOG_LEVEL="WARNING")
    return env


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


def launch(command: list[str], data_dir: Path, url: str) -> Server:
    """Start ``command`` on ``data_dir``, its output in ``data_dir/serve.log``."""
    log_path = data_dir / "serve.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            command,
            env=server_env(data_dir),
            cwd=data_dir,  # no stray .env of the caller's folder
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: its children go with it
        )
    return Server(process, url, log_path)
