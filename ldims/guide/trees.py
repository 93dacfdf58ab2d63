"""Knowledge trees of the ``guide`` toolset: the file format, loading and validation.

A tree is one YAML or JSON file (JSON is read by the same YAML parser, so problems carry line
numbers either way) in the seed's node format, plus what authors need::

    id: tech-investment            # unique across the directory
    title: 科技行业投资咨询
    language: zh                   # zh | ru | en | …: the default texts (end, back) follow it
    keywords: [投资, investment]   # the tree as a whole, for choosing among trees
    root: root                     # default "root"
    entry_nodes: [node_ai]         # nodes a first question may land on (the root always may)
    nodes:
      root:
        title: 欢迎                  # the step's friendly name (current_step); default: the id
        response: 欢迎进行科技行业投资咨询。……
        keywords: [科技, technology, технологии]
        options:
          - {id: ai, description: 人工智能, next_node: node_ai}
          - {id: end, description: 结束咨询, next_node: null}     # null ends the session
        documents: {query: "AI 芯片", ids: [], limit: 3}        # optional snippets attached

A node without options is a leaf: reaching it completes the session. ``back``, ``end`` and
``provide_more_info`` work on every node whether or not it lists them; a node may list
``back`` / ``end`` itself (the seed's example does) to word them or to send ``back``
somewhere specific.

:func:`load_tree` raises :class:`TreeError` with every problem (file, line, message);
:func:`validate_directory` reports problems of every file without raising (``ldims guide
validate``). Unreachable nodes are warnings: the tree works, the author probably forgot a link.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

BUILT_IN_OPTIONS = ("back", "end", "provide_more_info")
TREE_SUFFIXES = (".yaml", ".yml", ".json")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_TREE_KEYS = {"id", "title", "language", "keywords", "root", "entry_nodes", "nodes", "texts"}
_NODE_KEYS = {"title", "response", "keywords", "options", "documents"}
_OPTION_KEYS = {"id", "description", "next_node"}
_DOCUMENT_KEYS = {"query", "ids", "limit"}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a tree file; ``severity`` is ``error`` or ``warning``."""

    path: Path
    line: int
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.severity}: {self.message}"


class TreeError(ValueError):
    """A tree file that cannot be used; ``problems`` lists every error found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass(frozen=True)
class Option:
    id: str
    description: str
    next_node: str | None


@dataclass(frozen=True)
class DocumentLink:
    """Documents whose snippets are attached to a node's response."""

    query: str | None
    ids: tuple[str, ...]
    limit: int = 3


@dataclass(frozen=True)
class Node:
    id: str
    title: str
    response: str
    keywords: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()
    documents: DocumentLink | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.options

    def option(self, option_id: str) -> Option | None:
        return next((o for o in self.options if o.id == option_id), None)


@dataclass(frozen=True)
class Tree:
    id: str
    title: str
    language: str
    root: str
    nodes: dict[str, Node]
    entry_nodes: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    texts: dict[str, str] = field(default_factory=dict)
    source: Path = Path()
    version: str = ""  # content hash: a session notices when its tree was edited

    def reachable_from(self, start: str) -> list[str]:
        """Node ids reachable from ``start`` (itself excluded), nearest first."""
        seen, order, frontier = {start}, [], [start]
        while frontier:
            following = []
            for node_id in frontier:
                for option in self.nodes[node_id].options:
                    target = option.next_node
                    if target is not None and target in self.nodes and target not in seen:
                        seen.add(target)
                        order.append(target)
                        following.append(target)
            frontier = following
        return order


class _Mapping(dict[str, Any]):
    """A YAML mapping that remembers its line and the lines of its keys."""

    line: int = 0
    key_lines: dict[str, int]


class _Sequence(list[Any]):
    line: int = 0


class _LineLoader(yaml.SafeLoader):
    """SafeLoader keeping line numbers and refusing duplicate keys (YAML would keep the last)."""

    duplicates: list[tuple[str, int]]


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> _Mapping:
    mapping = _Mapping()
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in mapping:
            loader.duplicates.append((str(key), line))
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.key_lines[str(key)] = line
    return mapping


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> _Sequence:
    sequence = _Sequence(loader.construct_object(item, deep=True) for item in node.value)
    sequence.line = node.start_mark.line + 1
    return sequence


