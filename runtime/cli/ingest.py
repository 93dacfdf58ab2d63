"""``ldims ingest``: bulk upload through the REST API with a progress bar and a summary."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import click
import httpx
from tqdm import tqdm

FINAL = {"completed", "failed"}


@dataclass
class Outcome:
    path: Path
    document_id: str | None = None
    status: str = "rejected"
    reason: str = ""


def collect_files(paths: tuple[str, ...]) -> list[Path]:
    """Files named, and files under folders named (hidden ones skipped), in a stable order."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        else:
            files.append(path)
    return files


def _upload(client: httpx.Client, path: Path, fields: dict[str, str]) -> Outcome:
    try:
        with path.open("rb") as handle:
            response = client.post(
                "/api/documents", files={"file": (path.name, handle)}, data=fields
            )
    except httpx.HTTPError as exc:
        return Outcome(path, reason=f"upload failed: {type(exc).__name__}")
    body = response.json()
    if response.status_code in (200, 202):
        return Outcome(path, body["documentId"], body["status"])
    return Outcome(
        path, reason=f"{response.status_code} {body.get('errorCode')}: {body.get('errorMessage')}"
    )


def _wait(client: httpx.Client, outcomes: list[Outcome], timeout: float) -> None:
    pending = [o for o in outcomes if o.document_id and o.status not in FINAL]
    deadline = time.monotonic() + timeout
    with tqdm(total=len(pending), desc="processing", unit="doc") as bar:
        while pending and time.monotonic() < deadline:
            still = []
            for outcome in pending:
                body = client.get(f"/api/documents/{outcome.document_id}").json()
                outcome.status = body.get("status", outcome.status)
                if outcome.status in FINAL:
                    error = body.get("error") or {}
                    outcome.reason = f"{error.get('code')}: {error.get('message')}" if error else ""
                    bar.update(1)
                else:
                    still.append(outcome)
            pending = still
            if pending:
                time.sleep(0.5)
    for outcome in pending:
        outcome.reason = f"still {outcome.status} after {timeout:.0f}s"


def run_ingest(
    paths: tuple[str, ...],
    url: str,
    collection: str | None,
    document_type: str | None,
    submitter: str | None,
    tenant: str | None,
    api_key: str | None,
    wait: bool,
    timeout: float,
    parallel: int,
) -> int:
    """Upload everything; exit code 0 when nothing was rejected or failed."""
    files = collect_files(paths)
    fields = {
        key: value
        for key, value in {
            "collection": collection,
            "documentType": document_type,
            "submitter": submitter,
        }.items()
        if value
    }
    headers = {"X-LDIMS-Tenant": tenant} if tenant else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            outcomes = list(
                tqdm(
                    pool.map(lambda p: _upload(client, p, fields), files),
                    total=len(files),
                    desc="uploading",
                    unit="file",
                )
            )
        if wait:
            _wait(client, outcomes, timeout)
    counts = Counter(o.status for o in outcomes)
    click.echo("\n" + ", ".join(f"{status}: {n}" for status, n in sorted(counts.items())))
    for outcome in outcomes:
        if outcome.status not in ("completed", "queued", "processing") or outcome.reason:
            click.echo(f"  {outcome.status:<10} {outcome.path}  {outcome.reason}")
    bad = (
        counts["failed"]
        + counts["rejected"]
        + (sum(1 for o in outcomes if o.status not in FINAL) if wait else 0)
    )
    return 1 if bad else 0
