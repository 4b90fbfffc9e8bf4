"""Handing a binding to spark-submit: secrets only in a 0600 file and the environment, errors scrubbed.

A stand-in for spark-submit (a small script) records what it was given, so these tests
need no JVM; the real spark-submit runs in test_run_cli.py.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from auditor.reconcile import job

pytestmark = pytest.mark.django_db

SECRET = "s3cr3t-Pa55"

FAKE_SUBMIT = """#!{python}
import json, os, stat, sys, time
args = sys.argv[1:]
binding = args[args.index("--binding-json") + 1]
output = args[args.index("--output-json") + 1]
mode = os.environ.get("FAKE_MODE", "ok")
if mode == "crash":
    sys.stderr.write("Exception in thread main: cannot connect with password {secret}\\n")
    sys.exit(127)
if mode == "hang":
    time.sleep(60)
seen = {{
    "status": "ok", "error": None, "counts": {{}}, "mode": "full",
    "binding_mode": oct(stat.S_IMODE(os.stat(binding).st_mode)),
    "binding": json.load(open(binding)),
    "argv": args,
    "pyspark_python": os.environ.get("PYSPARK_PYTHON"),
    "path_head": os.environ["PATH"].split(os.pathsep)[0],
    "jdbc_url": os.environ.get(args[args.index("--output-jdbc-url-env") + 1]),
}}
open(output, "w").write(json.dumps(seen))
"""


@pytest.fixture
def fake_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "bin" / "spark-submit"
    script.parent.mkdir()
    script.write_text(FAKE_SUBMIT.format(python=sys.executable, secret=SECRET))
    script.chmod(0o755)
    monkeypatch.setattr(job, "spark_submit_path", lambda: script)
    return script


@pytest.fixture
def secret_binding(make_binding, state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RECONCILE_TEST_PASSWORD", SECRET)
    binding = make_binding(
        "secretive", "tickets", "public.tickets", source_url="postgresql://app:${RECONCILE_TEST_PASSWORD}@db:5432/app"
    )
    binding.cluster.config = {"sasl.username": "u", "sasl.password": "${RECONCILE_TEST_PASSWORD}"}
    binding.cluster.save()
    return binding


def test_it_hands_secrets_over_only_in_a_private_file_and_the_environment(fake_submit: Path, secret_binding) -> None:
    job_input = job.job_input(secret_binding)
    result = job.run_spark_submit(job_input, "run-1", full=True)

    assert result["status"] == "ok", result
    assert result["binding_mode"] == "0o600"
    assert result["binding"]["source_url"] == f"postgresql://app:{SECRET}@db:5432/app"
    assert result["binding"]["kafka_config"] == {"sasl.username": "u", "sasl.password": SECRET}
    assert result["binding"]["record_key"] == "key" and result["binding"]["grace"] == 30
    assert not any(SECRET in arg for arg in result["argv"])
    assert "--full" in result["argv"] and result["argv"][result["argv"].index("--run-id") + 1] == "run-1"
    assert result["argv"][result["argv"].index("--findings-table") + 1] == "reconcile_finding_staging"
    assert result["pyspark_python"] == sys.executable
    assert result["path_head"] == str(Path(sys.executable).parent)
    assert result["jdbc_url"] == job.auditor_jdbc_url()
    binding_file = Path(result["argv"][result["argv"].index("--binding-json") + 1])
    assert not binding_file.exists()  # the temporary folder is gone


def test_it_reports_a_crash_with_the_tail_of_stderr_and_no_secret(
    fake_submit: Path, secret_binding, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "crash")
    result = job.run_spark_submit(job.job_input(secret_binding), "run-2", full=False)
    assert result["status"] == "failed" and result["exit_code"] == 127
    assert "exited with status 127 (command not found" in result["error"]
    assert "cannot connect with password ****" in result["error"]
    assert SECRET not in result["error"]


def test_it_stops_a_job_that_runs_too_long(fake_submit: Path, secret_binding, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "hang")
    result = job.run_spark_submit(job.job_input(secret_binding), "run-3", full=False, timeout=1)
    assert result["status"] == "failed"
    assert result["error"] == "the job ran longer than 1s and was stopped"


def test_it_scrubs_every_resolved_secret(secret_binding) -> None:
    job_input = job.job_input(secret_binding)
    assert SECRET in job_input.secrets
    text = f"java.sql.SQLException: password {SECRET} rejected for {job_input.output_jdbc_url}"
    scrubbed = job_input.scrub(text)
    assert SECRET not in scrubbed
    db_password = job.connections["default"].settings_dict["PASSWORD"]
    assert not db_password or db_password not in scrubbed


def test_it_writes_private_files_readable_by_the_owner_only(tmp_path: Path) -> None:
    target = tmp_path / "binding.json"
    job._write_private(target, json.dumps({"a": 1}))
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600


@pytest.mark.parametrize("in_process", [False, True])
def test_a_state_location_it_cannot_use_fails_the_run_naming_the_setting(
    fake_submit: Path, secret_binding, settings, in_process: bool
) -> None:
    settings.RECONCILE_STATE_DIR = "ftp://files.example/state"
    job_input = job.job_input(secret_binding)
    result = (job.run_in_process if in_process else job.run_spark_submit)(job_input, "run-1", full=True)
    assert result["status"] == "failed"
    assert result["error"].startswith("RECONCILE_STATE_DIR: state location 'ftp://files.example/state'")
    assert "unsupported scheme 'ftp'" in result["error"]
