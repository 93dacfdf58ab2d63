"""The SQL toolset's prompts: Markdown files with a YAML front matter, loaded and rendered.

The eight prompts of the KWDB seed (§3.4) ship in ``ldims/sql/prompts/`` as package data; an
operator's directory may replace any of them (same file stem) or add new ones. A file reads::

    ---
    title: Short title
    description: One line an agent sees in prompts/list
    arguments:            # optional; each becomes an MCP prompt argument
      - name: table
        description: The table to look at
        required: false   # optional, default false
    ---
    The body, in Markdown; {table} is replaced when the prompt is rendered.

Decisions:

* Loading is strict. A file whose name, front matter or arguments are wrong raises
  :class:`PromptFileError` naming the file and the problem; unknown front-matter keys are errors
  too (a typo such as ``descripton`` must not pass unnoticed), and so is an argument declared
  but never used as ``{name}`` in the body. A missing operator directory is an error: a typo in
  the setting must not silently fall back to the shipped prompts.
* Rendering replaces ``{name}`` for declared arguments only, in one pass: the SQL and JSON in
  the bodies keep their other braces, and a value containing ``{other}`` is not expanded again.
* A missing required argument (absent, or only whitespace) raises ``InvalidInput`` with
  ``field`` naming it; so does an argument the prompt does not declare. A missing optional
  argument renders as :data:`NOT_GIVEN`, ``(not given)``, which reads naturally in a sentence
  ("Table: (not given)") and tells the model the user left it open; an empty string would
  leave broken sentences behind.
* Nothing is cached here: the caller loads once at start-up and keeps the dict (the seed's
  "runtime cache"); loading again picks up edited operator files.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

from ldims.errors import InvalidInput

__all__ = ["NOT_GIVEN", "PromptArgument", "PromptFile", "PromptFileError", "load_prompts"]

logger = logging.getLogger(__name__)

NOT_GIVEN = "(not given)"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")  # prompt names and argument names
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^---[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE)
_KEYS = frozenset({"title", "description", "arguments"})
_ARGUMENT_KEYS = frozenset({"name", "description", "required"})


class PromptFileError(ValueError):
    """A prompt file or directory is unusable; ``source`` is its path, ``problem`` says why."""

    def __init__(self, source: Path | str, problem: str) -> None:
        self.source = Path(source)
        self.problem = problem
        super().__init__(f"{source}: {problem}")


@dataclass(frozen=True)
class PromptArgument:
    """One argument of a prompt, as MCP's ``prompts/list`` shows it."""

    name: str
    description: str
    required: bool


@dataclass(frozen=True)
class PromptFile:
    """One prompt: its front matter, its body (``text``) and the file it came from."""

    name: str
    title: str
    description: str
    arguments: tuple[PromptArgument, ...]
    text: str
    source: Path

    def render(self, arguments: Mapping[str, str]) -> str:
        """The body with ``{name}`` filled for each declared argument; other braces untouched."""
        declared = {argument.name: argument for argument in self.arguments}
        for name in sorted(arguments):
            if name not in declared:
                known = ", ".join(declared) or "none"
                raise InvalidInput(
                    f"The prompt {self.name!r} has no argument {name!r} (it takes: {known}).",
                    field=name,
                )
            if not isinstance(arguments[name], str):
                raise InvalidInput(f"The argument {name!r} must be a string.", field=name)
        values: dict[str, str] = {}
        for name, argument in declared.items():
            value = arguments.get(name, "")
            if value.strip():
                values[name] = value
            elif argument.required:
                raise InvalidInput(
                    f"The prompt {self.name!r} needs the argument {name!r}: {argument.description}",
                    field=name,
                )
            else:
                values[name] = NOT_GIVEN
        if not values:
            return self.text
        pattern = re.compile(r"\{(" + "|".join(map(re.escape, values)) + r")\}")
        return pattern.sub(lambda match: values[match[1]], self.text)


