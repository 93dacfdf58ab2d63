"""qmd's command line on LDIMS: ``collection``, ``context``, ``update [--watch]``, ``search``,
``vsearch``, ``query``, ``get`` and ``multi-get`` — printing what the qmd tools return, with
qmd's habits (``-n``, ``-c``, ``--json``, ``--line-numbers``, ``path:line``).

Each command works on the data directory directly (the catalog, and the queue that the
workers of ``ldims serve`` read), for the tenant ``--tenant`` (default LDIMS_DEFAULT_TENANT).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ldims.settings import get_settings

TENANT = click.option("--tenant", default=None, help="Tenant (default LDIMS_DEFAULT_TENANT).")


@contextlib.contextmanager
def qmd_session(tenant: str | None) -> Iterator[tuple[Any, Any]]:
    """(the qmd core, the caller) for one command; errors in LDIMS's terms exit 1."""
    from ldims.caller import Caller
    from ldims.errors import LdimsError
    from runtime import build_services

    settings = get_settings()
    services = build_services(settings)
    services.catalog.upgrade()
    try:
        yield services.qmd, Caller(tenant=tenant or settings.default_tenant, transport="internal")
    except LdimsError as exc:
        click.echo(exc.message, err=True)
        raise SystemExit(1) from None
    finally:
        services.close()


def register(cli: click.Group) -> None:
    """Add the qmd commands to ``cli``."""
    cli.add_command(collection)
    cli.add_command(context)
    cli.add_command(update)
    for name, mode, min_score in (
        ("search", "keyword", 0.0),
        ("vsearch", "dense", None),  # None: the server's floor (LDIMS_SEARCH_MIN_SCORE)
        ("query", "hybrid", None),
    ):
        cli.add_command(_search_command(name, mode, min_score))
    cli.add_command(get)
    cli.add_command(multi_get)


# --- collections -------------------------------------------------------------------------------
@click.group()
def collection() -> None:
    """Folder collections (qmd's): add, list, show, rename, remove."""