# YAML 1.2 booleans only: an option id ``yes`` / ``no`` / ``on`` / ``off`` stays text.
_LineLoader.yaml_implicit_resolvers = {
    first: [r for r in resolvers if r[0] != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_LineLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_tree(path: Path) -> Tree:
    """The tree in ``path``; :class:`TreeError` with every problem when it cannot be used."""
    tree, problems = _parse(path)
    errors = [p for p in problems if p.severity == "error"]
    if errors or tree is None:
        raise TreeError(errors or [Problem(path, 1, "not a tree")])
    return tree


def validate_directory(directory: Path) -> list[Problem]:
    """Every problem of every tree file in ``directory`` (also duplicate tree ids)."""
    problems: list[Problem] = []
    owners: dict[str, Path] = {}
    for path in tree_files(directory):
        tree, found = _parse(path)
        problems.extend(found)
        if tree is not None and not any(p.severity == "error" for p in found):
            if tree.id in owners:
                problems.append(
                    Problem(path, 1, f"tree id {tree.id!r} is also used by {owners[tree.id]}")
                )
            owners.setdefault(tree.id, path)
    return problems


def tree_files(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.iterdir() if p.is_file() and p.suffix.lower() in TREE_SUFFIXES
    )


# --- parsing -----------------------------------------------------------------------------------
def _parse(path: Path) -> tuple[Tree | None, list[Problem]]:
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(path, 1, f"cannot read the file: {exc}")]
    loader = _LineLoader(text)
    loader.duplicates = []
    try:
        document = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        return None, [Problem(path, line, f"not valid YAML/JSON: {getattr(exc, 'problem', exc)}")]
    finally:
        loader.dispose()
    problems = [Problem(path, line, f"duplicate key {key!r}") for key, line in loader.duplicates]
    if not isinstance(document, _Mapping):
        return None, [*problems, Problem(path, 1, "the file must hold a mapping (id, nodes …)")]
    builder = _Builder(path, problems)
    tree = builder.tree(document, hashlib.sha256(raw).hexdigest()[:16])
    return tree, builder.problems


class _Builder:
    def __init__(self, path: Path, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        self.option_lines: dict[tuple[str, str], int] = {}  # (node, option) → line

    def error(self, line: int, message: str, severity: str = "error") -> None:
        self.problems.append(Problem(self.path, line, message, severity))

    def text(self, mapping: _Mapping, key: str, where: str, required: bool = True) -> str | None:
        value = mapping.get(key)
        line = mapping.key_lines.get(key, mapping.line)
        if value is None:
            if required:
                self.error(mapping.line, f"{where}: missing field {key!r}")
            return None
        if not isinstance(value, str | int | float) or not str(value).strip():
            self.error(line, f"{where}: {key!r} must be non-empty text")
            return None
        return str(value)

    def words(self, mapping: _Mapping, key: str, where: str) -> tuple[str, ...]:
        value = mapping.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str | int) for v in value):
            self.error(mapping.key_lines.get(key, mapping.line), f"{where}: {key!r} must be a list")
            return ()
        return tuple(str(v) for v in value)

    def unknown_keys(self, mapping: _Mapping, allowed: set[str], where: str) -> None:
        for key in mapping:
            if key not in allowed:
                line = mapping.key_lines.get(str(key), mapping.line)
                self.error(line, f"{where}: unknown field {key!r} (allowed: {sorted(allowed)})")

    def tree(self, document: _Mapping, version: str) -> Tree | None:
        self.unknown_keys(document, _TREE_KEYS, "tree")
        tree_id = self.text(document, "id", "tree")
        title = self.text(document, "title", "tree")
        language = self.text(document, "language", "tree")
        root = self.text(document, "root", "tree", required=False) or "root"
        if tree_id is not None and not _ID.match(tree_id):
            self.error(document.key_lines["id"], f"tree id {tree_id!r}: letters, digits, _ . : -")
        raw_nodes = document.get("nodes")
        if not isinstance(raw_nodes, _Mapping) or not raw_nodes:
            self.error(document.line, "tree: 'nodes' must be a non-empty mapping of node id → node")
            return None
        nodes: dict[str, Node] = {}
        lines: dict[str, int] = {}
        for node_id, raw in raw_nodes.items():
            lines[str(node_id)] = raw_nodes.key_lines[str(node_id)]
            node = self.node(str(node_id), raw, raw_nodes.key_lines[str(node_id)])
            if node is not None:
                nodes[node.id] = node
        entry_nodes = self.words(document, "entry_nodes", "tree")
        texts = document.get("texts") or {}
        if not isinstance(texts, dict) or not all(isinstance(v, str) for v in texts.values()):
            self.error(document.line, "tree: 'texts' must map names to text")
            texts = {}
        self.links(document, root, entry_nodes, nodes, lines)
        if None in (tree_id, title, language):
            return None
        return Tree(
            id=tree_id,  # type: ignore[arg-type]
            title=title,  # type: ignore[arg-type]
            language=language,  # type: ignore[arg-type]
            root=root,
            nodes=nodes,
            entry_nodes=entry_nodes,
            keywords=self.words(document, "keywords", "tree"),
            texts=dict(texts),
            source=self.path,
            version=version,
        )

    def node(self, node_id: str, raw: Any, line: int) -> Node | None:
        where = f"node {node_id!r}"
        if not _ID.match(node_id):
            self.error(line, f"{where}: node ids are letters, digits, _ . : -")
        if not isinstance(raw, _Mapping):
            self.error(line, f"{where}: must be a mapping with 'response' and 'options'")
            return None
        self.unknown_keys(raw, _NODE_KEYS, where)
        response = self.text(raw, "response", where)
        options: list[Option] = []
        seen: set[str] = set()
        raw_options = raw.get("options") or []
        if not isinstance(raw_options, list):
            self.error(raw.key_lines.get("options", raw.line), f"{where}: 'options' must be a list")
            raw_options = []
        for item in raw_options:
            option = self.option(item, where)
            if option is None:
                continue
            if option.id in seen:
                self.error(
                    getattr(item, "line", raw.line), f"{where}: duplicate option id {option.id!r}"
                )
                continue
            seen.add(option.id)
            options.append(option)
            self.option_lines[(node_id, option.id)] = getattr(item, "line", line)
        if response is None:
            return None
        return Node(
            id=node_id,
            title=self.text(raw, "title", where, required=False) or node_id,
            response=response,
            keywords=self.words(raw, "keywords", where),
            options=tuple(options),
            documents=self.documents(raw.get("documents"), where, raw),
        )

    def option(self, item: Any, where: str) -> Option | None:
        if not isinstance(item, _Mapping):
            self.error(getattr(item, "line", 0) or 1, f"{where}: an option must be a mapping")
            return None
        self.unknown_keys(item, _OPTION_KEYS, f"{where} option")
        option_id = self.text(item, "id", f"{where} option")
        description = self.text(item, "description", f"{where} option")
        if "next_node" not in item:
            self.error(item.line, f"{where} option {option_id!r}: missing field 'next_node'")
        target = item.get("next_node")
        if option_id is not None and not _ID.match(option_id):
            self.error(item.line, f"{where}: option id {option_id!r}: letters, digits, _ . : -")
        if option_id is None or description is None:
            return None
        return Option(option_id, description, None if target is None else str(target))

    def documents(self, raw: Any, where: str, node: _Mapping) -> DocumentLink | None:
        if raw is None:
            return None
        line = node.key_lines.get("documents", node.line)
        if not isinstance(raw, _Mapping):
            self.error(line, f"{where}: 'documents' must be a mapping (query, ids, limit)")
            return None
        self.unknown_keys(raw, _DOCUMENT_KEYS, f"{where} documents")
        query = self.text(raw, "query", f"{where} documents", required=False)
        ids = self.words(raw, "ids", f"{where} documents")
        limit = raw.get("limit", 3)
        if not isinstance(limit, int) or not 1 <= limit <= 10:
            self.error(line, f"{where} documents: 'limit' must be 1..10")
            limit = 3
        if query is None and not ids:
            self.error(line, f"{where} documents: give a 'query' or 'ids'")
            return None
        return DocumentLink(query, ids, limit)

    def links(
        self,
        document: _Mapping,
        root: str,
        entry_nodes: Iterable[str],
        nodes: dict[str, Node],
        lines: dict[str, int],
    ) -> None:
        if root not in lines:
            self.error(
                document.key_lines.get("root", document.line), f"root node {root!r} is not defined"
            )
            return
        for entry in entry_nodes:
            if entry not in lines:
                self.error(
                    document.key_lines["entry_nodes"], f"entry node {entry!r} is not defined"
                )
        for node in nodes.values():
            for option in node.options:
                if option.next_node is not None and option.next_node not in lines:
                    self.error(
                        self.option_lines.get((node.id, option.id), lines[node.id]),
                        f"node {node.id!r} option {option.id!r}: next_node "
                        f"{option.next_node!r} is not defined",
                    )
        reachable = {root, *entry_nodes}
        frontier = list(reachable)
        while frontier:
            node = nodes.get(frontier.pop())
            for option in node.options if node else ():
                if option.next_node in lines and option.next_node not in reachable:
                    reachable.add(option.next_node)
                    frontier.append(option.next_node)
        for node_id, line in lines.items():
            if node_id not in reachable:
                self.error(line, f"node {node_id!r} is unreachable from the root", "warning")