def load_prompts(override_dir: Path | None = None) -> dict[str, PromptFile]:
    """The shipped prompts, then ``override_dir``'s ``*.md`` files replacing or adding, by name."""
    shipped = resources.files("ldims.sql") / "prompts"
    prompts = {prompt.name: prompt for prompt in _load_dir(shipped.iterdir())}
    if override_dir is not None:
        if not override_dir.is_dir():
            problem = "is not a directory" if override_dir.exists() else "does not exist"
            raise PromptFileError(override_dir, f"the prompt directory {problem}.")
        for prompt in _load_dir(override_dir.iterdir()):
            if prompt.name in prompts:
                logger.info("prompt %s: %s replaces the shipped file", prompt.name, prompt.source)
            prompts[prompt.name] = prompt
    return dict(sorted(prompts.items()))


def _load_dir(entries: Iterable[Traversable]) -> list[PromptFile]:
    files = [e for e in entries if e.name.endswith(".md") and e.is_file()]
    return [_parse(Path(str(e)), e.read_bytes()) for e in sorted(files, key=lambda e: e.name)]


def _parse(source: Path, data: bytes) -> PromptFile:
    """One prompt file: its name from the stem, its front matter, its body."""
    name = source.name.removesuffix(".md")
    if not NAME_PATTERN.fullmatch(name):
        raise PromptFileError(
            source,
            f"the prompt name {name!r} must match {NAME_PATTERN.pattern} "
            "(lower-case letters, digits and _, starting with a letter).",
        )
    try:
        content = data.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n")
    except UnicodeDecodeError as error:
        raise PromptFileError(source, f"not UTF-8 text ({error.reason}).") from None
    match = _FRONT_MATTER.match(content)
    if match is None:
        raise PromptFileError(
            source, "no front matter: the file must start with a '---' line and close it with one."
        )
    try:
        meta = yaml.safe_load(match[1])
    except yaml.YAMLError as error:
        raise PromptFileError(source, f"bad YAML in the front matter: {error}") from None
    if not isinstance(meta, dict):
        raise PromptFileError(
            source, "the front matter must be a mapping with title and description."
        )
    unknown = sorted(map(str, set(meta) - _KEYS))
    if unknown:
        raise PromptFileError(
            source, f"unknown front-matter key(s) {', '.join(unknown)}; expected {sorted(_KEYS)}."
        )
    title = _text(source, meta, "title")
    description = _text(source, meta, "description")
    arguments = _arguments(source, meta.get("arguments"))
    text = content[match.end() :].strip("\n")
    if not text.strip():
        raise PromptFileError(source, "the body after the front matter is empty.")
    for argument in arguments:
        if "{" + argument.name + "}" not in text:
            raise PromptFileError(
                source,
                f"argument {argument.name!r} is declared but "
                f"{{{argument.name}}} is not in the body.",
            )
    return PromptFile(
        name=name,
        title=title,
        description=description,
        arguments=arguments,
        text=text + "\n",
        source=source,
    )


def _text(source: Path, mapping: Mapping[str, Any], key: str, where: str = "") -> str:
    value = mapping.get(key)
    if value is None:
        raise PromptFileError(source, f"{where}{key} is missing.")
    if not isinstance(value, str) or not value.strip():
        raise PromptFileError(source, f"{where}{key} must be a non-empty string.")
    return value.strip()


def _arguments(source: Path, spec: object) -> tuple[PromptArgument, ...]:
    """The ``arguments`` list of the front matter: name, description, optional ``required``."""
    if spec is None:
        return ()
    if not isinstance(spec, list):
        raise PromptFileError(source, "arguments must be a list of {name, description, required}.")
    arguments: list[PromptArgument] = []
    for number, item in enumerate(spec, start=1):
        where = f"argument {number}: "
        if not isinstance(item, dict):
            raise PromptFileError(source, f"{where}must be a mapping with name and description.")
        unknown = sorted(map(str, set(item) - _ARGUMENT_KEYS))
        if unknown:
            raise PromptFileError(source, f"{where}unknown key(s) {', '.join(unknown)}.")
        name = _text(source, item, "name", where)
        if not NAME_PATTERN.fullmatch(name):
            raise PromptFileError(
                source, f"{where}name {name!r} must match {NAME_PATTERN.pattern}."
            )
        if any(argument.name == name for argument in arguments):
            raise PromptFileError(source, f"{where}name {name!r} is declared twice.")
        required = item.get("required", False)
        if not isinstance(required, bool):
            raise PromptFileError(source, f"{where}required must be true or false.")
        description = _text(source, item, "description", where)
        arguments.append(PromptArgument(name=name, description=description, required=required))
    return tuple(arguments)
