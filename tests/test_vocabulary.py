"""spark_jobs/ carries its own copy of the vocabulary (spark-submit ships it without Django):
the one guard that it says what auditor/vocabulary.py says."""

from __future__ import annotations

from pathlib import Path

from auditor import vocabulary
from spark_jobs import binding, reconcile_findings, reconcile_transform


def test_the_spark_jobs_name_guarantees_and_finding_kinds_as_the_auditor_does() -> None:
    assert binding.GUARANTEES == vocabulary.GUARANTEES
    assert reconcile_transform.FINDING_KINDS == vocabulary.FINDING_KINDS


def test_every_cause_the_auditor_knows_is_one_the_spark_job_writes() -> None:
    source = Path(reconcile_findings.__file__).read_text()
    for causes in vocabulary.FINDING_CAUSES.values():
        for cause in causes:
            assert f'F.lit("{cause}")' in source, cause
