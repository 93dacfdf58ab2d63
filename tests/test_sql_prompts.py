"""The SQL toolset's Markdown prompts: the shipped eight, overrides, strict loading, render.

Real files only: the package's own ``ldims/sql/prompts`` and operator directories in
``tmp_path``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ldims.errors import InvalidInput
from ldims.sql.prompt_files import (
    NOT_GIVEN,
    PromptArgument,
    PromptFile,
    PromptFileError,
    load_prompts,
)

SEED_PROMPTS = {
    "db_description",
    "syntax_guide",
    "cluster_management",
    "data_migration",
    "performance_tuning",
    "troubleshooting",
    "installation",
    "dba_template",
}
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "ldims" / "sql" / "prompts"

GOOD = """---
title: Row counts
description: Count the rows of a table.
arguments:
  - name: table
    description: The table to count
    required: true
  - name: since
    description: Only rows newer than this
---
Count the rows of {table} since {since}.
"""


def write(directory: Path, name: str, content: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(content, encoding="utf-8")
    return path


def prompt(text: str, *arguments: PromptArgument) -> PromptFile:
    return PromptFile(
        name="demo",
        title="Demo",
        description="A demo prompt.",
        arguments=arguments,
        text=text,
        source=Path("demo.md"),
    )


# --- the shipped prompts -------------------------------------------------------------------


def test_the_seed_eight_ship_and_load() -> None:
    prompts = load_prompts()
    assert set(prompts) == SEED_PROMPTS
    assert {p.stem for p in SHIPPED_DIR.glob("*.md")} == SEED_PROMPTS
    for name, p in prompts.items():
        assert p.name == name
        assert p.title.strip() and p.description.strip() and p.text.strip()
        assert not p.text.startswith("---"), f"{name}: front matter left in the body"
        assert p.source.name == f"{name}.md" and p.source.is_file()
        lines = p.source.read_text(encoding="utf-8").count("\n")
        assert 40 <= lines <= 150, f"{name}.md has {lines} lines"


def test_shipped_prompts_state_the_server_rules() -> None:
    prompts = load_prompts()
    everything = "".join(p.text for p in prompts.values())
    for code in ("KWDB-4001", "KWDB-4002", "KWDB-4003", "KWDB-4004"):
        assert code in prompts["db_description"].text
        assert code in prompts["troubleshooting"].text
    for needle in ("kwdb://product_info", "kwdb://db_info/", "kwdb://table/", "LIMIT 20"):
        assert needle in prompts["db_description"].text
    for word in ("read-query", "write-query", "KaiwuDB", "PostgreSQL", "MySQL", "SQLite"):
        assert word in everything


def test_every_shipped_prompt_renders_with_its_required_arguments_only() -> None:
    for p in load_prompts().values():
        given = {a.name: f"<{a.name}>" for a in p.arguments if a.required}
        text = p.render(given)
        for argument in p.arguments:
            assert "{" + argument.name + "}" not in text
            expected = given.get(argument.name, NOT_GIVEN)
            assert expected in text


def test_dba_template_fills_its_placeholders() -> None:
    dba = load_prompts()["dba_template"]
    assert {a.name: a.required for a in dba.arguments} == {
        "task": True,
        "table": False,
        "environment": False,
    }
    text = dba.render({"task": "remove duplicate customers", "table": "public.customers"})
    assert "**Task:** remove duplicate customers" in text
    assert "**Main table:** public.customers" in text
    assert f"**Environment:** {NOT_GIVEN}" in text
    # The resource templates are not arguments and stay as they are.
    assert "kwdb://table/{table_name}" in text
    with pytest.raises(InvalidInput) as caught:
        dba.render({"table": "customers"})
    assert caught.value.details == {"field": "task"}


# --- operator overrides --------------------------------------------------------------------


def test_override_dir_replaces_one_and_adds_one(tmp_path: Path) -> None:
    replaced = write(
        tmp_path,
        "syntax_guide.md",
        "---\ntitle: House syntax\ndescription: Our own rules.\n---\nUse our views only.\n",
    )
    added = write(tmp_path, "row_counts.md", GOOD)
    write(tmp_path, "notes.txt", "not a prompt")  # only *.md files are prompts
    (tmp_path / "drafts.md").mkdir()  # nor are directories

    prompts = load_prompts(tmp_path)

    assert set(prompts) == SEED_PROMPTS | {"row_counts"}
    assert prompts["syntax_guide"].title == "House syntax"
    assert prompts["syntax_guide"].text == "Use our views only.\n"
    assert prompts["syntax_guide"].source == replaced
    assert prompts["row_counts"].source == added
    assert prompts["row_counts"].arguments == (
        PromptArgument(name="table", description="The table to count", required=True),
        PromptArgument(name="since", description="Only rows newer than this", required=False),
    )
    assert prompts["db_description"].source.parent == SHIPPED_DIR
    assert load_prompts()["syntax_guide"].title != "House syntax"  # nothing sticks


def test_missing_override_dir_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "promtps"
    with pytest.raises(PromptFileError, match="does not exist") as caught:
        load_prompts(missing)
    assert caught.value.source == missing
    assert str(missing) in str(caught.value)

    a_file = write(tmp_path, "file.md", GOOD)
    with pytest.raises(PromptFileError, match="is not a directory"):
        load_prompts(a_file)


@pytest.mark.parametrize("filename", ["Row_Counts.md", "row-counts.md", "1rows.md", "_x.md"])
def test_bad_file_names_are_refused_naming_the_file(tmp_path: Path, filename: str) -> None:
    path = write(tmp_path, filename, GOOD)
    with pytest.raises(PromptFileError, match="must match") as caught:
        load_prompts(tmp_path)
    assert caught.value.source == path
    assert str(path) in str(caught.value)


MALFORMED = {
    "no-front-matter": ("# Just a body\n", "no front matter"),
    "unclosed": ("---\ntitle: T\ndescription: D\nBody\n", "no front matter"),
    "bad-yaml": ("---\ntitle: [unclosed\ndescription: D\n---\nBody\n", "bad YAML"),
    "not-a-mapping": ("---\n- a\n- b\n---\nBody\n", "must be a mapping"),
    "empty": ("---\n---\nBody\n", "must be a mapping"),
    "no-title": ("---\ndescription: D\n---\nBody\n", "title is missing"),
    "no-description": ("---\ntitle: T\n---\nBody\n", "description is missing"),
    "blank-title": ("---\ntitle: '  '\ndescription: D\n---\nBody\n", "title must be"),
    "number-title": ("---\ntitle: 42\ndescription: D\n---\nBody\n", "title must be"),
    "typo-key": ("---\ntitle: T\ndescripton: D\n---\nBody\n", "unknown front-matter key"),
    "empty-body": ("---\ntitle: T\ndescription: D\n---\n\n  \n", "body"),
    "arguments-not-list": (
        "---\ntitle: T\ndescription: D\narguments: table\n---\n{table}\n",
        "arguments must be a list",
    ),
    "argument-not-mapping": (
        "---\ntitle: T\ndescription: D\narguments: [table]\n---\n{table}\n",
        "argument 1: must be a mapping",
    ),
    "argument-no-name": (
        "---\ntitle: T\ndescription: D\narguments:\n  - description: X\n---\nBody\n",
        "argument 1: name is missing",
    ),
    "argument-no-description": (
        "---\ntitle: T\ndescription: D\narguments:\n  - name: table\n---\n{table}\n",
        "argument 1: description is missing",
    ),
    "argument-bad-name": (
        "---\ntitle: T\ndescription: D\narguments:\n  - {name: Table, description: X}\n"
        "---\n{Table}\n",
        "argument 1: name 'Table' must match",
    ),
    "argument-required-not-bool": (
        "---\ntitle: T\ndescription: D\narguments:\n"
        "  - {name: table, description: X, required: maybe}\n---\n{table}\n",
        "required must be true or false",
    ),
    "argument-unknown-key": (
        "---\ntitle: T\ndescription: D\narguments:\n"
        "  - {name: table, description: X, default: t}\n---\n{table}\n",
        "argument 1: unknown key",
    ),
    "argument-twice": (
        "---\ntitle: T\ndescription: D\narguments:\n  - {name: table, description: X}\n"
        "  - {name: table, description: Y}\n---\n{table}\n",
        "argument 2: name 'table' is declared twice",
    ),
    "argument-unused": (
        "---\ntitle: T\ndescription: D\narguments:\n  - {name: table, description: X}\n"
        "---\nNo placeholder here.\n",
        r"\{table\} is not in the body",
    ),
}


@pytest.mark.parametrize(("content", "problem"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_files_name_the_file_and_the_problem(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = write(tmp_path, "broken.md", content)
    with pytest.raises(PromptFileError, match=problem) as caught:
        load_prompts(tmp_path)
    assert isinstance(caught.value, ValueError)
    assert caught.value.source == path
    assert str(caught.value).startswith(f"{path}: ")


def test_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin.md"
    path.write_bytes("---\ntitle: Café\ndescription: D\n---\nBody\n".encode("latin-1"))
    with pytest.raises(PromptFileError, match="not UTF-8") as caught:
        load_prompts(tmp_path)
    assert caught.value.source == path


def test_front_matter_accepts_crlf_and_a_byte_order_mark(tmp_path: Path) -> None:
    content = "\ufeff" + GOOD.replace("\n", "\r\n")
    (tmp_path / "windows.md").write_bytes(content.encode("utf-8"))
    p = load_prompts(tmp_path)["windows"]
    assert p.title == "Row counts"
    assert p.render({"table": "t", "since": "2024"}) == "Count the rows of t since 2024.\n"


# --- rendering -----------------------------------------------------------------------------


def test_render_fills_declared_arguments_and_leaves_other_braces() -> None:
    text = (
        "Table {table}; since {since}.\n"
        "SELECT '{\"a\": 1}'::jsonb ->> 'a' FROM {table};\n"
        "SELECT {x} FROM t WHERE tag = '{since_2024}' -- {Table} {{table}}\n"
    )
    p = prompt(
        text,
        PromptArgument("table", "The table", required=True),
        PromptArgument("since", "The start", required=False),
    )
    assert p.render({"table": "orders", "since": "2024-01-01"}) == (
        "Table orders; since 2024-01-01.\n"
        "SELECT '{\"a\": 1}'::jsonb ->> 'a' FROM orders;\n"
        "SELECT {x} FROM t WHERE tag = '{since_2024}' -- {Table} {orders}\n"
    )


def test_values_are_not_expanded_again() -> None:
    p = prompt(
        "{table} / {since}",
        PromptArgument("table", "The table", required=True),
        PromptArgument("since", "The start", required=False),
    )
    assert p.render({"table": "{since}", "since": "{table}"}) == "{since} / {table}"


def test_optional_arguments_missing_or_blank_read_not_given() -> None:
    p = prompt(
        "Table {table}, since {since}.",
        PromptArgument("table", "The table", required=True),
        PromptArgument("since", "The start", required=False),
    )
    assert p.render({"table": "t"}) == f"Table t, since {NOT_GIVEN}."
    assert p.render({"table": "t", "since": "  "}) == f"Table t, since {NOT_GIVEN}."
    assert NOT_GIVEN == "(not given)"


@pytest.mark.parametrize("given", [{}, {"table": ""}, {"table": " \n"}, {"since": "2024"}])
def test_missing_required_argument_is_invalid_input(given: dict[str, str]) -> None:
    p = prompt(
        "{table} {since}",
        PromptArgument("table", "The table to count", required=True),
        PromptArgument("since", "The start", required=False),
    )
    with pytest.raises(InvalidInput, match="'table'") as caught:
        p.render(given)
    assert caught.value.details == {"field": "table"}
    assert caught.value.code == "INVALID_INPUT"
    assert "The table to count" in caught.value.message


def test_unknown_argument_is_invalid_input() -> None:
    p = prompt("{table}", PromptArgument("table", "The table", required=False))
    with pytest.raises(InvalidInput, match="no argument 'tabel'") as caught:
        p.render({"tabel": "orders"})
    assert caught.value.details == {"field": "tabel"}
    assert "table" in caught.value.message  # the arguments it does take

    bare = prompt("Hello {table}.")
    with pytest.raises(InvalidInput, match="takes: none"):
        bare.render({"table": "orders"})
    assert bare.render({}) == "Hello {table}."


def test_non_string_values_are_invalid_input() -> None:
    p = prompt("{table}", PromptArgument("table", "The table", required=False))
    with pytest.raises(InvalidInput) as caught:
        p.render({"table": 42})  # type: ignore[dict-item]
    assert caught.value.details == {"field": "table"}


def test_shipped_json_and_resource_braces_survive_render() -> None:
    guide = load_prompts()["syntax_guide"].render({"dialect": "postgres"})
    assert "Dialect asked about: **postgres**" in guide
    assert """SELECT '{"a": 1}'::jsonb ->> 'a'""" in guide
    description = load_prompts()["db_description"].render({})
    assert "kwdb://db_info/{database_name}" in description
    assert re.search(r"\{\w+\}", description) is not None
