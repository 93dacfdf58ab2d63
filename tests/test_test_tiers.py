"""The fast tier stays in-process: tests/tiers.py marks what starts a process, and a test of
the fast tier that starts one anyway fails."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests import tiers

pytest_plugins = ["pytester"]

# The fixtures of tests/conftest.py that start processes or create a PostgreSQL database.
PROCESS_FIXTURES = {"shared_redis", "redis_server", "postgres_url", "stack_factory", "stack"}
MARKERS = "[pytest]\nmarkers =\n    system: s\n    slow: s\n"

MODULE = """
import subprocess

import pytest


def start_helper():
    return subprocess.run(["true"], check=True)


def indirectly():
    return start_helper()


@pytest.fixture
def helper_server():
    yield indirectly()


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog(request):
    return request.param


def test_pure():
    assert sum([1, 2]) == 3


def test_through_a_fixture(helper_server):
    pass


def test_itself():
    subprocess.run(["true"], check=True)


def test_on_each_catalog(catalog):
    pass


@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_a_dialect_is_only_a_name(dialect):
    assert dialect
"""


def test_no_in_process_test_of_the_run_uses_a_process_fixture(
    request: pytest.FixtureRequest,
) -> None:
    # In `make test-fast` these are the fast tier; in `make test`, every test.
    wrong = [
        item.nodeid
        for item in request.session.items
        if not item.get_closest_marker("system")
        and (
            PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or getattr(item, "callspec", None) is not None
            and item.callspec.params.get("catalog") == "postgresql"
        )
    ]
    assert wrong == []


def test_what_starts_a_process_is_read_from_the_code(pytester: pytest.Pytester) -> None:
    pytester.makeini(MARKERS)
    pytester.makepyfile(test_sample=MODULE)
    collected = pytester.inline_run("--collect-only", plugins=[tiers])
    items = [call.item for call in collected.getcalls("pytest_itemcollected")]
    system = {item.name for item in items if item.get_closest_marker("system")}
    assert system == {"test_through_a_fixture", "test_itself", "test_on_each_catalog[postgresql]"}
    reasons = {item.name: tiers.system_reason(item) for item in items}
    assert reasons["test_through_a_fixture"] == "fixture helper_server names subprocess"
    assert reasons["test_on_each_catalog[postgresql]"] == "run against postgresql"


def test_a_fast_test_that_starts_a_process_fails(pytester: pytest.Pytester) -> None:
    # The audit events a process start raises, raised without starting one.
    pytester.makeini(MARKERS)
    pytester.makepyfile(
        test_sneaky="""
        import sys

        import pytest


        @pytest.fixture
        def forks():
            sys.audit("os.fork")


        def test_starts():
            sys.audit("subprocess.Popen", "redis-server", ["redis-server"], None, None)


        def test_forks_in_a_fixture(forks):
            pass


        def test_connects():
            sys.audit("socket.connect", None, ("127.0.0.1", 5432))


        def test_stays():
            pass
        """
    )
    result = pytester.inline_run(plugins=[tiers])
    passed, _, failed = result.listoutcomes()
    assert [report.head_line for report in passed] == ["test_stays"]
    messages = {report.head_line: str(report.longrepr) for report in failed}
    assert "subprocess.Popen ['redis-server']" in messages["test_starts"]
    assert "fixture forks" in messages["test_forks_in_a_fixture"]
    assert "PostgreSQL" in messages["test_connects"]
    # With a system test in the run (`make test`), nothing is checked: the start is seen only by
    # a watch of our own.
    pytester.makepyfile(test_other="import pytest\n\n@pytest.mark.system\ndef test_x(): pass\n")
    with tiers.watching() as seen:
        result = pytester.inline_run("-k", "starts or test_x", plugins=[tiers])
    result.assertoutcome(passed=2)
    assert seen == ["subprocess.Popen ['redis-server']"]


def test_what_is_marked_by_hand_exists() -> None:
    # A renamed module or test would otherwise fall back into the fast tier unnoticed.
    missing = []
    for modules in tiers.BY_HAND.values():
        for module, tests in modules.items():
            path = Path(__file__).parent / module
            if not path.is_file():
                missing.append(module)
                continue
            tree = ast.parse(path.read_text())
            defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
            if tests != tiers.ALL:
                missing += [f"{module}::{test}" for test in tests if test not in defined]
    assert missing == []
