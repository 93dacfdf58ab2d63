"""compose.yaml against the real code: services, health-gated start order, pinned images,
``ldims`` commands and options that exist, environment variables that are settings, and a
worker service for every Celery queue the code sends tasks to."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from celery import Celery

import workers.queues
from ldims.settings import Settings
from runtime.cli.main import cli, worker_argv
from workers.celery_app import app as celery_app

COMPOSE_FILE = Path(__file__).resolve().parent.parent / "compose.yaml"

WORKER_SERVICES = {"worker-extract", "worker-index", "worker-ocr", "worker-embed"}
REQUIRED_SERVICES = {"redis", "tika", "postgres", "api", "flower"} | WORKER_SERVICES
MUST_HAVE_HEALTHCHECK = {"redis", "tika", "postgres", "api"}
LDIMS_COMMAND_SERVICES = {"api", "flower"} | WORKER_SERVICES
# Third-party images: their own variables (POSTGRES_USER, ...) are not LDIMS settings.
THIRD_PARTY_SERVICES = {"redis", "tika", "postgres"}


def load_compose() -> dict[str, Any]:
    with COMPOSE_FILE.open(encoding="utf-8") as stream:
        return yaml.safe_load(stream)  # resolves anchors and `<<` merge keys


COMPOSE = load_compose()
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]


SETTING_NAMES = {name for names in Settings.env_names().values() for name in names}
SEED_NAMES = {name for name in SETTING_NAMES if not name.startswith("LDIMS_")}


def env_names(service: dict[str, Any]) -> list[str]:
    """Variable names of a service's ``environment`` (a mapping or a ``KEY=VALUE`` list)."""
    environment = service.get("environment") or {}
    if isinstance(environment, dict):
        return [str(key) for key in environment]
    return [str(item).split("=", 1)[0] for item in environment]


def unknown_env_vars(service: dict[str, Any], strict: bool = True) -> list[str]:
    """Names set in ``service`` that no setting reads.

    ``strict``: every variable must be a setting (LDIMS services); otherwise only
    ``LDIMS_*`` and seed names are checked (third-party images have their own variables).
    """
    unknown = []
    for name in env_names(service):
        upper = name.upper()
        checked = strict or upper.startswith("LDIMS_") or upper in SEED_NAMES
        if checked and upper not in SETTING_NAMES:
            unknown.append(name)
    return unknown


def command_args(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(arg) for arg in command]


def command_problems(command: str | list[str]) -> list[str]:
    """What is wrong with an ``ldims ...`` command line (empty when it parses)."""
    args = shlex.split(command) if isinstance(command, str) else list(command)
    if not args or args[0] != "ldims":
        return [f"not an ldims command: {args!r}"]
    if len(args) < 2 or args[1] not in cli.commands:
        return [f"unknown ldims command: {args[1:2]!r}"]
    name, rest = args[1], args[2:]
    sub = cli.commands[name]
    known = {opt for param in sub.params for opt in (*param.opts, *param.secondary_opts)}
    problems = [
        f"ldims {name}: unknown option {arg.split('=', 1)[0]}"
        for arg in rest
        if arg.startswith("--") and arg != "--" and arg.split("=", 1)[0] not in known
    ]
    try:
        sub.make_context(name, list(rest), resilient_parsing=False)  # parses, does not run
    except click.UsageError as exc:
        problems.append(f"ldims {name}: {exc.format_message()}")
    return problems


def image_problem(image: str) -> str | None:
    """Why an image reference is not pinned (None when it is)."""
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"{image}: no tag"
    tag = last.rsplit(":", 1)[1]
    if not tag or tag == "latest" or "$" in tag:
        return f"{image}: tag {tag!r} is not pinned"
    return None


def routed_queues(app: Celery) -> set[str]:
    """Every queue a task can be sent to: the declared ones, the routes' targets, the
    default, and every queue name of :mod:`workers.queues`."""
    conf = app.conf
    names = {queue.name for queue in conf.task_queues} | {conf.task_default_queue}
    names |= {route["queue"] for route in conf.task_routes.values()}
    names |= {
        value
        for name, value in vars(workers.queues).items()
        if name.endswith("_QUEUE") and isinstance(value, str)
    }
    return names


