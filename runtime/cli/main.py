"""Entry point of the ``ldims`` command (the composition root's command-line face)."""

from __future__ import annotations

import os
import sys

import click

from ldims.errors import LdimsError
from ldims.logs import setup_logging
from ldims.settings import Settings, get_settings
from workers.queues import (
    EMBED_QUEUE,
    EXTRACT_QUEUE,
    EXTRACT_SINGLE_QUEUE,
    INDEX_QUEUE,
    INDEX_SINGLE_QUEUE,
    OCR_QUEUE,
)


@click.group()
def cli() -> None:
    """LDIMS: a document knowledge server for LLM agents."""
    setup_logging(get_settings().log_level)


@cli.command()
@click.option("--host", default=None, help="Bind address (default LDIMS_HOST).")
@click.option("--port", type=int, default=None, help="Port (default LDIMS_PORT).")
@click.option("--flower", is_flag=True, help="Also start Flower (task dashboard).")
@click.option("--extract-workers", type=int, default=None, help="Extract worker processes.")
def serve(host: str | None, port: int | None, flower: bool, extract_workers: int | None) -> None:
    """Start API, workers and (unless LDIMS_REDIS_URL is set) an embedded Redis."""
    from runtime.cli.serve import serve as run

    settings = get_settings()
    run(host or settings.host, settings.port if port is None else port, flower, extract_workers)


@cli.command()
@click.option("--host", default=None, help="Bind address (default LDIMS_HOST).")
@click.option("--port", type=int, default=None, help="Port (default LDIMS_PORT).")
def api(host: str | None, port: int | None) -> None:
    """Run only the API (Redis must be reachable at LDIMS_REDIS_URL)."""
    from runtime import create_app
    from runtime.http_server import run_api

    settings = get_settings()
    run_api(
        create_app(settings),
        settings,
        host or settings.host,
        settings.port if port is None else port,
    )


@cli.command()
@click.option("--queues", default="extract,index", show_default=True, help="Queues to consume.")
@click.option(
    "--concurrency",
    type=int,
    default=None,
    help="Worker processes (default LDIMS_EXTRACT_CONCURRENCY; with the index queue: 1, "
    "the only value allowed).",
)
@click.option("--beat", is_flag=True, help="Also schedule the reconciler (run exactly one).")
@click.option("--hostname", default=None, help="Celery node name.")
def worker(queues: str, concurrency: int | None, beat: bool, hostname: str | None) -> None:
    """Run a Celery worker for the given queues."""
    from workers.celery_app import app

    settings = get_settings()
    try:
        argv = worker_argv(settings, queues, concurrency, beat, hostname)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    consumed = argv[argv.index("--queues") + 1]
    if consumed == EMBED_QUEUE:
        lower_priority(settings.embed_worker_nice)
    elif consumed == OCR_QUEUE:
        lower_priority(settings.ocr_worker_nice, idle=False)
    app.worker_main(argv)


