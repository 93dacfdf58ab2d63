"""Hostile REST requests, property-based (schemathesis over the app's own OpenAPI schema): every
operation of ``app.openapi()``, sent without a key, with tenant *acme*'s key and with tenant
*globex*'s, gets requests drawn from its schema and requests that break it (schemathesis'
positive and negative modes, acme's real document ids among the path parameters). Every
answer comes within the time limit, is never a 5xx, conforms to the status codes, content
types and bodies the schema declares, holds no stack trace or path of the server's files, and
no answer to globex or to the anonymous caller holds acme's document ids or secret word.

Real parts: the API over real HTTP (uvicorn on port 0) with its workers on Redis, API keys of
two tenants in the catalog (so the key decides the tenant), acme's documents uploaded and
completed first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.errors import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from runtime import build_services
from tests.conftest import DOCS, ROOT, RedisServer, Stack, make_settings

SECONDS = 10.0  # one request at most
EXAMPLES = 50  # per operation and caller, positive and negative mixed
SECRET_WORD = "zqvelmorantic"  # only acme's documents hold it
ACME_TEXT = f"# Acme merger plan\n\nThe {SECRET_WORD} merger closes in March.\n"
# Line ranges as a client writes them, and ones at or past the bounds.
LINES = st.one_of(
    st.from_regex(r"\A[0-9]{1,4}(-[0-9]{1,4})?\Z"),
    st.sampled_from(["0", "0-0", "3-1", "-1", "1-", "1--2", "1-99999999999999999999", "1 - 2"]),
)
CALLERS = ("anonymous", "acme", "globex")
ROUTES = (
    ("DELETE", "/api/documents/{document_id}"),
    ("GET", "/api/documents"),
    ("GET", "/api/documents/{document_id}"),
    ("GET", "/api/documents/{document_id}/content"),
    ("GET", "/api/documents/{document_id}/lines/{lines}"),
    ("GET", "/api/search"),
    ("GET", "/health"),
    ("POST", "/api/documents"),
    ("POST", "/api/documents/bulk"),
    ("POST", "/api/webhooks/ingest"),
    ("POST", "/internal/mcp/execute"),
)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


class Env:
    """The running stack, the callers' headers, acme's documents and the schema under test."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.services = build_services(stack.settings)
        scopes = ["read", "ingest", "admin", "guide"]
        self.headers: dict[str, dict[str, str]] = {"anonymous": {}}
        for tenant in ("acme", "globex"):
            key = self.services.keys.create(tenant, scopes).key
            self.headers[tenant] = {"Authorization": f"Bearer {key}"}
        self.kept: list[str] = []  # acme's documents that stay
        self.spare = ""  # the one acme may delete
        self.http = requests.Session()
        schema = stack.client.get("/openapi.json", headers=self.headers["acme"])
        assert schema.status_code == 200, schema.text
        self.schema = schemathesis.openapi.from_dict(schema.json())
        # A stack trace, or a path of the server's files.
        self.insides = (
            "Traceback",
            'File "/',
            "site-packages",
            "/work/",
            str(ROOT),
            str(stack.settings.data_dir),
        )

    def upload(self, tenant: str, name: str, data: bytes) -> str:
        response = self.stack.client.post(
            "/api/documents", files={"file": (name, data)}, headers=self.headers[tenant]
        )
        assert response.status_code == 202, response.text
        document_id: str = response.json()["documentId"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            body = self.stack.client.get(
                f"/api/documents/{document_id}", headers=self.headers[tenant]
            ).json()
            if body["status"] in ("completed", "failed"):
                assert body["status"] == "completed", body
                return document_id
            time.sleep(0.1)
        raise AssertionError(f"{document_id} not processed\n{self.stack.log_tail()}")

    @property
    def acme(self) -> list[str]:
        """Acme's document ids."""
        return [*self.kept, self.spare]

    def close(self) -> None:
        self.http.close()
        self.services.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("hostile-rest")
    settings_ = make_settings(tmp, shared_redis.url.rsplit("/", 1)[0] + "/14")
    stack = Stack(settings_, tmp).start()
    environment = Env(stack)
    try:
        environment.kept = [
            environment.upload("acme", "merger.md", ACME_TEXT.encode()),
            environment.upload("acme", "wiki.md", (DOCS / "docling__wiki.md").read_bytes()),
        ]
        environment.spare = environment.upload("acme", "spare.md", b"# Spare\n\nTo delete.\n")
        environment.upload("globex", "notes.md", b"# Globex notes\n\nA picnic.\n")
        yield environment
    finally:
        stack.stop()
        environment.close()


def cases(env: Env, caller: str, method: str, path: str) -> st.SearchStrategy[Case]:
    """Requests of both modes; where a path names a document, acme's ids among them (acme
    deletes only its spare document, so that the others stay for the other routes)."""
    operation = env.schema[path][method]
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    drawn = [operation.as_strategy(mode) for mode in modes]
    if "{document_id}" in path:
        ids = [env.spare] if (caller, method) == ("acme", "DELETE") else env.acme
        named = st.fixed_dictionaries({"document_id": st.sampled_from(ids)})
        if "{lines}" in path:
            named = st.fixed_dictionaries({"document_id": st.sampled_from(ids), "lines": LINES})
        drawn += [
            named.flatmap(
                lambda names, mode=mode: operation.as_strategy(mode, path_parameters=names)
            )
            for mode in modes
        ]
    return st.one_of(drawn)


def request_text(response: schemathesis.Response) -> str:
    request = response.request
    body = request.body or b""
    return str(request.url) + (body.decode("utf-8", "replace") if isinstance(body, bytes) else body)


def problems(env: Env, caller: str, response: schemathesis.Response, seconds: float) -> list[str]:
    """What is wrong with an answer beyond schemathesis' checks: slow, a trace or a path of
    the server's, acme's ids or secret word shown to another caller."""
    found = []
    if seconds >= SECONDS:
        found.append(f"took {seconds:.1f}s")
    text = response.content.decode("utf-8", "replace")
    found += [f"shows {inside!r}" for inside in env.insides if inside in text]
    if caller != "acme":
        asked = request_text(response)
        for name in [*env.acme, SECRET_WORD]:
            if name in text and (name not in asked or response.status_code < 300):
                found.append(f"shows acme's {name} (status {response.status_code})")
    return found


def fuzz(env: Env, caller: str, method: str, path: str) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases(env, caller, method, path))
    def property_(case: Case) -> None:
        headers = env.headers[caller]
        started = time.monotonic()
        response = case.call(
            base_url=env.stack.api.url, session=env.http, headers=headers, timeout=SECONDS
        )
        seconds = time.monotonic() - started
        case.validate_response(response, checks=CHECKS, headers=headers)
        assert not problems(env, caller, response, seconds), response.content[:500]

    property_()