def consumed_queues(services: dict[str, dict[str, Any]], data_dir: Path) -> dict[str, set[str]]:
    """The Celery queues each ``ldims worker`` service consumes, as the CLI expands them
    (``--queues extract`` consumes ``extract-single`` too)."""
    settings = Settings(data_dir=data_dir)
    consumed = {}
    for name, service in services.items():
        args = command_args(service)
        if args[:2] != ["ldims", "worker"]:
            continue
        params = cli.commands["worker"].make_context("worker", args[2:]).params
        argv = worker_argv(settings, **params)
        consumed[name] = set(argv[argv.index("--queues") + 1].split(","))
    return consumed


def unconsumed_queues(services: dict[str, dict[str, Any]], data_dir: Path) -> set[str]:
    consumed = set().union(*consumed_queues(services, data_dir).values())
    return routed_queues(celery_app) - consumed


# --- the checkers themselves can fail ---------------------------------------------------


def test_env_checker_reports_unknown_names() -> None:
    service = {"environment": {"LDIMS_NOT_A_SETTING": "x", "LDIMS_REDIS_URL": "redis://r"}}
    assert unknown_env_vars(service) == ["LDIMS_NOT_A_SETTING"]
    as_list = {"environment": ["LDIMS_NOT_A_SETTING=x", "LOG_LEVEL=INFO", "FOO=1"]}
    assert unknown_env_vars(as_list) == ["LDIMS_NOT_A_SETTING", "FOO"]
    assert unknown_env_vars(as_list, strict=False) == ["LDIMS_NOT_A_SETTING"]


def test_setting_names_include_prefixed_and_seed_aliases() -> None:
    assert {"LDIMS_DATA_DIR", "LDIMS_FLOWER_BASIC_AUTH", "LOG_LEVEL", "LDIMS_LOG_LEVEL"} <= (
        SETTING_NAMES
    )
    assert {"MCP_REQUEST_TIMEOUT_SECONDS", "SEARCH_MAX_RESULTS_HARD_LIMIT"} <= SEED_NAMES


def test_command_checker_reports_bad_commands() -> None:
    problems = command_problems("ldims worker --no-such-flag")
    assert problems and all("--no-such-flag" in problem for problem in problems)
    assert command_problems("ldims no-such-command")
    assert command_problems(["ldims", "worker", "--concurrency", "many"])  # not an int
    assert command_problems("celery worker")
    assert command_problems("ldims worker --queues extract --concurrency 2") == []


def test_image_checker_reports_unpinned() -> None:
    assert image_problem("apache/tika")
    assert image_problem("apache/tika:latest")
    assert image_problem("localhost:5000/tika")
    assert image_problem("redis:7.4-alpine") is None
    assert image_problem("localhost:5000/tika:3.2.3.0") is None


def test_queue_checker_reports_a_queue_nobody_consumes(tmp_path: Path) -> None:
    assert {"embed", "ocr", "extract-single"} <= routed_queues(celery_app)
    without_embed = {name: s for name, s in SERVICES.items() if name != "worker-embed"}
    assert unconsumed_queues(without_embed, tmp_path) == {"embed"}
    only_api = {"api": SERVICES["api"]}
    assert unconsumed_queues(only_api, tmp_path) == routed_queues(celery_app)


# --- compose.yaml -----------------------------------------------------------------------


def test_required_services_exist() -> None:
    assert REQUIRED_SERVICES - set(SERVICES) == set()


@pytest.mark.parametrize("name", sorted(MUST_HAVE_HEALTHCHECK))
def test_service_has_healthcheck(name: str) -> None:
    healthcheck = SERVICES[name].get("healthcheck") or {}
    assert healthcheck.get("test"), f"{name} has no healthcheck"
    assert not healthcheck.get("disable")


def test_depends_on_long_form_and_health_gated() -> None:
    for name, service in SERVICES.items():
        depends_on = service.get("depends_on", {})
        assert isinstance(depends_on, dict), f"{name}: depends_on must use the long form"
        for target, spec in depends_on.items():
            assert target in SERVICES, f"{name} depends on missing service {target}"
            assert isinstance(spec, dict) and "condition" in spec, f"{name} -> {target}"
            if spec["condition"] == "service_healthy":
                assert SERVICES[target].get("healthcheck", {}).get("test"), (
                    f"{name} waits for {target} to be healthy but it has no healthcheck"
                )