def lower_priority(nice: int, idle: bool = True) -> None:
    """Run this process (and the pool it forks) below extraction and indexing: ``nice``, and
    with ``idle`` Linux's idle scheduling class where there is one (CPU only when nothing else
    wants it: measured, nice 10 alone still took a tenth of a bulk ingest's CPU). OCR is not
    put there: under a steady stream of text documents it would never run."""
    os.nice(nice)
    if idle and nice and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def worker_argv(
    settings: Settings, queues: str, concurrency: int | None, beat: bool, hostname: str | None
) -> list[str]:
    """Celery's worker arguments; a ``ValueError`` when the index queue would get more than
    one process (the index has one writer)."""
    names = [name.strip() for name in queues.split(",") if name.strip()]
    if not names:
        raise ValueError("give at least one queue")
    if INDEX_SINGLE_QUEUE in names and INDEX_QUEUE not in names:
        raise ValueError(f"{INDEX_SINGLE_QUEUE} is consumed with the index queue: --queues index")
    if EMBED_QUEUE in names and (len(names) > 1 or concurrency not in (None, 1)):
        raise ValueError(
            "the embed queue has one writer and its own priority: --queues embed --concurrency 1"
        )
    if OCR_QUEUE in names and len(names) > 1:
        raise ValueError("the OCR queue has workers of its own priority: --queues ocr")
    if EXTRACT_QUEUE in names and EXTRACT_SINGLE_QUEUE not in names:
        names.append(EXTRACT_SINGLE_QUEUE)  # downloads and retries ride with extraction
    if INDEX_QUEUE in names:
        # The writer's one-at-a-time work (deletes, retries alone, optimize, reconciler) rides
        # with the index queue, in the same single process.
        if INDEX_SINGLE_QUEUE not in names:
            names.append(INDEX_SINGLE_QUEUE)
        if concurrency not in (None, 1):
            raise ValueError(
                "the index queue has one writer: run it with --concurrency 1 (or in a worker of "
                "its own: --queues index)"
            )
        processes = 1
    elif EMBED_QUEUE in names:
        processes = 1
    elif OCR_QUEUE in names:
        processes = concurrency or settings.ocr_concurrency
    else:
        processes = concurrency or settings.extract_concurrency
    if processes < 1:
        raise ValueError("--concurrency must be at least 1")
    argv = [
        "worker",
        "--queues",
        ",".join(names),
        "--concurrency",
        str(processes),
        "--loglevel",
        "WARNING" if settings.log_level == "WARN" else settings.log_level,
        "--hostname",
        hostname or f"{'+'.join(names)}-{os.getpid()}@%h",
        "--events",
        # Gossip and mingle talk to the other workers over Redis pub/sub; after a Redis
        # restart they can leave the consumer reconnected but taking nothing (celery#8030,
        # #9054). LDIMS needs neither: workers share nothing but the queues.
        "--without-gossip",
        "--without-mingle",
    ]
    if beat:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        argv += ["--beat", "--schedule", str(settings.data_dir / "celerybeat-schedule")]
    return argv


@cli.command()
@click.option("--port", type=int, default=None, help="Port (default LDIMS_FLOWER_PORT).")
def flower(port: int | None) -> None:
    """Run Flower, the Celery task dashboard."""
    from workers.celery_app import app

    settings = get_settings()
    argv = ["flower", f"--port={settings.flower_port if port is None else port}"]
    if settings.flower_basic_auth:
        argv.append(f"--basic_auth={settings.flower_basic_auth.get_secret_value()}")
    else:
        # No credentials: loopback only, where the unauthenticated API is acceptable.
        os.environ["FLOWER_UNAUTHENTICATED_API"] = "true"
        argv.append("--address=127.0.0.1")
    app.start(argv)


@cli.command()
@click.option("--if-needed", is_flag=True, help="Only when this schema version has no index yet.")
@click.option("--batch-size", type=int, default=200, show_default=True, help="Documents a commit.")
def reindex(if_needed: bool, batch_size: int) -> None:
    """Rebuild the search index from the catalog and the stored extractions."""
    from tqdm import tqdm

    from ldims.catalog import upgrade_schema
    from workers.reindex import rebuild, rebuild_if_needed

    settings = get_settings()
    setup_logging(settings.log_level)
    upgrade_schema(settings.catalog_url)
    if if_needed:
        count = rebuild_if_needed(settings)
        click.echo("index is up to date" if count is None else f"reindexed {count} documents")
        return
    with tqdm(unit="doc", desc="reindex") as bar:
        count = rebuild(settings, batch_size=batch_size, progress=bar.update)
    click.echo(f"reindexed {count} documents")


@cli.command()
@click.option(
    "--tenant", default=None, help="Tenant of this session (default LDIMS_DEFAULT_TENANT)."
)
def mcp(tenant: str | None) -> None:
    """Serve MCP over stdio (for Claude Desktop / Claude Code / the MCP Inspector).

    Reads the same data directory as the server; extraction still needs the workers
    (`ldims serve` running) for new documents.
    """
    from api.mcp import build_mcp_server
    from ldims.caller import TENANT_PATTERN, stdio_caller
    from runtime import build_services

    settings = get_settings()
    if tenant is not None and not TENANT_PATTERN.match(tenant):
        raise click.BadParameter("1-64 letters, digits, _ . -", param_hint="--tenant")
    services = build_services(settings)
    services.catalog.upgrade()  # a fresh data dir has no tables yet
    server = build_mcp_server(services, stdio=stdio_caller(tenant or settings.default_tenant))
    try:
        server.run("stdio")
    finally:
        server.close()
        services.close()


