"""Handing a binding to spark-submit: secrets only in a 0600 file and the environment, errors scrubbed.

A stand-in for spark-submit (a small script) records what it was given, so these tests
need no JVM; the real spark-submit runs in test_run_cli.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
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
if mode == "spawn":  # like the JVM starting the Python driver, in its own process group
    import subprocess
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    record = {{"pids": [os.getpid(), driver.pid], "binding": binding}}
    open(os.environ["FAKE_RECORD"], "w").write(json.dumps(record))
    time.sleep(120)
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


LAUNCHER = """
import sys
from pathlib import Path
import django
django.setup()
from auditor.reconcile import job
job.spark_submit_path = lambda: Path(sys.argv[1])
job_input = job.JobInput(payload={{"name": "secretive"}}, output_jdbc_url="", secrets=["{secret}"])
job.run_spark_submit(job_input, "run-4", full=False)
"""


def process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_it_leaves_no_job_and_no_secret_behind_when_its_worker_is_stopped(
    fake_submit: Path, tmp_path: Path, monkeypatch
) -> None:
    record = tmp_path / "started.json"
    monkeypatch.setenv("FAKE_MODE", "spawn")
    monkeypatch.setenv("FAKE_RECORD", str(record))
    # the worker runs the launcher in a session of its own (stack/run.sh: setsid)
    worker = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER.format(secret=SECRET), str(fake_submit)], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while not record.exists() and time.monotonic() < deadline:
            assert worker.poll() is None, "the launcher ended before its job started"
            time.sleep(0.1)
        time.sleep(0.2)  # the record is written whole
        started = json.loads(record.read_text())
        assert all(process_alive(pid) for pid in started["pids"])
        assert Path(started["binding"]).exists()

        # stack/run.sh stop_one: TERM to the worker's process group, up to 10 s, then KILL
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()

        def left_behind() -> bool:
            return any(process_alive(pid) for pid in started["pids"]) or Path(started["binding"]).parent.exists()

        deadline = time.monotonic() + 15
        while left_behind() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in started["pids"] if process_alive(pid)] == []
        assert not Path(started["binding"]).parent.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        if record.exists():
            left = json.loads(record.read_text())
            for pid in left["pids"]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(Path(left["binding"]).parent, ignore_errors=True)


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
