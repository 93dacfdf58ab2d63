"""Every package of ours is in an import contract (issue 36): a module added outside the
layers would be checked by nothing, so a new one fails here until it is placed.

``lint-imports`` itself (``make test``, ``make test-fast``) checks the contracts hold."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def contracts() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter", encoding="utf-8")
    return parser


def listed(section: str, key: str) -> list[str]:
    lines = contracts()[section][key].split("\n")
    return [name.strip() for line in lines for name in line.split("|") if name.strip()]


def children(package: str) -> set[str]:
    """The modules and packages directly in ``package`` (dotted), ``__init__`` aside."""
    folder = ROOT / package.replace(".", "/")
    modules = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
    packages = {path.parent.name for path in folder.glob("*/__init__.py")}
    return {f"{package}.{name}" for name in modules | packages}


def covered(module: str, names: list[str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def test_every_top_level_package_is_a_root_of_the_contracts() -> None:
    ours = {
        path.parent.name
        for path in ROOT.glob("*/__init__.py")
        if path.parent.name not in {"tests", "bench"}
    }
    assert set(listed("importlinter", "root_packages")) == ours


def test_every_module_of_ldims_is_in_a_layer() -> None:
    layers = listed("importlinter:contract:layers", "layers")
    missing = sorted(m for m in children("ldims") if not covered(m, layers))
    assert not missing, f"place these in .importlinter's layers: {missing}"
    for root in ("runtime", "api", "workers", "indexer"):
        assert root in layers


def test_every_mcp_toolset_is_an_independent_adapter() -> None:
    apart = listed("importlinter:contract:adapters-apart", "modules")
    missing = sorted(m for m in children("api.mcp.toolsets") if m not in apart)
    assert not missing, f"add these to .importlinter's adapters-apart: {missing}"
    assert "api.routes" in apart


def test_the_check_sees_a_new_module() -> None:
    # What the rule does with a module no layer names: it is reported.
    layers = listed("importlinter:contract:layers", "layers")
    assert not covered("ldims.something_new", layers)
    assert covered("ldims.proxy.masking", layers)