@cli.command()
def migrate() -> None:
    """Bring the catalog schema up to date."""
    from ldims.catalog import upgrade_schema

    upgrade_schema(get_settings().catalog_url)
    click.echo("catalog schema is up to date")


@cli.command()
@click.option(
    "--per-tenant", type=int, default=200, show_default=True, help="Pseudo-queries a tenant."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
def calibrate(per_tenant: int, seed: int) -> None:
    """Fit the relevance scores of the configured embedding model (a remote endpoint, which
    ships no calibration) on your own documents; the server uses it after a restart."""
    from tqdm import tqdm

    from ldims.documents.calibrate import calibrate as fit
    from ldims.errors import InvalidInput

    settings = get_settings()
    setup_logging(settings.log_level)
    try:
        with tqdm(unit="query", desc="calibrate") as bar:
            fitted = fit(settings, per_tenant, seed, bar.update)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"fitted on {fitted.queries} queries ({fitted.rows} candidates): {fitted.path}")
    for kind, model in fitted.models.items():
        click.echo(f"  {kind}: {model.as_json()}")


@cli.command()
@click.option("--tenant", default=None, help="Only this tenant (default: all).")
def status(tenant: str | None) -> None:
    """Print how many documents are in each state, and the embedding backlog: what still
    needs vectors, the recent rate and the estimated time to done."""
    from ldims.catalog import Catalog, repository
    from ldims.semantic import fingerprint_for
    from workers import EmbedRates, embedding_backlog

    catalog = Catalog(get_settings().catalog_url)
    catalog.upgrade()  # a fresh data dir has no tables yet
    settings = get_settings()
    fingerprint = fingerprint_for(settings)
    rates = EmbedRates.of(settings)
    with catalog.session() as session:
        counts = repository.count_by_status(session, tenant)
        backlog = embedding_backlog(session, fingerprint, rates, tenant) if fingerprint else None
    rates.client.close()
    width = max(len(name) for name in counts)
    for name, count in counts.items():
        click.echo(f"{name:<{width}}  {count}")
    click.echo(f"{'total':<{width}}  {sum(counts.values())}")
    if backlog is None:
        click.echo("vectors: off (LDIMS_EMBEDDING_MODEL=none)")
    else:
        click.echo(
            f"vectors: {fingerprint}; {backlog.documents} completed documents "
            f"({backlog.chunks} chunks) still need embedding"
        )
        click.echo(f"embedding backlog: {backlog.describe()}")


@cli.command()
@click.option("--repair", is_flag=True, help="Mend what disagrees (needs the server's queues).")
def check(repair: bool) -> None:
    """Check that every store agrees with the catalog: index, qmd's lexicon, vectors,
    originals, extractions; exit 1 when something disagrees (and was not repaired)."""
    from workers import Dispatcher
    from workers.consistency import DESCRIPTIONS, inspect
    from workers.consistency import repair as mend
    from workers.pipeline import Runtime

    settings = get_settings()
    setup_logging(settings.log_level)
    if settings.catalog_url.startswith("sqlite") and not settings.data_dir.exists():
        raise click.ClickException(f"no data folder at {settings.data_dir}: nothing to check")
    rt = Runtime(settings)
    found = inspect(rt)
    for kind, items in found.kinds().items():
        if items:
            shown = ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")
            click.echo(f"{len(items)} {DESCRIPTIONS[kind]}: {shown}")
    if found.consistent:
        click.echo(f"consistent: {found.documents} documents, every store agrees")
        return
    if not repair:
        click.echo("inconsistent: `ldims check --repair` mends what it can")
        sys.exit(1)
    dispatcher = Dispatcher(settings)
    try:
        dispatcher.ping()
    except LdimsError:
        raise click.ClickException(
            "the repair sends work to the index worker through Redis, which does not answer: "
            "start `ldims serve` (or the workers) and run it again"
        ) from None
    try:
        done = mend(
            rt,
            found,
            index_again=dispatcher.reindex_documents,
            drop_from_index=dispatcher.delete_from_index,
            extract_again=lambda jobs: [dispatcher.extract(*job) for job in jobs],
            nudge_embed=dispatcher.nudge_embed,
        )
    finally:
        dispatcher.close()
    for kind, count in done.done.items():
        if count:
            click.echo(f"repaired: {count} {kind.replace('_', ' ')}")
    for kind, count in done.not_repaired.items():
        click.echo(f"not repaired: {count} {DESCRIPTIONS[kind]}")
    click.echo("the index worker applies the repairs queued; `ldims check` again to confirm")
    sys.exit(1 if done.not_repaired else 0)


