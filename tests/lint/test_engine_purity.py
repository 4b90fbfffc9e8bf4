"""The lint engine stays plain Python: no Django, Celery or Kafka client, in any module it loads."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "auditor" / "lint" / "engine"
MODULES = sorted(ENGINE.rglob("*.py"))
FORBIDDEN = ("django", "celery", "channels", "rest_framework", "confluent_kafka", "pyspark")
# Loaded at all, even through another package: the web stack and Spark. (The Kafka client
# comes along with auditor.probes, whose package imports its producer and consumer.)
FORBIDDEN_LOADED = ("django", "celery", "channels", "rest_framework", "pyspark")
# The plain-Python modules of the project the engine may use: the shared vocabulary and the
# one list of secret keys (the probes' config, read through auditor.lib.secrets).
ALLOWED_OUTSIDE = ("auditor.lint.engine", "auditor.vocabulary", "auditor.lib.secrets", "auditor.probes.config")


def _imported(module: Path) -> list[str]:
    tree = ast.parse(module.read_text(), filename=str(module))
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.append(node.module)
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{module.name}: relative import; the project imports absolutely")
    return imported


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(ENGINE)))
def test_it_imports_nothing_from_the_web_stack(module: Path) -> None:
    imported = _imported(module)
    offending = [name for name in imported if name.split(".")[0] in FORBIDDEN]
    assert not offending, f"{module.name} imports {offending}"
    outside = [
        name
        for name in imported
        if name.startswith("auditor") and not any(name == a or name.startswith(a + ".") for a in ALLOWED_OUTSIDE)
    ]
    assert not outside, f"{module.name} imports other auditor modules: {outside}"


def test_it_loads_no_web_stack_module_even_indirectly() -> None:
    """Every engine module imported in a fresh interpreter: nothing forbidden ends up loaded."""
    names = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in MODULES]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({FORBIDDEN_LOADED!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"the engine loads {done.stdout.strip()}"
