"""The shipped knowledge trees of the ``guide`` toolset, tree validation, and entry matching.

The shipped trees must load without a single problem, let every node reach an end, and name
only failure codes and settings LDIMS really has. Validation is checked on small broken
files written to ``tmp_path`` (file and line of each problem). The matching table of
``tests/guide_cases.py`` must hold completely: a first question lands on its node.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ldims.guide.matching import Matcher, entry_candidates, subtree_candidates
from ldims.guide.trees import Problem, Tree, TreeError, load_tree, validate_directory
from ldims.settings import Settings
from tests.conftest import ROOT
from tests.guide_cases import FALLBACK_CASES, MATCH_CASES
from workers.extraction import FAILURE_CODES

TREES = ROOT / "ldims" / "guide" / "trees"
TECH = TREES / "tech_investment.zh.yaml"
INGESTION = TREES / "ingestion_troubleshooting.en.yaml"
# GuideEngine's default match_threshold: below it a first question starts at a root.
FALLBACK_THRESHOLD = 0.25
DISCLAIMER = "不构成投资建议"
_HAN = re.compile(r"[\u4e00-\u9fff]")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")


@pytest.fixture(scope="module")
def shipped() -> dict[str, Tree]:
    return {tree.id: tree for tree in (load_tree(TECH), load_tree(INGESTION))}


@pytest.fixture(scope="module")
def matcher(shipped: dict[str, Tree]) -> Matcher:
    return Matcher(entry_candidates(list(shipped.values())))


# --- the shipped trees ---------------------------------------------------------------------
def test_shipped_trees_load(shipped: dict[str, Tree]) -> None:
    tech, ingestion = shipped["tech-investment"], shipped["ingestion-troubleshooting"]
    assert (tech.language, ingestion.language) == ("zh", "en")
    for tree in shipped.values():
        assert 15 <= len(tree.nodes) <= 25, (tree.id, len(tree.nodes))
        assert tree.root == "root" and tree.entry_nodes
        assert set(tree.entry_nodes) <= set(tree.nodes)
    # The seed's nodes keep their texts.
    assert tech.nodes["root"].response == "欢迎进行科技行业投资咨询。您想了解哪个细分领域？"
    assert tech.nodes["node_ai"].response == "AI是一个广阔领域。您对硬件还是软件更感兴趣？"
    companies = tech.nodes["node_ai_hw_companies"]
    assert companies.response.startswith("以下是主要AI硬件公司的概述：\n1. NVIDIA:")
    assert [(o.id, o.next_node) for o in companies.options] == [("back", "node_ai"), ("end", None)]
    assert [o.next_node for o in tech.nodes["node_ai_hardware"].options][:3] == [
        "node_ai_hw_trend",
        "node_ai_hw_companies",
        "node_ai_hw_compare",
    ]
    assert set(tech.texts) <= {"end", "back_at_start", "no_match", "tree_changed"}


def test_shipped_directory_has_no_problems_at_all() -> None:
    assert validate_directory(TREES) == []


def _can_end(tree: Tree) -> set[str]:
    """Nodes from which some path reaches a leaf or an option that ends (next_node null)."""
    ending = {
        node.id
        for node in tree.nodes.values()
        if node.is_leaf or any(o.next_node is None for o in node.options)
    }
    grew = True
    while grew:
        grew = False
        for node in tree.nodes.values():
            if node.id not in ending and any(o.next_node in ending for o in node.options):
                ending.add(node.id)
                grew = True
    return ending


@pytest.mark.parametrize("path", [TECH, INGESTION], ids=lambda p: p.name)
def test_every_node_can_reach_an_end(path: Path) -> None:
    tree = load_tree(path)
    assert set(tree.nodes) - _can_end(tree) == set()
    reachable = {tree.root, *tree.reachable_from(tree.root)}
    assert reachable == set(tree.nodes), "every node is reachable from the root"
    assert any(node.is_leaf for node in tree.nodes.values())


def test_a_cycle_without_an_exit_is_caught_by_the_walk(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "loop.yaml",
        """
        id: loop
        title: Loop
        language: en
        nodes:
          root:
            response: Round and round.
            options:
              - {id: a, description: To b, next_node: b}
          b:
            response: And back.
            options:
              - {id: back, description: To the root, next_node: root}
        """,
    )
    assert _can_end(load_tree(path)) == set()


def test_tech_tree_speaks_three_languages_and_disclaims(shipped: dict[str, Tree]) -> None:
    tree = shipped["tech-investment"]
    for node in tree.nodes.values():
        words = " ".join(node.keywords)
        assert _HAN.search(words) and _CYRILLIC.search(words), node.id
        assert re.search(r"[A-Za-z]", words), node.id
        assert node.title != node.id, node.id
        # Where the advice ends (a leaf, or only back / end left), the disclaimer is there.
        if all(o.id in ("back", "end") for o in node.options) and node.id != "root":
            assert DISCLAIMER in node.response, node.id


def test_ingestion_tree_knows_the_real_codes_and_settings(shipped: dict[str, Tree]) -> None:
    tree = shipped["ingestion-troubleshooting"]
    keywords = {word for node in tree.nodes.values() for word in node.keywords}
    other_codes = {"WORKER_LOST", "URL_NOT_ALLOWED", "FETCH_FAILED", "INTERNAL_ERROR"}
    other_codes |= {"STORAGE_ERROR", "TIKA_UNAVAILABLE", "INDEX_BUSY", "CONTENT_MISSING"}
    assert set(FAILURE_CODES) | other_codes <= keywords
    text = " ".join(node.response for node in tree.nodes.values())
    settings = {f"LDIMS_{name.upper()}" for name in Settings.model_fields}
    named = set(re.findall(r"LDIMS_[A-Z_]+[A-Z]", text))
    assert named and named <= settings, named - settings
    for node in tree.nodes.values():
        assert node.keywords and node.title != node.id, node.id
    assert [n.id for n in tree.nodes.values() if n.documents] == [
        "node_timeout",
        "node_not_in_search",
    ]


# --- validation: file and line of each problem ---------------------------------------------
def _write(path: Path, text: str) -> Path:
    lines = text.strip("\n").splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    path.write_text("\n".join(line[indent:] for line in lines) + "\n", encoding="utf-8")
    return path


def _line(path: Path, fragment: str, occurrence: int = 1) -> int:
    """1-based line of the ``occurrence``-th line of ``path`` that contains ``fragment``."""
    hits = [n for n, line in enumerate(path.read_text().splitlines(), 1) if fragment in line]
    return hits[occurrence - 1]


def _only(problems: list[Problem], fragment: str) -> Problem:
    found = [p for p in problems if fragment in p.message]
    assert len(found) == 1, problems
    return found[0]


def _errors(path: Path) -> list[Problem]:
    with pytest.raises(TreeError) as caught:
        load_tree(path)
    assert all(p.path == path and p.severity == "error" for p in caught.value.problems)
    return caught.value.problems


def test_dangling_next_node(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.yaml",
        """
        id: t
        title: T
        language: en
        nodes:
          root:
            response: Hello.
            options:
              - {id: go, description: Go, next_node: nowhere}
        """,
    )
    problem = _only(_errors(path), "'nowhere' is not defined")
    assert problem.line == _line(path, "next_node: nowhere")
    assert "option 'go'" in problem.message


def test_unreachable_node_is_a_warning(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.yaml",
        """
        id: t
        title: T
        language: en
        nodes:
          root:
            response: Hello.
          forgotten:
            response: Nobody links here.
        """,
    )
    assert load_tree(path).nodes["forgotten"]  # a warning does not stop the tree
    (problem,) = validate_directory(tmp_path)
    assert (problem.path, problem.line, problem.severity) == (
        path,
        _line(path, "forgotten:"),
        "warning",
    )
    assert "'forgotten' is unreachable" in problem.message


def test_entry_nodes_are_reachable_but_must_exist(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.yaml",
        """
        id: t
        title: T
        language: en
        entry_nodes: [side, ghost]
        nodes:
          root:
            response: Hello.
          side:
            response: Reached only as an entry node.
        """,
    )
    problems = validate_directory(tmp_path)
    assert problems == [
        Problem(path, _line(path, "entry_nodes:"), "entry node 'ghost' is not defined")
    ]


def test_duplicate_option_ids(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.yaml",
        """
        id: t
        title: T
        language: en
        nodes:
          root:
            response: Hello.
            options:
              - {id: end, description: Stop, next_node: null}
              - id: end
                description: Stop again
                next_node: null
        """,
    )
    problem = _only(_errors(path), "duplicate option id 'end'")
    assert problem.line == _line(path, "- id: end")


def test_duplicate_node_ids(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.yaml",
        """
        id: t
        title: T
        language: en
        nodes:
          root:
            response: Hello.
          root:
            response: Hello again.
        """,
    )
    problem = _only(_errors(path), "duplicate key 'root'")
    assert problem.line == _line(path, "root:", occurrence=2)


def test_missing_fields(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.yaml",
        """
        id: t
        title: T
        language: en
        nodes:
          root:
            title: No response here
            options:
              - {id: a, next_node: other}
              - {id: b, description: No target}
          other:
            response: Fine.
        """,
    )
    problems = _errors(path)
    # A node's missing field: the line where the node's fields start.
    assert _only(problems, "missing field 'response'").line == _line(path, "title: No response")
    assert _only(problems, "missing field 'description'").line == _line(path, "{id: a,")
    missing_target = _only(problems, "missing field 'next_node'")
    assert missing_target.line == _line(path, "{id: b,")
    assert "option 'b'" in missing_target.message


def test_unknown_fields(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.yaml",
        """
        id: t
        title: T
        language: en
        author: someone
        nodes:
          root:
            response: Hello.
            answer: typo of response
            options:
              - {id: end, description: Stop, next_node: null, weight: 2}
        """,
    )
    problems = _errors(path)
    assert _only(problems, "unknown field 'author'").line == _line(path, "author:")
    assert _only(problems, "unknown field 'answer'").line == _line(path, "answer:")
    assert _only(problems, "unknown field 'weight'").line == _line(path, "weight: 2")


def test_bad_yaml_reports_the_line_of_the_syntax_error(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t.yaml",
        """
        id: t
        title: T
        language: en
        nodes:
          root:
            response: Hello.
            options:
              - {id: end, description: Stop, next_node: null
          other:
            response: Never read.
        """,
    )
    (problem,) = _errors(path)
    assert problem.message.startswith("not valid YAML/JSON")
    assert problem.line == _line(path, "other:")  # where the parser found the unclosed "{"


def test_json_trees_report_lines_too(tmp_path: Path) -> None:
    tree = {
        "id": "j",
        "title": "J",
        "language": "en",
        "nodes": {"root": {"response": "Hello.", "options": []}},
    }
    text = json.dumps(tree, indent=2).replace(
        '"options": []',
        '"options": [\n{"id": "go", "description": "Go", "next_node": "missing"}\n]',
    )
    path = tmp_path / "j.json"
    path.write_text(text, encoding="utf-8")
    problem = _only(_errors(path), "'missing' is not defined")
    assert problem.line == _line(path, '"next_node": "missing"')

    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "id": "b",\n  "title": "B",\n  "nodes": {\n}}}\n', encoding="utf-8")
    (problem,) = _errors(broken)
    assert problem.message.startswith("not valid YAML/JSON")
    assert problem.line == 5


def test_duplicate_tree_ids_across_files(tmp_path: Path) -> None:
    tree = "id: same\ntitle: T\nlanguage: en\nnodes:\n  root:\n    response: Hello.\n"
    first = tmp_path / "a.yaml"
    first.write_text(tree, encoding="utf-8")
    second = tmp_path / "b.json"
    second.write_text(
        json.dumps(
            {"id": "same", "title": "T", "language": "en", "nodes": {"root": {"response": "Hi."}}}
        ),
        encoding="utf-8",
    )
    (problem,) = validate_directory(tmp_path)
    assert (problem.path, problem.line, problem.severity) == (second, 1, "error")
    assert f"tree id 'same' is also used by {first}" in problem.message


# --- matching ------------------------------------------------------------------------------
def _language(query: str) -> str:
    return "zh" if _HAN.search(query) else "ru" if _CYRILLIC.search(query) else "en"


def test_matching_table_has_enough_cases() -> None:
    per_group: dict[tuple[str, str], int] = {}
    for query, tree_id, _ in MATCH_CASES:
        key = (tree_id, _language(query))
        per_group[key] = per_group.get(key, 0) + 1
    assert per_group[("ingestion-troubleshooting", "en")] >= 20
    assert per_group[("tech-investment", "zh")] >= 20
    assert per_group[("tech-investment", "en")] >= 10
    assert per_group[("tech-investment", "ru")] >= 10
    assert len({query for query, _, _ in MATCH_CASES}) == len(MATCH_CASES)


def test_first_questions_land_on_their_nodes(shipped: dict[str, Tree], matcher: Matcher) -> None:
    hits: dict[str, list[bool]] = {}
    misses = []
    for query, tree_id, node_id in MATCH_CASES:
        assert node_id == shipped[tree_id].root or node_id in shipped[tree_id].entry_nodes
        best = matcher.rank(query)[0]
        hit = (best.tree_id, best.node_id) == (tree_id, node_id)
        hit = hit and best.score >= FALLBACK_THRESHOLD  # else the engine would not land there
        hits.setdefault(_language(query), []).append(hit)
        if not hit:
            misses.append(f"{query!r}: want {tree_id}/{node_id}, got {best}")
    accuracy = {lang: f"{sum(h)}/{len(h)}" for lang, h in sorted(hits.items())}
    assert not misses, f"accuracy {accuracy}; misses:\n" + "\n".join(misses)


@pytest.mark.parametrize("query", FALLBACK_CASES)
def test_unrelated_questions_fall_back(matcher: Matcher, query: str) -> None:
    ranked = matcher.rank(query)
    assert not ranked or ranked[0].score < FALLBACK_THRESHOLD, ranked[:3]


@pytest.mark.parametrize(
    ("path", "start", "query", "expected"),
    [
        (TECH, "node_ai", "我想了解GPU芯片", "node_ai_hardware"),
        (TECH, "node_ai_hardware", "台积电和HBM内存", "node_ai_hw_supply_chain"),
        (TECH, "node_cloud", "液冷", "node_dc_power"),
        (INGESTION, "node_failed", "the PDF is password protected", "node_encrypted"),
        (INGESTION, "node_processing", "Flower shows no workers", "node_no_workers"),
    ],
)
def test_more_info_lands_below_the_current_node(
    path: Path, start: str, query: str, expected: str
) -> None:
    tree = load_tree(path)
    best = Matcher(subtree_candidates(tree, start)).rank(query)[0]
    assert best.node_id == expected
    assert best.score >= FALLBACK_THRESHOLD
