"""Snippets: the stretch with the most query terms, each occurrence marked, bounded length;
found by prefix, by tokenizing near a word the term does not prefix, or the beginning."""

from __future__ import annotations

import pytest

from indexer.snippets import snippet

FILLER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30


@pytest.mark.parametrize(
    ("text", "terms", "exact", "marked"),
    [
        (
            FILLER + "The turbine blades were inspected." + FILLER,
            {"turbin", "blade"},
            False,
            ["**turbine**", "**blades**"],
        ),
        # Porter2 stems "firing" to "fire", which is not its prefix: found by tokenizing.
        (
            FILLER + "There was not much firing done during the night." + FILLER,
            {"fire"},
            False,
            ["**firing**"],
        ),
        # "ёлка" is indexed as "елк": the folded text finds it.
        (FILLER + "Новогодняя ёлка стояла в зале." + FILLER, {"елк"}, False, ["**ёлка**"]),
        (
            FILLER + "中华人民共和国成立了" + FILLER,
            {"中华人民共和国", "共和国"},
            False,
            ["**中华人民共和国**"],
        ),
        (
            FILLER + "Error KWDB-4001 in user_profile." + FILLER,
            {"kwdb-4001", "user_profile"},
            True,
            ["**KWDB-4001**", "**user_profile**"],
        ),
        ("İstanbul has the turbine hall." + FILLER, {"turbin"}, False, ["**turbine**"]),
    ],
)
def test_terms_are_marked_inside_a_bounded_excerpt(
    text: str, terms: set[str], exact: bool, marked: list[str]
) -> None:
    excerpt = snippet(text, terms, exact, 120)
    for mark in marked:
        assert mark in excerpt
    assert len(excerpt) <= 2 * 120
    assert excerpt.startswith("…") or text.startswith(excerpt.replace("**", "")[:20])


def test_a_chunk_without_the_terms_gives_its_beginning() -> None:
    excerpt = snippet(FILLER, {"turbin"}, False, 100)
    assert "**" not in excerpt
    assert excerpt.startswith("Lorem ipsum") and excerpt.endswith("…")
    assert len(excerpt) <= 130
