"""The guide engine: ``initiate_session`` and ``navigate_session`` of the knowledge-engine seed.

The server holds no language model; it walks a tree. A first question is matched to the best
entry node of the best tree (:mod:`ldims.guide.matching`); below ``match_threshold`` the
session starts at the root of the best-scoring tree (the first tree when nothing scores),
whose options are the topics. Each step returns the seed's ``SessionState``
{``session_id``, ``response``, ``current_step``, ``options[]``, ``is_complete``} plus
``tree_id``, ``node_id``, ``documents`` (snippets a node links to) and ``notice`` (what the
server did that the user should hear: a fallback, a tree edited under the session …).

Options on every step, listed or not: ``back`` (the previous step; a node's own ``back``
option wins), ``end`` (complete the session; a node's own ``end`` wins), and
``provide_more_info`` with ``user_input`` (re-matched among the nodes below the current one).
A tree edited while a session is in flight: the session continues when its node still
exists, and otherwise ends with a clear message instead of failing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ldims.caller import Caller
from ldims.errors import InvalidInput
from ldims.guide.errors import GuideUnavailable, InvalidOption, SessionComplete
from ldims.guide.matching import Matcher, entry_candidates, subtree_candidates
from ldims.guide.sessions import SessionRecord, SessionStore
from ldims.guide.store import TreeStore
from ldims.guide.trees import BUILT_IN_OPTIONS, DocumentLink, Node, Tree

log = logging.getLogger(__name__)
DocumentFinder = Callable[[Caller, DocumentLink], list[dict[str, Any]]]

# Texts the server itself says, per language; a tree's ``texts`` override them.
DEFAULT_TEXTS: dict[str, dict[str, str]] = {
    "en": {
        "end": "The session has ended. Thank you!",
        "back_at_start": "This is the first step; there is nothing to go back to.",
        "no_match": "I could not match that to this step. Please choose one of the options.",
        "fallback": "I could not find a topic that matches the question well; please choose one.",
        "tree_changed": "The knowledge base was updated and this step no longer exists. "
        "Please start a new session.",
        "tree_updated": "The knowledge base was updated; the session continues.",
    },
    "zh": {
        "end": "咨询已结束，感谢使用！",
        "back_at_start": "已经是第一步，无法再返回。",
        "no_match": "未能将您的补充信息匹配到当前步骤，请从选项中选择。",
        "fallback": "没有找到与问题完全匹配的主题，请选择一个主题。",
        "tree_changed": "知识库已更新，当前步骤已不存在。请重新开始会话。",
        "tree_updated": "知识库已更新，会话继续。",
    },
    "ru": {
        "end": "Консультация завершена. Спасибо!",
        "back_at_start": "Это первый шаг, возвращаться некуда.",
        "no_match": "Не удалось сопоставить ответ с этим шагом. Выберите один из вариантов.",
        "fallback": "Подходящая тема не найдена, выберите тему из списка.",
        "tree_changed": "База знаний обновилась, и этого шага больше нет. Начните новый сеанс.",
        "tree_updated": "База знаний обновилась; сеанс продолжается.",
    },
}


class GuideEngine:
    def __init__(
        self,
        trees: TreeStore,
        sessions: SessionStore,
        match_threshold: float = 0.25,
        find_documents: DocumentFinder | None = None,
    ) -> None:
        self.trees = trees
        self.sessions = sessions
        self.match_threshold = match_threshold
        self.find_documents = find_documents
        self._matchers: dict[tuple[str, ...], Matcher] = {}
        self._subtree_matchers: dict[tuple[str, str], Matcher] = {}

    # --- the two tools ---------------------------------------------------------------------
    def initiate(self, caller: Caller, user_query: str) -> dict[str, Any]:
        if not user_query.strip():
            raise InvalidInput(field="user_query", issue="The question cannot be empty")
        trees = self.trees.trees()
        if not trees:
            raise GuideUnavailable("No knowledge tree is loaded (LDIMS_GUIDE_DIR).")
        ranked = self._entry_matcher(list(trees.values())).rank(user_query)
        notice = None
        if ranked and ranked[0].score >= self.match_threshold:
            tree, node_id, score = trees[ranked[0].tree_id], ranked[0].node_id, ranked[0].score
        else:
            best = next((m for m in ranked if m.score > 0), None)
            tree = trees[best.tree_id] if best else next(iter(trees.values()))
            node_id, score = tree.root, best.score if best else 0.0
            notice = self._text(tree, "fallback")
        record = SessionRecord(
            id=self.sessions.new_id(),
            tenant=caller.tenant,
            tree_id=tree.id,
            tree_version=tree.version,
            node_id=node_id,
        )
        record.record_step("initiate", score=score, fallback=notice is not None)
        return self._state(tree, record, caller, notice)

    def navigate(
        self, caller: Caller, session_id: str, option_id: str, user_input: str | None = None
    ) -> dict[str, Any]:
        record = self.sessions.load(session_id, caller.tenant)
        if record.ended:
            raise SessionComplete(sessionId=session_id)
        tree = self.trees.trees().get(record.tree_id)
        if tree is None or record.node_id not in tree.nodes:
            return self._tree_gone(tree, record, caller)
        notice = None
        if tree.version != record.tree_version:
            record.tree_version = tree.version
            record.path = [n for n in record.path if n in tree.nodes]
            notice = self._text(tree, "tree_updated")
        node = tree.nodes[record.node_id]
        option = node.option(option_id)
        if option is not None:
            self._follow(tree, record, option.id, option.next_node)
        elif option_id == "back":
            notice = self._back(tree, record) or notice
        elif option_id == "end":
            record.ended = True
            record.record_step("end")
        elif option_id == "provide_more_info":
            notice = self._more_info(tree, record, user_input) or notice
        else:
            raise InvalidOption(
                f"{option_id!r} is not an option of this step; choose one of the listed ids "
                "(back, end and provide_more_info always work).",
                selectedOptionId=option_id,
                validOptions=[o.id for o in node.options]
                + [b for b in BUILT_IN_OPTIONS if node.option(b) is None],
            )
        return self._state(tree, record, caller, notice)

    # --- steps -----------------------------------------------------------------------------
    def _follow(
        self, tree: Tree, record: SessionRecord, option_id: str, target: str | None
    ) -> None:
        if target is None:
            record.ended = True
            record.record_step("option", option=option_id, ended=True)
            return
        if target in record.path:  # a node's own "back"-like link: unwind to it
            record.path = record.path[: record.path.index(target)]
        else:
            record.path.append(record.node_id)
        record.node_id = target
        record.record_step("option", option=option_id)

    def _back(self, tree: Tree, record: SessionRecord) -> str | None:
        if not record.path:
            record.record_step("back", moved=False)
            return self._text(tree, "back_at_start")
        record.node_id = record.path.pop()
        record.record_step("back")
        return None

    def _more_info(self, tree: Tree, record: SessionRecord, user_input: str | None) -> str | None:
        if not user_input or not user_input.strip():
            raise InvalidInput(
                field="user_input", issue="provide_more_info needs the user's words in user_input"
            )
        ranked = self._subtree_matcher(tree, record.node_id).rank(user_input)
        if not ranked or ranked[0].score < self.match_threshold:
            record.record_step("provide_more_info", matched=False)
            return self._text(tree, "no_match")
        record.path.append(record.node_id)
        record.node_id = ranked[0].node_id
        record.record_step("provide_more_info", matched=True, score=ranked[0].score)
        return None

    def _tree_gone(
        self, tree: Tree | None, record: SessionRecord, caller: Caller
    ) -> dict[str, Any]:
        record.ended = True
        record.record_step("tree_changed")
        self.sessions.save(record)
        language = tree.language if tree else "en"
        message = DEFAULT_TEXTS.get(language, DEFAULT_TEXTS["en"])["tree_changed"]
        return {
            "session_id": record.id,
            "response": message,
            "current_step": "tree_changed",
            "options": [],
            "is_complete": True,
            "tree_id": record.tree_id,
            "node_id": None,
            "documents": [],
            "notice": message,
        }

    # --- the answer --------------------------------------------------------------------------
    def _state(
        self, tree: Tree, record: SessionRecord, caller: Caller, notice: str | None
    ) -> dict[str, Any]:
        self.sessions.save(record)
        node = tree.nodes[record.node_id]
        if record.ended:
            return {
                "session_id": record.id,
                "response": self._text(tree, "end"),
                "current_step": "end",
                "options": [],
                "is_complete": True,
                "tree_id": tree.id,
                "node_id": record.node_id,
                "documents": [],
                "notice": notice,
            }
        return {
            "session_id": record.id,
            "response": node.response,
            "current_step": node.title,
            "options": [{"id": o.id, "description": o.description} for o in node.options],
            "is_complete": node.is_leaf,
            "tree_id": tree.id,
            "node_id": node.id,
            "documents": self._documents(caller, node),
            "notice": notice,
        }

    def _documents(self, caller: Caller, node: Node) -> list[dict[str, Any]]:
        if node.documents is None or self.find_documents is None:
            return []
        try:
            return self.find_documents(caller, node.documents)
        except Exception as exc:  # snippets are an extra: the step works without them
            log.warning("guide: documents for %s unavailable: %s", node.id, type(exc).__name__)
            return []

    def _text(self, tree: Tree, name: str) -> str:
        return tree.texts.get(name) or DEFAULT_TEXTS.get(tree.language, DEFAULT_TEXTS["en"])[name]

    def _subtree_matcher(self, tree: Tree, node_id: str) -> Matcher:
        key = (f"{tree.id}@{tree.version}", node_id)
        matcher = self._subtree_matchers.get(key)
        if matcher is None:
            matcher = Matcher(subtree_candidates(tree, node_id))
            if len(self._subtree_matchers) >= 1024:  # bounded: trees are edited over time
                self._subtree_matchers.clear()
            self._subtree_matchers[key] = matcher
        return matcher

    def _entry_matcher(self, trees: list[Tree]) -> Matcher:
        key = tuple(f"{tree.id}@{tree.version}" for tree in trees)
        matcher = self._matchers.get(key)
        if matcher is None:
            matcher = Matcher(entry_candidates(trees))
            self._matchers = {key: matcher}  # one generation of trees at a time
        return matcher
