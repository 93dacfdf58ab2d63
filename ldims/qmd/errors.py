"""The qmd toolset's errors beyond the common ones (each with its stable code)."""

from __future__ import annotations

from ldims.errors import InvalidInput, LdimsError, NotFound


class UnknownCollection(InvalidInput):
    """A ``collection`` that the tenant does not have: never a silently empty or widened
    search (the details list the real ones)."""

    code = "UNKNOWN_COLLECTION"
    http_status = 404
    default_message = "No such collection."


class CollectionExists(InvalidInput):
    code = "COLLECTION_EXISTS"
    http_status = 409
    default_message = "A collection of that name exists already."


class NoVectors(LdimsError):
    """``vsearch`` before any document has vectors (qmd: the vector index does not exist)."""

    code = "NO_VECTORS"
    http_status = 409
    default_message = (
        "No vector index yet: no document has vectors of the embedding model. Use `search`, "
        "or wait for the embed stage (`ldims embed`)."
    )


class FileNotFound(NotFound):
    """A ``get`` of a path or docid the tenant does not have (details: similar paths)."""

    code = "RESOURCE_NOT_FOUND"
    default_message = "Document not found."


class NoFilesMatched(NotFound):
    default_message = "No files matched the pattern."
