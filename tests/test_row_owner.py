"""One writer of document rows: ``ldims/lifecycle`` (``states`` for a row's life and states,
``vector_work`` for its vector progress). Every other module asks it — read by inspecting the
source of every module of ours: none builds a ``Document``, runs an UPDATE, INSERT or DELETE of
``documents``, adds or deletes a document through a session, or assigns a document column.

Assignments are recognised by the column's name on any object but ``self``; the few other
records of ours with a field of the same name are listed below with what they are.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ldims.catalog.models import Document

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("api", "ldims", "runtime", "workers")
OWNER = "ldims/lifecycle/"
COLUMNS = {attribute.key for attribute in Document.__mapper__.column_attrs}
# Objects of other kinds whose field has a document column's name.
NOT_DOCUMENTS = {
    ("ldims/qmd/library.py", "folder_row"),  # a folder collection's row: its updated_at
    ("ldims/guide/sessions.py", "record"),  # a guide session: its created_at
    ("workers/extraction/xhtml.py", "unit"),  # an XHTML unit's name
    ("runtime/cli/ingest.py", "outcome"),  # the CLI's upload outcome: its status
}
SESSION_NAMES = {"document", "documents", "doc", "existing", "owned"}


def writes_outside_the_owner() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith(OWNER):
                continue
            found += [f"{name}:{line}: {what}" for line, what in _writes(name, path.read_text())]
    return found


def _writes(name: str, source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            function = ast.unparse(node.func)
            arguments = [ast.unparse(argument) for argument in node.args]
            if function == "Document":
                found.append((node.lineno, "builds a Document"))
            if function in ("update", "insert", "delete") and arguments[:1] == ["Document"]:
                found.append((node.lineno, f"{function}(Document)"))
            if re.search(r"\bquery\(Document\b.*\.(update|delete)$", function):
                found.append((node.lineno, "query(Document) … update/delete"))
            if function == "setattr" and arguments[:1] and arguments[0] in SESSION_NAMES:
                found.append((node.lineno, f"setattr on {arguments[0]}"))
            if (
                function.endswith((".add", ".delete", ".merge"))
                and "session" in function
                and arguments[:1]
                and arguments[0] in SESSION_NAMES
            ):
                found.append((node.lineno, f"{function}({arguments[0]})"))
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for part in ast.walk(target):
                if (
                    isinstance(part, ast.Attribute)
                    and isinstance(part.ctx, ast.Store)
                    and part.attr in COLUMNS
                ):
                    owner = ast.unparse(part.value)
                    if owner != "self" and (name, owner) not in NOT_DOCUMENTS:
                        found.append((node.lineno, f"assigns {owner}.{part.attr}"))
    return found


def test_only_the_lifecycle_writes_document_rows() -> None:
    assert writes_outside_the_owner() == []


def test_the_inspection_finds_each_kind_of_write() -> None:
    source = "\n".join(
        [
            "document.status = 'queued'",
            "row.attempts += 1",
            "session.delete(document)",
            "session.add(Document(id='a'))",
            "session.execute(update(Document).values(status='failed'))",
            "setattr(document, 'version', 2)",
            "session.query(Document).filter_by(id=key).update({Document.size: 1})",
            "self.status = 'fine'",  # an object's own field: not a document's
        ]
    )
    lines = sorted(line for line, _ in _writes("ldims/elsewhere.py", source))
    assert lines == [1, 2, 3, 4, 5, 6, 7]
