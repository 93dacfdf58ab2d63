"""The qmd core: folder collections, contexts and qmd's six tools (search, vsearch, query,
get, multi_get, status) over the documents core, as qmd 2.8.3 does them."""

from ldims.qmd.core import (
    DEFAULT_LIMIT,
    DEFAULT_MAX_BYTES,
    MAX_LIMIT,
    MultiGet,
    Qmd,
    Resource,
    SearchResult,
    Status,
)
from ldims.qmd.errors import (
    CollectionExists,
    FileNotFound,
    NoFilesMatched,
    NoVectors,
    UnknownCollection,
)
from ldims.qmd.folders import DEFAULT_MASK
from ldims.qmd.library import CollectionInfo, ContextInfo, UpdateReport

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_MASK",
    "DEFAULT_MAX_BYTES",
    "MAX_LIMIT",
    "CollectionExists",
    "CollectionInfo",
    "ContextInfo",
    "FileNotFound",
    "MultiGet",
    "NoFilesMatched",
    "NoVectors",
    "Qmd",
    "Resource",
    "SearchResult",
    "Status",
    "UnknownCollection",
    "UpdateReport",
]
