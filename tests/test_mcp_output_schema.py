"""Compacted schemas (tool outputs, the search filters) accept and refuse what the models
themselves do."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from ldims.compact_schema import compact_field, compact_schema
from ldims.documents.reading import DocumentStatusOut
from ldims.documents.search_schema import SearchFilters, SearchOutput, SearchResult


def _model_accepts(document: dict[str, Any]) -> bool:
    """Pydantic's strict JSON validation of the output model: the reference."""
    try:
        SearchOutput.model_validate_json(json.dumps(document), strict=True)
    except ValidationError:
        return False
    return True


SEARCH_OUTPUT = {
    "isError": False,
    "results": [
        {
            "documentId": "d1",
            "documentName": "a.pdf",
            "relevanceScore": 1.0,
            "matchedContext": "**storage** report",
            "pageNumber": 3,
            "lineStart": 10,
            "lineEnd": 12,
            "uri": "ldims://docs/d1/pages/3",
            "metadata": {
                "createdAt": None,
                "submitter": "ann",
                "documentType": None,
                "collection": "default",
                "title": "A",
            },
        }
    ],
    "totalMatches": 1,
    "searchMetadata": {
        "executionTime": "0.001s",
        "searchMode": "semantic",
        "rankedBy": "keyword BM25F",
        "maxResults": 5,
        "offset": 0,
        "minScore": 0.002,
        "note": None,
    },
}


def _broken_variants(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Copies of the search output, each wrong in one place."""
    variants = []
    for path, value in [
        (("results", 0, "metadata", "submitter"), 5),
        (("results", 0, "metadata", "collection"), None),
        (("results", 0, "pageNumber"), "3"),
        (("searchMetadata", "searchMode"), "fuzzy"),
        (("searchMetadata", "note"), 1),
        (("totalMatches",), None),
    ]:
        broken = copy.deepcopy(document)
        target: Any = broken
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        variants.append(broken)
    missing = copy.deepcopy(document)
    del missing["results"][0]["metadata"]["title"]
    variants.append(missing)
    return variants


EXPLAIN = {
    "keywordScore": 7.1,
    "keywordRank": 1,
    "coverage": 1.0,
    "denseCosine": None,
    "denseMargin": None,
    "denseRank": None,
    "fused": 7.1,
    "fusedRank": 1,
    "features": {"best_coverage": 1.0, "keyword_share": 1.0, "log_rank": 0.0},
    "model": "keyword",
    "queryProbability": 0.99,
    "hitProbability": 0.97,
    "rerankScore": None,
    "relevanceScore": 0.9603,
}


def test_an_explained_result_agrees_with_the_model_and_a_wrong_one_does_not() -> None:
    compact = jsonschema.Draft202012Validator(compact_schema(SearchOutput))
    explained = copy.deepcopy(SEARCH_OUTPUT)
    explained["results"][0]["explain"] = EXPLAIN  # type: ignore[index]
    assert compact.is_valid(explained) and _model_accepts(explained)
    for field, value in (("model", "magic"), ("fusedRank", "1"), ("features", {"a": "b"})):
        broken = copy.deepcopy(explained)
        broken["results"][0]["explain"][field] = value  # type: ignore[index]
        assert not compact.is_valid(broken) and not _model_accepts(broken), field
    # Not asked for, it is not there at all (not a null on every result).
    dumped = SearchOutput.model_validate(SEARCH_OUTPUT).model_dump(mode="json")
    assert "explain" not in dumped["results"][0]


def test_compact_search_schema_has_no_references_and_no_nullable_any_of() -> None:
    schema = compact_schema(SearchOutput)
    text = repr(schema)
    assert "$ref" not in text and "$defs" not in text
    metadata = schema["properties"]["results"]["items"]["properties"]["metadata"]
    assert metadata["properties"]["createdAt"] == {"type": ["string", "null"]}
    assert "title" in metadata["properties"]  # a property named title survives


@pytest.mark.parametrize("model", [SearchOutput, SearchResult, DocumentStatusOut])
def test_compact_schema_is_a_valid_schema(model: type[BaseModel]) -> None:
    jsonschema.Draft202012Validator.check_schema(compact_schema(model))


def test_compact_schema_agrees_with_the_model_on_valid_and_broken_outputs() -> None:
    compact = jsonschema.Draft202012Validator(compact_schema(SearchOutput))
    assert compact.is_valid(SEARCH_OUTPUT) and _model_accepts(SEARCH_OUTPUT)
    for broken in _broken_variants(SEARCH_OUTPUT):
        assert not _model_accepts(broken)
        assert not compact.is_valid(broken)


def test_compact_nullable_filters_agree_with_the_model() -> None:
    """The ``filters`` input of searchDocuments, published compact and nullable."""
    schema = compact_field(SearchFilters, nullable=True).json_schema
    assert schema is not None and "anyOf" not in schema
    assert schema["properties"]["documentType"] == {
        "default": None,
        "description": "Filter by document type/format",
        "maxLength": 128,
        "type": ["string", "null"],
    }
    compact = jsonschema.Draft202012Validator(schema)

    def model_accepts(value: Any) -> bool:
        try:
            TypeAdapter(SearchFilters | None).validate_json(json.dumps(value), strict=True)
        except ValidationError:
            return False
        return True

    good = [None, {}, {"documentType": "memo", "searchMode": "exact"}, {"dateFrom": None}]
    bad = [
        {"documentType": "x" * 200},
        {"searchMode": "fuzzy"},
        {"bogus": 1},
        {"submitter": 5},
        "memo",
    ]
    for value in good:
        assert compact.is_valid(value) and model_accepts(value), value
    for value in bad:
        assert not compact.is_valid(value) and not model_accepts(value), value
