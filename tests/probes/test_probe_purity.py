"""The probe library stays embeddable: none of its modules imports Django, Celery or the Spark jobs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PROBES = Path(__file__).resolve().parents[2] / "auditor" / "probes"
FORBIDDEN = ("django", "celery", "channels", "rest_framework")


@pytest.mark.parametrize("module", sorted(PROBES.glob("*.py")), ids=lambda p: p.name)
def test_it_imports_nothing_from_the_web_stack(module: Path) -> None:
    tree = ast.parse(module.read_text(), filename=str(module))
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.append(node.module)
    offending = [name for name in imported if name.split(".")[0] in FORBIDDEN]
    assert not offending, f"{module.name} imports {offending}"
    outside = [name for name in imported if name.startswith("auditor") and not name.startswith("auditor.probes")]
    assert not outside, f"{module.name} imports other auditor apps: {outside}"
    jobs = [name for name in imported if name.split(".")[0] == "spark_jobs"]
    assert not jobs, f"{module.name} imports the Spark jobs' package: {jobs}"


def test_the_commit_metadata_the_probes_write_is_what_the_readers_look_for() -> None:
    from auditor.probes.wrapping import COMMIT_METADATA_PREFIX, commit_metadata
    from spark_jobs import commit_history

    assert COMMIT_METADATA_PREFIX == commit_history.COMMIT_METADATA_PREFIX
    assert commit_history.metadata_session(commit_metadata("s1", "the application's own")) == "s1"