def test_every_operation_is_fuzzed(env: Env) -> None:
    operations = {
        (result.ok().method.upper(), result.ok().path) for result in env.schema.get_all_operations()
    }
    assert operations == set(ROUTES)


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("caller", CALLERS)
def test_hostile_requests(env: Env, caller: str, method: str, path: str) -> None:
    fuzz(env, caller, method, path)
    if caller != "acme":  # nothing of acme's was touched
        for document_id in env.kept:
            status = env.stack.client.get(
                f"/api/documents/{document_id}", headers=env.headers["acme"]
            )
            assert status.status_code == 200 and status.json()["status"] == "completed"


def test_the_checks_fire_on_a_bad_answer(env: Env) -> None:
    """The control: a real answer to acme, judged as if globex had got it, shows acme's ids;
    made a slow 500 holding a trace and a path, it fails schemathesis' checks and ours."""
    case = env.schema["/api/documents"]["GET"].Case(query={"limit": 100})
    headers = env.headers["acme"]
    real = case.call(base_url=env.stack.api.url, session=env.http, headers=headers)
    case.validate_response(real, checks=CHECKS, headers=headers)
    assert not problems(env, "acme", real, 0.1)
    shown = problems(env, "globex", real, 0.1)
    assert {f"shows acme's {name} (status 200)" for name in env.kept} <= set(shown), shown
    trace = f'Traceback (most recent call last):\n  File "{ROOT}/api/app.py", line 1\n'
    # A deployment's own path too, wherever this checkout lies (a clone outside /work).
    trace += '  File "/work/ldims/api/app.py", line 2\n'
    trace += f"OSError: {env.stack.settings.data_dir}/blobs"
    bad = schemathesis.Response(
        500, {"content-type": ["text/plain"]}, trace.encode(), real.request, 11, True
    )
    with pytest.raises(FailureGroup, match="Server error"):
        case.validate_response(bad, checks=CHECKS, headers=headers)
    shown = problems(env, "anonymous", bad, SECONDS + 1)
    insides = [f"shows {inside!r}" for inside in env.insides if inside != "site-packages"]
    assert shown == [f"took {SECONDS + 1:.1f}s", *insides], shown
