"""The tests' own layout: helpers come from tests/support, fixtures from conftests and plugins."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
MODULES = sorted(TESTS.rglob("*.py"))


def _imports(module: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(module.read_text(), filename=str(module))):
        if isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(TESTS)))
def test_it_imports_nothing_from_a_conftest_or_a_test_module(module: Path) -> None:
    offending = [
        name
        for name in _imports(module)
        if name.startswith(".") or any(part == "conftest" or part.startswith("test_") for part in name.split("."))
    ]
    assert not offending, f"{module.relative_to(TESTS)} imports {offending}: move what it needs to tests/support/"


def test_it_registers_shared_fixtures_in_the_root_conftest_only() -> None:
    declaring = [p for p in TESTS.rglob("conftest.py") if "pytest_plugins" in p.read_text()]
    assert declaring == [TESTS / "conftest.py"]