@collection.command("add")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--name", default=None, help="Collection name (default: the folder's name).")
@click.option("--mask", "--glob", "mask", default="**/*.md", show_default=True, help="Files.")
@TENANT
def collection_add(path: str, name: str | None, mask: str, tenant: str | None) -> None:
    """Add the folder PATH as a collection and index its files."""
    folder = Path(path).resolve()
    name = name or folder.name or "root"
    with qmd_session(tenant) as (qmd, caller):
        click.echo(f"Creating collection '{name}'...")
        report = qmd.library.add(caller, str(folder), name, mask)
        click.echo(f"Collection: {report.path} ({report.pattern})\n")
        _print_report(report)
        click.echo(f"✓ Collection '{name}' created successfully")


@collection.command("list")
@TENANT
def collection_list(tenant: str | None) -> None:
    """List the collections."""
    with qmd_session(tenant) as (qmd, caller):
        infos = qmd.library.collections(caller)
        if not infos:
            click.echo("No collections found. Run 'ldims collection add .' to create one.")
            return
        click.echo(f"Collections ({len(infos)}):\n")
        for info in infos:
            click.echo(f"{info.name} (qmd://{info.name}/)")
            click.echo(f"  Pattern:  {info.pattern or '(uploaded documents)'}")
            click.echo(f"  Files:    {info.documents}")
            if info.last_updated:
                click.echo(f"  Updated:  {info.last_updated.isoformat(timespec='seconds')}")
            click.echo("")


@collection.command("show")
@click.argument("name")
@TENANT
def collection_show(name: str, tenant: str | None) -> None:
    """Show one collection."""
    with qmd_session(tenant) as (qmd, caller):
        info = qmd.library.collection(caller, name)
        contexts = [c for c in qmd.library.contexts(caller) if c.collection == name]
        click.echo(f"Collection: {info.name}")
        click.echo(f"  Path:     {info.path or '(uploaded documents)'}")
        click.echo(f"  Pattern:  {info.pattern or '-'}")
        click.echo(f"  Files:    {info.documents}")
        if contexts:
            click.echo(f"  Contexts: {len(contexts)}")


@collection.command("rename")
@click.argument("old")
@click.argument("new")
@TENANT
def collection_rename(old: str, new: str, tenant: str | None) -> None:
    """Rename a collection (its documents are re-indexed under the new name)."""
    with qmd_session(tenant) as (qmd, caller):
        qmd.library.rename(caller, old, new)
        click.echo(f"✓ Renamed collection '{old}' to '{new}'")
        click.echo(f"  Virtual paths updated: qmd://{old}/ → qmd://{new}/")


@collection.command("remove")
@click.argument("name")
@TENANT
def collection_remove(name: str, tenant: str | None) -> None:
    """Remove a folder collection and its files' documents."""
    with qmd_session(tenant) as (qmd, caller):
        deleted = qmd.library.remove(caller, name)
        click.echo(f"✓ Removed collection '{name}'")
        click.echo(f"  Deleted {deleted} documents")


# --- contexts ----------------------------------------------------------------------------------
@click.group()
def context() -> None:
    """Contexts: what a collection, a folder in it, or everything (/) holds."""


@context.command("add")
@click.argument("words", nargs=-1, required=True)
@TENANT
def context_add(words: tuple[str, ...], tenant: str | None) -> None:
    """context add [qmd://collection/path | / | FOLDER] "text" (one word: the current folder)."""
    target, text = (words[0], " ".join(words[1:])) if len(words) > 1 else (".", words[0])
    with qmd_session(tenant) as (qmd, caller):
        info = qmd.library.add_context(caller, target, text)
        click.echo(
            "✓ Set global context" if not info.collection else f"✓ Added context for: {info.target}"
        )
        click.echo(f"Context: {info.text}")


@context.command("list")
@TENANT
def context_list(tenant: str | None) -> None:
    """List the contexts."""
    with qmd_session(tenant) as (qmd, caller):
        infos = qmd.library.contexts(caller)
        if not infos:
            click.echo("No contexts configured. Use 'ldims context add' to add one.")
            return
        click.echo("\nConfigured Contexts\n")
        current = None
        for info in infos:
            group = info.collection or "*"
            if group != current:
                click.echo(group)
                current = group
            click.echo(f"  {'/' if not info.prefix else info.prefix}")
            click.echo(f"    {info.text}")


@context.command("rm")
@click.argument("target")
@TENANT
def context_rm(target: str, tenant: str | None) -> None:
    """Remove the context of TARGET (qmd://collection/path, / or a folder)."""
    with qmd_session(tenant) as (qmd, caller):
        info = qmd.library.remove_context(caller, target)
        click.echo(
            "✓ Removed global context"
            if not info.collection
            else f"✓ Removed context for: {info.target}"
        )


# --- update ------------------------------------------------------------------------------------
@click.command()
@click.option("--watch", is_flag=True, help="Keep following the folders (re-scan on changes).")
@click.option("-c", "--collection", "names", multiple=True, help="Only this collection.")
@TENANT
def update(watch: bool, names: tuple[str, ...], tenant: str | None) -> None:
    """Re-scan the folder collections: only new, changed and removed files are processed."""
    with qmd_session(tenant) as (qmd, caller):
        reports = qmd.library.update(caller, list(names) or None)
        for number, report in enumerate(reports, 1):
            click.echo(f"[{number}/{len(reports)}] {report.collection} ({report.pattern})")
            click.echo(f"Collection: {report.path} ({report.pattern})\n")
            _print_report(report)
        click.echo("✓ All collections updated.")
        if watch:
            _watch(qmd, caller, reports)


def _watch(qmd: Any, caller: Any, reports: list[Any]) -> None:
    """Re-run the update of the folders whenever files change under them (until ^C)."""
    from watchfiles import watch as watch_files

    folders = {report.path: report.collection for report in reports}
    if not folders:
        click.echo("No folder collections to watch.")
        return
    # yield_on_timeout: the first (possibly empty) batch says the watcher is live; a change
    # made between the first scan and that moment is caught by one more update then, and only
    # then does "Watching" promise that later changes are followed.
    batches = watch_files(
        *folders, debounce=500, recursive=True, rust_timeout=1000, yield_on_timeout=True
    )
    with contextlib.suppress(KeyboardInterrupt):
        next(batches)
        _update_and_report(qmd, caller, sorted(set(folders.values())), quiet=True)
        click.echo(f"Watching {len(folders)} folder(s); Ctrl-C stops.")
        for changes in batches:
            touched = sorted(
                {
                    name
                    for path, name in folders.items()
                    for _, changed in changes
                    if changed.startswith(path)
                }
            )
            if touched:
                _update_and_report(qmd, caller, touched)


def _update_and_report(qmd: Any, caller: Any, names: list[str], quiet: bool = False) -> None:
    """Update these collections and print each one's line (``quiet``: only where files changed)."""
    for report in qmd.library.update(caller, names):
        if not quiet or report.new or report.updated or report.removed or report.skipped:
            click.echo(f"{report.collection}: {report.line}")


def _print_report(report: Any) -> None:
    for path, why in report.skipped:
        click.echo(f"⚠ Skipped {path}: {why}")
    click.echo(report.line + "\n")


# --- search ------------------------------------------------------------------------------------
_SEARCH_HELP = {
    "keyword": "BM25 keyword search (every word must match).",
    "dense": "Semantic (vector) search.",
    "hybrid": "Keyword and vector lists fused, scored by the calibrated probability of "
    "relevance, reranked if set.",
}


def _search_command(name: str, mode: str, default_min: float | None) -> click.Command:
    @click.command(name=name, help=_SEARCH_HELP[mode])
    @click.argument("query", nargs=-1, required=True)
    @click.option(
        "-n", "limit", type=int, default=None, help="Results (default 5; 20 with --json)."
    )
    @click.option("-c", "--collection", default=None, help="Only this collection.")
    @click.option(
        "--min-score",
        type=float,
        default=default_min,
        help="Minimum score 0-1"
        + ("" if default_min is not None else " (default: the relevance floor)"),
    )
    @click.option("--json", "as_json", is_flag=True, help="JSON, as the MCP tool's results.")
    @click.option("--line-numbers", is_flag=True, help="(snippets are always numbered)")
    @TENANT
    def command(
        query: tuple[str, ...],
        limit: int | None,
        collection: str | None,
        min_score: float | None,
        as_json: bool,
        line_numbers: bool,
        tenant: str | None,
    ) -> None:
        text = " ".join(query)
        count = limit or (20 if as_json else 5)
        with qmd_session(tenant) as (qmd, caller):
            results = qmd.search(caller, text, mode, count, min_score, collection)
        if as_json:
            click.echo(
                json.dumps(
                    [
                        {k: v for k, v in dataclasses.asdict(r).items() if k != "explain"}
                        for r in results
                    ],
                    ensure_ascii=False,
                    indent=2,
                )
            )
            return
        if not results:
            click.echo("No results found.")
            return
        for result in results:
            click.echo(f"qmd://{result.file}:{result.line} {result.docid}")
            click.echo(f"Title: {result.title}")
            if result.context:
                click.echo(f"Context: {result.context}")
            click.echo(f"Score: {round(result.score * 100):>3}%\n")
            click.echo(result.snippet + "\n\n")

    return command


# --- reading -----------------------------------------------------------------------------------
@click.command()
@click.argument("file")
@click.option("--from", "from_line", type=int, default=None, help="Start at this line.")
@click.option("-l", "max_lines", type=int, default=None, help="At most this many lines.")
@click.option("--from-char", type=int, default=0, help="Start at this character of the first line.")
@click.option("--line-numbers/--no-line-numbers", default=True, show_default=True)
@TENANT
def get(
    file: str,
    from_line: int | None,
    max_lines: int | None,
    from_char: int,
    line_numbers: bool,
    tenant: str | None,
) -> None:
    """One document: a path, #docid, qmd:// URI, path:120 or path:120:40 (a longer part
    than LDIMS_MCP_MAX_CONTENT_CHARS ends with the get that reads on)."""
    with qmd_session(tenant) as (qmd, caller):
        resource = qmd.get(caller, file, from_line, max_lines, line_numbers, from_char)
    click.echo(f"qmd://{resource.name}\n---\n")
    click.echo(resource.text)


@click.command("multi-get")
@click.argument("pattern")
@click.option("-l", "max_lines", type=int, default=None, help="At most this many lines a file.")
@click.option("--max-bytes", type=int, default=10240, show_default=True, help="Skip larger files.")
@click.option("--line-numbers/--no-line-numbers", default=False, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@TENANT
def multi_get(
    pattern: str,
    max_lines: int | None,
    max_bytes: int,
    line_numbers: bool,
    as_json: bool,
    tenant: str | None,
) -> None:
    """Several documents: a glob, a comma list of paths or docids."""
    with qmd_session(tenant) as (qmd, caller):
        found = qmd.multi_get(caller, pattern, max_lines, max_bytes, line_numbers)
    if as_json:
        out = [
            {"file": e.display_path, "skipped": True, "reason": e.skipped}
            if e.resource is None
            else {"file": e.display_path, "title": e.resource.title, "body": e.resource.text}
            for e in found.entries
        ]
        click.echo(json.dumps({"errors": found.errors, "files": out}, ensure_ascii=False, indent=2))
        return
    for error in found.errors:
        click.echo(error, err=True)
    for entry in found.entries:
        click.echo("\n" + "=" * 60 + f"\nFile: qmd://{entry.display_path}\n" + "=" * 60 + "\n")
        click.echo(entry.skipped if entry.resource is None else entry.resource.text)
