"""The proxy toolset's parts on their own, with a real catalog and real Redis servers: the
store's retry and circuit breaker, damaged content, the limiter (atomic, shared, refusing when
Redis is down), token trimming, section ids, and the ``ldims keys`` / ``ldims audit`` commands.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis

from indexer import DocumentIndex
from ldims.caller import Caller
from ldims.catalog import Catalog, Document
from ldims.errors import NotFound
from ldims.extracts import ExtractStore
from ldims.proxy import Limiter, LimitSettings, ProxyStore, circuit_breaker
from ldims.proxy.errors import RateLimitExceeded, StoreUnavailable, ToolError
from ldims.proxy.sections import sections_of, slug
from ldims.proxy.tokens import count_tokens, trim_to_tokens
from ldims.text import ExtractionResult, Page, Section
from tests.conftest import RedisServer, free_port, key_of, make_settings, settings_env


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    made = Catalog(f"sqlite:///{tmp_path / 'catalog.sqlite3'}")
    made.upgrade()
    yield made
    made.dispose()


def add(catalog: Catalog, doc_id: str, tenant: str, sha: str) -> None:
    with catalog.session() as session:
        session.add(
            Document(
                id=key_of(doc_id, tenant),
                tenant=tenant,
                collection="c",
                name=f"{doc_id}.md",
                format="text/markdown",
                sha256=sha,
                status="completed",
            )
        )


# --- the store -----------------------------------------------------------------------------------


def test_the_store_reads_once_then_from_its_cache_and_hides_other_tenants(
    tmp_path: Path, catalog: Catalog
) -> None:
    extracts = ExtractStore(tmp_path / "extracts")
    sha = "a" * 64
    extracts.save(
        sha,
        ExtractionResult(
            format="text/markdown",
            extractor="t",
            text="x",
            pages=[Page(1, "# Intro\n\nHello.")],
            sections=[Section("Intro", 1, 1, 1, "Hello.")],
        ),
    )
    add(catalog, "d1", "acme", sha)
    store = ProxyStore(catalog, extracts)
    view = store.view(Caller("acme"), "d1")
    assert view.pages == ("# Intro\n\nHello.",) and view.sections[0].id == "sec_intro"
    extracts.path(sha, "text/markdown").unlink()  # cached: no second read
    assert store.view(Caller("acme"), "d1").pages == view.pages
    with pytest.raises(NotFound) as foreign:
        store.view(Caller("globex"), "d1")
    with pytest.raises(NotFound) as unknown:
        store.view(Caller("globex"), "nope")
    assert str(foreign.value).replace("d1", "?") == str(unknown.value).replace("nope", "?")


def test_damaged_extractions_are_tool_errors_never_garbage(
    tmp_path: Path, catalog: Catalog
) -> None:
    extracts = ExtractStore(tmp_path / "extracts")
    sha = "b" * 64
    path = extracts.path(sha, "text/markdown")
    path.parent.mkdir(parents=True)
    path.write_text('{"format": "text/markdown", "extractor": "t", "text": "x", "pages": [{')
    add(catalog, "d2", "acme", sha)
    with pytest.raises(ToolError):
        ProxyStore(catalog, extracts).view(Caller("acme"), "d2")
    # A section whose stored span is impossible is listed but not read.
    sections = sections_of([Section("Intro", 1, 3, 9, "text")], page_count=2)
    assert sections[0].damaged and sections[0].id == "sec_intro"


def test_the_store_retries_once_then_opens_its_circuit(tmp_path: Path, catalog: Catalog) -> None:
    calls = []

    class FlakyStore(ExtractStore):
        def exists(self, sha256: str, mime: str) -> bool:
            calls.append(sha256)
            raise OSError("disk gone")

    add(catalog, "d3", "acme", "c" * 64)
    breaker = circuit_breaker(threshold=2, cooldown=60)
    store = ProxyStore(catalog, FlakyStore(tmp_path / "x"), breaker=breaker)
    for _ in range(2):
        with pytest.raises(StoreUnavailable):
            store.view(Caller("acme"), "d3")
    assert len(calls) == 4  # one retry each
    with pytest.raises(StoreUnavailable) as opened:
        store.view(Caller("acme"), "d3")
    assert opened.value.details["circuit"] == "open" and len(calls) == 4


# --- the limiter -------------------------------------------------------------------------------


def test_limits_are_atomic_across_threads(shared_redis: RedisServer) -> None:
    client = redis.Redis.from_url(shared_redis.url)
    limiter = Limiter(client, LimitSettings(calls_per_document=10), prefix="t-atomic:")
    admitted = []

    def call(_: int) -> None:
        try:
            limiter.admit("key", "gen", "doc")
            admitted.append(1)
        except RateLimitExceeded:
            pass

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(call, range(40)))
    assert len(admitted) == 10
    grant = limiter.grant("key", "gen", "doc", tokens=10**6, size=10**6)
    assert (grant.tokens, grant.bytes) == (6000, 20 * 1024)
    with pytest.raises(RateLimitExceeded) as spent:
        limiter.grant("key", "gen", "doc", tokens=1, size=1)
    assert spent.value.details["retryAfterSeconds"] >= 1
    for key in client.scan_iter("t-atomic:*"):
        client.delete(key)


def test_limits_fail_closed_when_redis_is_down() -> None:
    client = redis.Redis(port=free_port(), socket_connect_timeout=0.5)
    limiter = Limiter(client, LimitSettings())
    with pytest.raises(StoreUnavailable):
        limiter.admit("key", "gen", "doc")


# --- tokens and ids ------------------------------------------------------------------------------


def test_trimming_keeps_whole_sentences_and_counts_real_tokens() -> None:
    text = "Первое предложение. Second sentence here! 第三句话。" * 50
    cut = trim_to_tokens(text, 40)
    assert cut.truncated and cut.tokens <= 40 and text.startswith(cut.text)
    assert cut.text.endswith(("。", ".", "!")) and cut.tokens == count_tokens(cut.text)
    assert count_tokens("hello world") == 2  # o200k_base
    assert slug("Настройка LDAP / SSO!") == "настройка_ldap_sso"


# --- the commands -------------------------------------------------------------------------------


def test_keys_and_audit_commands(tmp_path: Path, shared_redis: RedisServer) -> None:
    settings = make_settings(tmp_path, shared_redis.url)
    env = settings_env(settings)
    ldims = shutil.which("ldims", path=str(Path(sys.executable).parent))
    assert ldims

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ldims, *args], env=env, capture_output=True, text=True, check=False, timeout=120
        )

    created = run("keys", "create", "--tenant", "acme", "--scopes", "read,ingest", "--user", "al")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("ldims_") and "id key_" in created.stderr
    key_id = created.stderr.split("id ", 1)[1].split(",", 1)[0]
    listed = [json.loads(line) for line in run("keys", "list", "--json").stdout.splitlines()]
    assert [(k["id"], k["tenant"], k["scopes"], k["state"]) for k in listed] == [
        (key_id, "acme", "read,ingest", "active")
    ]
    assert key not in json.dumps(listed)  # never the key itself
    bad = run("keys", "create", "--tenant", "acme", "--scopes", "root")
    assert bad.returncode == 1 and "Unknown or no scopes" in bad.stderr
    rotated = run("keys", "rotate", key_id)
    assert rotated.returncode == 0 and rotated.stdout.strip() != key
    states = {
        k["id"]: k["state"]
        for k in map(json.loads, run("keys", "list", "--json").stdout.splitlines())
    }
    assert states[key_id] == "revoked" and list(states.values()).count("active") == 1
    assert run("keys", "revoke", key_id).returncode == 1  # already revoked
    catalog = Catalog(settings.catalog_url)
    from ldims.proxy import AuditEntry, AuditTrail

    trail = AuditTrail(catalog)
    trail.record(
        AuditEntry(
            tenant="acme",
            tool="read_doc_pages",
            outcome="ok",
            transport="http",
            doc_id="d9",
            tokens=12,
        )
    )
    trail.record(AuditEntry(tenant="globex", tool="read_doc_pages", outcome="ok", transport="http"))
    trail.flush()
    catalog.dispose()
    lines = run("audit", "--tenant", "acme", "--since", "1h").stdout.splitlines()
    assert [(r["tool"], r["doc"], r["tokens"]) for r in map(json.loads, lines)] == [
        ("read_doc_pages", "d9", 12)
    ]


def test_a_huge_page_is_cut_before_masking_and_still_masked_and_bounded(
    tmp_path: Path, catalog: Catalog, shared_redis: RedisServer
) -> None:
    from ldims.proxy import AuditTrail, Proxy, ProxyConfig
    from ldims.proxy.core import unlimited

    extracts = ExtractStore(tmp_path / "extracts")
    sha = "d" * 64
    line = "Contact ops@example.com about the nightly build of the archive server.\n"
    extracts.save(
        sha,
        ExtractionResult(
            format="text/markdown", extractor="t", text="x", pages=[Page(1, line * 40_000)]
        ),
    )
    add(catalog, "huge", "acme", sha)
    client = redis.Redis.from_url(shared_redis.url)
    proxy = Proxy(
        ProxyStore(catalog, extracts),
        Limiter(client, LimitSettings(), prefix="t-huge:"),
        AuditTrail(catalog),
        ProxyConfig(chunk_limit_tokens=300),
        lambda: DocumentIndex(tmp_path / "index"),  # not searched here
        unlimited,
    )
    result = proxy.call(
        Caller("acme"), "read_doc_pages", {"doc_id": "huge", "page_start": 1, "page_end": 1}
    )
    assert 250 <= result["tokens"] <= 300 and result["tokens_total"] is None
    assert result["meta"]["truncated"] and "ops@example.com" not in result["text"]
    assert result["text"].count("[EMAIL]") == result["meta"]["masked"]["email"] > 10
    proxy.audit.flush()
    for key in client.scan_iter("t-huge:*"):
        client.delete(key)
