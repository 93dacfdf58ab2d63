"""Settings: every field documented in docs/configuration.md (and the README's essentials
true to it), seed names accepted, bad values refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from ldims.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
README = ROOT / "README.md"


def table_defaults(page: Path) -> dict[str, str]:
    """Variable name -> default cell, for every row of the page's settings tables."""
    defaults = {}
    for row in page.read_text(encoding="utf-8").splitlines():
        if row.startswith("| `"):
            cells = row.split(" | ")
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[0]):
                defaults[name] = cells[1]
    return defaults


def test_every_setting_is_documented_in_the_configuration_page_and_nothing_else() -> None:
    names = Settings.env_names().values()
    canonical = {variants[0] for variants in names}
    documented = set(table_defaults(CONFIGURATION))
    assert canonical - documented == set(), "undocumented settings"
    assert documented - {name for variants in names for name in variants} == set()


def test_the_readme_essentials_are_settings_with_their_documented_defaults() -> None:
    essentials = table_defaults(README)
    reference = table_defaults(CONFIGURATION)
    assert essentials, "no configuration table in the README"
    assert {name: reference.get(name) for name in essentials} == essentials


def test_seed_names_work_with_and_without_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_REQUEST_TIMEOUT_SECONDS", "12")
    monkeypatch.setenv("LOG_LEVEL", "debug")
    monkeypatch.setenv("LDIMS_SEARCH_MAX_RESULTS_HARD_LIMIT", "7")
    settings = Settings()
    assert settings.mcp_request_timeout_seconds == 12
    assert settings.log_level == "DEBUG"
    assert settings.search_max_results_hard_limit == 7


def test_defaults_are_embedded_and_under_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert settings.catalog_url == f"sqlite:///{tmp_path / 'catalog.sqlite3'}"
    assert settings.effective_redis_url == f"unix://{tmp_path / 'redis' / 'redis.sock'}"
    assert (
        settings.search_max_results_hard_limit == 50 and settings.mcp_request_timeout_seconds == 30
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"webhook_secret": "changeme"},
        {"webhook_secret": "short"},
        {"task_soft_time_limit_seconds": 100, "task_time_limit_seconds": 100},
        {"retry_backoff_max_seconds": 4000, "broker_visibility_timeout_seconds": 3600},
        {"default_tenant": "has spaces"},
        {"log_level": "LOUD"},
        {"max_upload_bytes": 0},
    ],
)
def test_bad_values_are_refused_at_start_up(overrides: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(**overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "toolsets",
    [["sql"], ["documents", "nope"]],  # the sql toolset without LDIMS_SQL_URL; an unknown one
)
def test_bad_toolsets_are_refused_at_start_up(toolsets: list[str]) -> None:
    from api.mcp import enabled_toolsets

    with pytest.raises(ValueError, match="toolset"):
        enabled_toolsets(Settings(toolsets=toolsets))


def test_the_sql_toolset_is_on_by_default_only_with_a_database() -> None:
    from api.mcp import enabled_toolsets

    assert [t.name for t in enabled_toolsets(Settings())] == ["documents", "qmd", "guide", "proxy"]
    with_url = Settings(sql_url="postgresql://reader@db/shop")
    assert [t.name for t in enabled_toolsets(with_url)] == [
        "documents",
        "qmd",
        "sql",
        "guide",
        "proxy",
    ]
    assert "reader@db" not in repr(with_url)  # the URL may hold a password: a secret


def test_unknown_mask_kinds_are_refused_at_start_up() -> None:
    assert Settings(mcp_proxy_mask=["email", "ru_inn"]).mcp_proxy_mask == ["email", "ru_inn"]
    with pytest.raises(ValidationError, match="unknown mask kinds"):
        Settings(mcp_proxy_mask=["emial"])


@pytest.mark.parametrize(
    "overrides",
    [
        {"search_concurrency_per_key": 4, "search_concurrency_per_tenant": 3},
        {"search_concurrency_per_tenant": 9, "search_concurrency": 8},
    ],
)
def test_search_shares_that_do_not_nest_are_refused_at_start_up(
    overrides: dict[str, object],
) -> None:
    with pytest.raises(ValidationError, match="per_key <= per_tenant <= total"):
        Settings(**overrides)  # type: ignore[arg-type]
    nested = Settings(
        search_concurrency=8, search_concurrency_per_tenant=8, search_concurrency_per_key=8
    )
    assert nested.search_concurrency_per_key == 8