def test_start_order() -> None:
    api_deps = SERVICES["api"]["depends_on"]
    for target in ("redis", "postgres", "tika"):
        assert api_deps[target]["condition"] == "service_healthy"
    for worker in sorted(WORKER_SERVICES):
        assert SERVICES[worker]["depends_on"]["api"]["condition"] == "service_healthy"
    assert SERVICES["flower"]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_images_are_pinned() -> None:
    images = {name: service["image"] for name, service in SERVICES.items() if "image" in service}
    assert images["tika"].startswith("apache/tika:")
    problems = [problem for image in images.values() if (problem := image_problem(image))]
    assert problems == []
    for name, service in SERVICES.items():
        assert "image" in service or "build" in service, f"{name} has neither image nor build"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_ldims_commands_exist(name: str) -> None:
    args = command_args(SERVICES[name])
    if name in LDIMS_COMMAND_SERVICES:
        assert args[:1] == ["ldims"], f"{name} must run an ldims command"
    if args[:1] == ["ldims"]:
        assert command_problems(args) == []


def test_every_routed_queue_has_a_consuming_service(tmp_path: Path) -> None:
    assert unconsumed_queues(SERVICES, tmp_path) == set()
    assert set(consumed_queues(SERVICES, tmp_path)) == WORKER_SERVICES


def test_worker_roles() -> None:
    extract = command_args(SERVICES["worker-extract"])
    index = command_args(SERVICES["worker-index"])
    assert extract[extract.index("--queues") + 1] == "extract"
    assert index[index.index("--queues") + 1] == "index"
    assert index[index.index("--concurrency") + 1] == "1"  # the index has one writer
    assert "--beat" in index and "--beat" not in extract  # exactly one beat
    ocr = command_args(SERVICES["worker-ocr"])
    assert ocr[ocr.index("--queues") + 1] == "ocr" and "--beat" not in ocr
    embed = command_args(SERVICES["worker-embed"])
    assert embed[embed.index("--queues") + 1] == "embed" and "--beat" not in embed
    assert [name for name in WORKER_SERVICES if "--beat" in command_args(SERVICES[name])] == [
        "worker-index"
    ]


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_environment_variables_are_settings(name: str) -> None:
    service = SERVICES[name]
    assert unknown_env_vars(service, strict=name not in THIRD_PARTY_SERVICES) == []


def test_data_dir_volume_shared() -> None:
    declared = set(COMPOSE.get("volumes") or {})
    for name in ("api", *sorted(WORKER_SERVICES)):
        service = SERVICES[name]
        data_dir = service["environment"]["LDIMS_DATA_DIR"]
        mounts = {str(v).split(":")[1]: str(v).split(":")[0] for v in service["volumes"]}
        assert data_dir in mounts, f"{name} does not mount {data_dir}"
        assert mounts[data_dir] in declared, f"{name}: {mounts[data_dir]} is not a named volume"
    sources = {
        str(v).split(":")[0]
        for name in ("api", *sorted(WORKER_SERVICES))
        for v in SERVICES[name]["volumes"]
    }
    assert len(sources) == 1, "api and workers must share one data volume"


def test_common_environment() -> None:
    for name in LDIMS_COMMAND_SERVICES:
        environment = SERVICES[name]["environment"]
        assert environment["LDIMS_REDIS_URL"] == "redis://redis:6379/0"
        assert environment["LDIMS_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert re.search(r"@postgres:5432/", environment["LDIMS_DATABASE_URL"])
    assert "LDIMS_FLOWER_BASIC_AUTH" in SERVICES["flower"]["environment"]


def test_api_healthcheck_hits_health_on_its_port() -> None:
    args = command_args(SERVICES["api"])
    port = args[args.index("--port") + 1]
    test = " ".join(str(part) for part in SERVICES["api"]["healthcheck"]["test"])
    assert f"http://127.0.0.1:{port}/health" in test