@cli.command()
@click.option("--force", is_flag=True, help="Every completed document, even those embedded.")
@click.option(
    "--retry-failed", is_flag=True, help="Also the documents whose vectors failed (some chunks)."
)
def embed(force: bool, retry_failed: bool) -> None:
    """Wake the embed stage for the completed documents that need vectors (a new model, a lost
    message; --force: all of them, e.g. after a reindex; --retry-failed: those whose chunks
    the model refused, e.g. after fixing the endpoint). The embed worker writes them."""
    from ldims.catalog import Catalog, repository
    from ldims.lifecycle import vector_work
    from ldims.semantic import fingerprint_for
    from workers import Dispatcher

    settings = get_settings()
    fingerprint = fingerprint_for(settings)
    if fingerprint is None:
        raise click.UsageError("semantic search is off (LDIMS_EMBEDDING_MODEL=none)")
    catalog = Catalog(settings.catalog_url)
    catalog.upgrade()
    dispatcher = Dispatcher(settings)
    try:
        with catalog.session() as session:
            if force or retry_failed:
                vector_work.forget(session, fingerprint, every=force)
            queued = repository.pending_vectors(session, fingerprint)[0]
        if queued:
            dispatcher.nudge_embed()
    finally:
        dispatcher.close()
    click.echo(f"queued {queued} documents for embedding ({fingerprint})")


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--url", default=None, help="API base URL (default http://LDIMS_HOST:LDIMS_PORT).")
@click.option("--collection", default=None, help="Collection for every file.")
@click.option("--document-type", default=None, help="documentType for every file.")
@click.option("--submitter", default=None, help="submitter for every file.")
@click.option("--tenant", default=None, help="Tenant header (when no API keys are used).")
@click.option("--api-key", envvar="LDIMS_API_KEY", default=None, help="API key (Bearer).")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait for final states.")
@click.option("--timeout", type=float, default=900, show_default=True, help="Seconds to wait.")
@click.option(
    "--concurrency",
    "--parallel",
    "concurrency",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Uploads (and status checks) at a time (--parallel: the former name).",
)
@click.option(
    "--bulk",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Files up to 1 MiB per upload request (POST /api/documents/bulk); 1: one a request.",
)
def ingest(**options: object) -> None:
    """Upload files or folders (recursively) and report completed / failed with reasons."""
    from runtime.cli.ingest import run_ingest

    settings = get_settings()
    options["url"] = options["url"] or f"http://{settings.host}:{settings.port}"
    raise SystemExit(run_ingest(**options))  # type: ignore[arg-type]


@cli.group()
def guide() -> None:
    """Knowledge trees of the guide toolset."""


@guide.command("validate")
@click.argument("directory", required=False, type=click.Path(exists=True, file_okay=False))
def guide_validate(directory: str | None) -> None:
    """Check every tree file (default: LDIMS_GUIDE_DIR): file:line: problem; exit 1 on errors."""
    from pathlib import Path

    from ldims.guide import SHIPPED_TREES, validate_directory

    folder = Path(directory) if directory else (get_settings().guide_dir or SHIPPED_TREES)
    problems = validate_directory(folder)
    for problem in problems:
        click.echo(str(problem), err=problem.severity == "error")
    errors = sum(problem.severity == "error" for problem in problems)
    warnings = len(problems) - errors
    click.echo(f"{folder}: {errors} error(s), {warnings} warning(s)")
    raise SystemExit(1 if errors else 0)


def _register_qmd() -> None:
    from runtime.cli.qmd import register

    register(cli)


_register_qmd()


def _register_keys() -> None:
    from runtime.cli.keys import register

    register(cli)


_register_keys()

if __name__ == "__main__":
    cli()
