"""Readable logs: a request or task id on every line, no line per MCP request at INFO, and a
document failure as one line with its id and code — checked on real loggers, a real API over
HTTP and real Celery workers.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ldims.logs import QUIET_BELOW_WARNING, RequestIdFilter, bound_request_id, setup_logging
from tests.conftest import (
    DOCS,
    ApiServer,
    RedisServer,
    Stack,
    Worker,
    key_of,
    make_settings,
    wait_until,
)

TASK_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# asctime levelname processName [request_id] name: message
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+ \[(?P<id>[^\]]+)\] \S+: ")


class Records(logging.Handler):
    """Keeps the records it is given, behind the request id filter."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(RequestIdFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def ids(self) -> dict[str, str]:
        return {record.getMessage(): record.request_id for record in self.records}  # type: ignore[attr-defined]


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("tests.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """Give back the test process's logging as it was after a test called setup_logging."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    named = {name: logging.getLogger(name).level for name in (*QUIET_BELOW_WARNING, "pdfminer")}
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    for name, value in named.items():
        logging.getLogger(name).setLevel(value)


# --- the request id --------------------------------------------------------------------------
def test_a_record_carries_the_bound_id_and_a_dash_outside(records: Records) -> None:
    log = logging.getLogger("tests.logs")
    log.info("before")
    with bound_request_id("abc") as bound:
        log.info("inside")
        with bound_request_id() as nested:
            log.info("nested")
        log.info("after nested")
    log.info("after")
    assert bound == "abc" and re.fullmatch(r"[0-9a-f]{8}", nested)
    assert records.ids() == {
        "before": "-",
        "inside": "abc",
        "nested": nested,
        "after nested": "abc",
        "after": "-",
    }


def test_ids_do_not_leak_between_threads(records: Records) -> None:
    log = logging.getLogger("tests.logs")
    both_bound = threading.Barrier(2)

    def serve(name: str) -> None:
        with bound_request_id(name):
            both_bound.wait(5)  # both ids bound at once before either logs
            log.info("from %s", name)
            both_bound.wait(5)

    with bound_request_id("parent"):
        threads = [threading.Thread(target=serve, args=(name,)) for name in ("t1", "t2")]
        threads.append(threading.Thread(target=log.info, args=("unbound thread",)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert records.ids() == {"from t1": "t1", "from t2": "t2", "unbound thread": "-"}


def test_ids_do_not_leak_between_asyncio_tasks(records: Records) -> None:
    log = logging.getLogger("tests.logs")

    async def serve(name: str, delay: float) -> None:
        with bound_request_id(name):
            await asyncio.sleep(delay)  # the other task runs, binds and logs meanwhile
            log.info("from %s", name)

    async def both() -> None:
        await asyncio.gather(serve("slow", 0.05), serve("fast", 0.0))
        log.info("after both")

    asyncio.run(both())
    assert records.ids() == {"from slow": "slow", "from fast": "fast", "after both": "-"}


# --- no line per MCP request -----------------------------------------------------------------
@pytest.mark.usefixtures("restored_logging")
def test_mcp_requests_over_http_log_nothing_at_info(
    tmp_path: Path, shared_redis: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("INFO")
    api = ApiServer(make_settings(tmp_path, shared_redis.url)).start()
    capsys.readouterr()  # start-up lines are not per request

    async def requests() -> None:
        async with httpx2.AsyncClient(headers={"X-LDIMS-Tenant": "acme"}, timeout=60) as http:
            transport = streamable_http_client(f"{api.url}/mcp", http_client=http)
            async with Client(transport, mode="legacy") as client:  # type: ignore[arg-type]
                for _ in range(3):
                    await client.list_tools()
                # A failing tool call: the SDK logs "Tool … failed" at INFO.
                missing = await client.call_tool("getDocumentStatus", {"documentId": "doc_missing"})
                assert missing.is_error

    try:
        asyncio.run(requests())
    finally:
        api.stop()
    err = capsys.readouterr().err
    assert "Terminating session" not in err and "failed:" not in err
    assert [line for line in err.splitlines() if " INFO " in line] == []


@pytest.mark.usefixtures("restored_logging")
def test_the_quieted_loggers_still_show_warnings_with_the_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    setup_logging("INFO")
    setup_logging("INFO")  # again, as the CLI group and a command both do: still one handler
    for name in QUIET_BELOW_WARNING:
        logging.getLogger(name).info("per request")
    with bound_request_id("r1"):
        logging.getLogger("mcp.server.streamable_http").warning("worth a look")
        logging.getLogger("httpx").warning("worth a look too")
    logging.getLogger("ldims.test").info("ours at info")
    lines = capsys.readouterr().err.splitlines()
    assert [(LINE.match(line) or pytest.fail(line))["id"] for line in lines] == ["r1", "r1", "-"]
    assert lines[0].endswith("WARNING MainProcess [r1] mcp.server.streamable_http: worth a look")
    assert lines[2].endswith("INFO MainProcess [-] ldims.test: ours at info")


# --- document failures in real workers -------------------------------------------------------
def _wait_for_lines_naming(log_path: Path, document_id: str) -> list[str]:
    """The worker's lines naming the document, once there is one."""

    def lines() -> list[str]:
        return [line for line in log_path.read_text().splitlines() if document_id in line]

    return wait_until(lines, 10)  # type: ignore[no-any-return]


def test_a_failed_document_is_one_warning_line_with_its_id_and_code(stack: Stack) -> None:
    """The fixture's workers log at WARNING: today's ERROR with a traceback is gone."""
    cases = {
        "password.pdf": ((DOCS / "pdfplumber__password-example.pdf").read_bytes(), "ENCRYPTED"),
        "empty.txt": ((DOCS / "unstructured__empty.txt").read_bytes(), "EMPTY_FILE"),
    }
    log_path = stack.extract_worker.log_path
    for name, (data, code) in cases.items():
        document_id = stack.upload(name, data).json()["documentId"]
        record = stack.wait_final(document_id)
        assert record["status"] == "failed" and record["error"]["code"] == code
        lines = _wait_for_lines_naming(log_path, document_id)
        assert len(lines) == 1, lines
        assert re.search(
            rf" WARNING ForkPoolWorker-\d+ \[{TASK_ID}\] workers\.pipeline: "
            rf"document {key_of(document_id)} failed: {code}$",  # tenant/id: whose it is
            lines[0],
        ), lines[0]
        assert record["error"]["message"] not in log_path.read_text()
    text = log_path.read_text()
    assert "Traceback" not in text and "raised" not in text


@pytest.fixture
def info_worker(stack: Stack, tmp_path: Path) -> Iterator[Worker]:
    """The stack's extract worker replaced by one logging at INFO."""
    stack.extract_worker.stop()
    log_path = tmp_path / "extract-info.log"
    worker = Worker(stack.settings, "extract", log_path, log_level="INFO").start()
    yield worker
    worker.stop()


def test_at_info_every_task_line_carries_the_task_id_and_a_failure_stays_one_line(
    stack: Stack, info_worker: Worker
) -> None:
    failed = stack.upload("password.pdf", (DOCS / "unstructured__password.pdf").read_bytes())
    done = stack.upload("fine.txt", b"An ordinary text file.")
    failed_id, done_id = failed.json()["documentId"], done.json()["documentId"]
    record = stack.wait_final(failed_id)
    assert record["status"] == "failed" and record["error"]["code"] == "ENCRYPTED"
    assert stack.wait_final(done_id)["status"] == "completed"

    log_path = info_worker.log_path
    failure = _wait_for_lines_naming(log_path, failed_id)
    assert len(failure) == 1, failure
    task_id = LINE.match(failure[0])["id"]  # type: ignore[index]
    assert re.fullmatch(TASK_ID, task_id)
    assert failure[0].endswith(f"document {key_of(failed_id)} failed: ENCRYPTED")

    text = log_path.read_text()
    # Celery's own lines, in our format: "received" in the main process (no task running
    # there), the other task's "succeeded" inside the pool child, under its task id.
    received = rf"INFO MainProcess \[-\] \S+: Task ldims.extract\[{task_id}\] received"
    assert re.search(received, text), text
    succeeded = rf"\[({TASK_ID})\] celery.app.trace: Task ldims.extract\[\1\] succeeded"
    assert re.search(succeeded, text), text
    # No second line for the failure: Celery's "raised expected" is dropped, no traceback.
    assert "raised" not in text and "Traceback" not in text
    assert record["error"]["message"] not in text
    stamped = [line for line in text.splitlines() if re.match(r"\d{4}-\d\d-\d\d \d\d:", line)]
    assert stamped and all(LINE.match(line) for line in stamped), stamped
