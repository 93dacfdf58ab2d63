"""``ldims keys create|list|revoke|rotate`` and ``ldims audit``: API keys and the proxy
toolset's audit trail, on the catalog of the settings (works while the server runs: a key
revoked here is refused by every API replica on its next request)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from ldims.settings import get_settings


@dataclass
class _Parts:
    keys: Any
    audit: Any


@contextlib.contextmanager
def _services() -> Iterator[_Parts]:
    """The key ring and the audit trail on the settings' catalog (not the whole service
    graph: these commands start in a second, not five)."""
    from ldims.catalog import Catalog
    from ldims.errors import LdimsError
    from ldims.keys import KeyRing
    from ldims.proxy.audit import AuditTrail

    settings = get_settings()
    catalog = Catalog(settings.catalog_url)
    catalog.upgrade()
    try:
        yield _Parts(KeyRing(settings, catalog), AuditTrail(catalog))
    except LdimsError as exc:
        click.echo(exc.message, err=True)
        raise SystemExit(1) from None
    finally:
        catalog.dispose()


@click.group()
def keys() -> None:
    """API keys: each gives one tenant (and user) some scopes."""


@keys.command("create")
@click.option("--tenant", required=True, help="The tenant the key acts for.")
@click.option("--user", default=None, help="The user the key acts for (audit, limits).")
@click.option(
    "--scopes",
    "--scope",
    "scopes",
    default="read",
    show_default=True,
    help="Comma list of read, proxy, ingest, admin, internal, sql, guide "
    "(proxy: the proxy toolset only, nothing that reads whole documents).",
)
@click.option("--expires", default=None, help="30d, 12h, 45m, or an ISO 8601 time.")
@click.option("--name", default=None, help="A label for lists.")
def keys_create(
    tenant: str, user: str | None, scopes: str, expires: str | None, name: str | None
) -> None:
    """Create a key and print it — once: only its hash is kept."""
    from ldims.keys import parse_expiry, parse_scopes

    with _services() as services:
        new = services.keys.create(tenant, parse_scopes(scopes), user, parse_expiry(expires), name)
        click.echo(new.key)
        click.echo(
            f"id {new.id}, tenant {new.tenant}, scopes {','.join(new.scopes)}"
            + (f", expires {new.expires_at.isoformat()}" if new.expires_at else ""),
            err=True,
        )


@keys.command("list")
@click.option("--tenant", default=None, help="Only this tenant's keys.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines.")
def keys_list(tenant: str | None, as_json: bool) -> None:
    """Keys (never the keys themselves): id, tenant, user, scopes, state, last use."""
    with _services() as services:
        for key in services.keys.list(tenant):
            row = {
                "id": key.id,
                "tenant": key.tenant,
                "user": key.user_id,
                "scopes": key.scopes,
                "name": key.name,
                "state": _state(key),
                "created": key.created_at.isoformat(),
                "expires": key.expires_at.isoformat() if key.expires_at else None,
                "lastUsed": key.last_used_at.isoformat() if key.last_used_at else None,
            }
            if as_json:
                click.echo(json.dumps(row))
            else:
                click.echo("  ".join(f"{k}={v}" for k, v in row.items() if v is not None))


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke a key now."""
    with _services() as services:
        services.keys.revoke(key_id)
        click.echo(f"revoked {key_id}")


@keys.command("rotate")
@click.argument("key_id")
@click.option("--expires", default=None, help="Expiry of the new key.")
def keys_rotate(key_id: str, expires: str | None) -> None:
    """A new key like KEY_ID (tenant, user, scopes); KEY_ID revoked now. Prints the new key."""
    from ldims.keys import parse_expiry

    with _services() as services:
        new = services.keys.rotate(key_id, parse_expiry(expires))
        click.echo(new.key)
        click.echo(f"id {new.id} replaces {key_id}", err=True)


@click.command()
@click.option("--tenant", default=None)
@click.option("--since", default=None, help="ISO 8601 time, or 30m / 12h / 7d ago.")
@click.option("--tool", default=None)
@click.option("--doc", "doc_id", default=None)
@click.option("--limit", type=int, default=100, show_default=True)
def audit(
    tenant: str | None, since: str | None, tool: str | None, doc_id: str | None, limit: int
) -> None:
    """Proxy tool calls, newest first, as JSON lines (never the text returned)."""
    with _services() as services:
        records = services.audit.query(tenant, _since(since), tool, doc_id, limit)
        for record in records:
            click.echo(
                json.dumps(
                    {
                        "at": record.at.isoformat(),
                        "tenant": record.tenant,
                        "user": record.user_id,
                        "key": record.key_id,
                        "transport": record.transport,
                        "tool": record.tool,
                        "doc": record.doc_id,
                        "trace": record.trace_id,
                        "outcome": record.outcome,
                        "tokens": record.tokens,
                        "bytes": record.bytes,
                        "masked": json.loads(record.masked) if record.masked else {},
                        "rateLimit": json.loads(record.rate_state) if record.rate_state else {},
                        "ms": record.latency_ms,
                    },
                    ensure_ascii=False,
                )
            )


def _since(text: str | None) -> datetime | None:
    """``30m`` / ``12h`` / ``7d`` ago, or an ISO 8601 time."""
    if not text:
        return None
    from ldims.keys import parse_expiry

    units = {"d": "days", "h": "hours", "m": "minutes"}
    if text[-1:] in units and text[:-1].isdigit():
        return datetime.now(UTC) - timedelta(**{units[text[-1]]: int(text[:-1])})
    return parse_expiry(text)


def _state(key: Any) -> str:
    if key.revoked_at:
        return "revoked"
    if key.expires_at and key.expires_at <= datetime.now(UTC):
        return "expired"
    return "active"


def register(cli: click.Group) -> None:
    cli.add_command(keys)
    cli.add_command(audit)
