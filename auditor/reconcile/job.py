"""Run the Spark job (spark_jobs/reconcile.py) for one binding and return its result JSON.

Two ways, one result shape: through `spark-submit` (the default: the worker, beat and the
CLI; a real Spark cluster takes it over through SPARK_MASTER), or inside this process
(`audit reconcile --in-process`, tests with the suite's SparkSession).

Secrets. The binding is handed to the job with its ${ENV} references resolved, in a
file readable by the owner only (mode 0600, in a private temporary directory removed
afterwards, by job_guard.py when this process dies first); the JDBC URL the job writes
findings with is passed in the subprocess environment, not on its command line. Neither is
logged or stored: error text coming back from the job is scrubbed of every resolved secret
before it is kept.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from django.conf import settings
from django.db import connections

from auditor.lib.secrets import MASK, is_secret_key
from auditor.pipelines.ledgers import ledger_topics
from auditor.pipelines.models import Binding
from auditor.reconcile import conf
from spark_jobs.jars import local_jars, package_archive
from spark_jobs.kafka_security import explain
from spark_jobs.state_location import StateLocationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

JOB_SCRIPT = Path(settings.BASE_DIR) / "spark_jobs" / "reconcile.py"
JOB_GUARD = Path(__file__).with_name("job_guard.py")
JDBC_URL_ENV = "RECONCILE_OUTPUT_JDBC_URL"
STDERR_TAIL_CHARS = 3000
BAD_BINDING_EXIT = 2
COMMAND_NOT_FOUND_EXIT = 127


@dataclass
class JobInput:
    """What the job needs, secrets resolved; ``secrets`` lists them for scrubbing."""

    payload: dict[str, Any]
    output_jdbc_url: str
    secrets: list[str] = field(default_factory=list)

    def scrub(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            if secret:
                text = text.replace(secret, MASK)
        return text


def auditor_jdbc_url() -> str:
    """The auditor's own database (where the staging table lives) as a postgresql:// URL."""
    db = connections["default"].settings_dict
    user = quote(str(db.get("USER") or ""), safe="")
    password = quote(str(db.get("PASSWORD") or ""), safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgresql://{credentials}{host}:{port}/{db['NAME']}"


def job_input(binding: Binding) -> JobInput:
    """The binding as spark_jobs.binding.binding_from_dict reads it.

    Raises auditor.lib.secrets.MissingEnvError when a ${ENV} reference cannot be resolved.
    """
    client = binding.cluster.client_config()
    bootstrap = str(client.pop("bootstrap.servers"))
    source_url = binding.source.resolved_url()
    secrets = [str(v) for k, v in client.items() if is_secret_key(str(k))]
    for url in (source_url,):
        password = urlsplit(url).password
        if password:
            secrets.append(password)
    db_password = str(connections["default"].settings_dict.get("PASSWORD") or "")
    if db_password:
        secrets += [db_password, quote(db_password, safe="")]
    payload = {
        "name": binding.name,
        "topic": binding.topic,
        "bootstrap_servers": bootstrap,
        "kafka_config": {str(k): str(v) for k, v in client.items()},
        "source_url": source_url,
        "table": binding.table,
        "key_column": binding.key_column,
        "created_column": binding.created_column,
        "timestamp_zone": binding.timestamp_zone,
        "record_key": binding.record_key,
        "grace": binding.grace_seconds,
        "guarantee": binding.guarantee,
        "consumer_groups": list(binding.consumer_groups or []),
    }
    # The ledgers the stuck diagnosis reads for this binding, so both signals read the same.
    payload["producer_ledger_topic"], payload["consumer_ledger_topic"] = ledger_topics(binding)
    return JobInput(payload=payload, output_jdbc_url=auditor_jdbc_url(), secrets=secrets)


def failed(error: str, **extra: Any) -> dict[str, Any]:
    return {"status": "failed", "error": error, "counts": {}, "findings": [], **extra}


def prepared_state_location() -> str:
    """RECONCILE_STATE_DIR as the job takes it (a local folder is created; a URI's store
    creates folders as they are written). StateLocationError names a bad value."""
    location = conf.state_location()
    if location.local_path is not None:
        location.local_path.mkdir(parents=True, exist_ok=True)
    return location.uri


# --- spark-submit --------------------------------------------------------------------------


def spark_submit_path() -> Path:
    import pyspark  # deferred: only runs that start spark-submit need pyspark loaded

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


def submit_command(
    binding_file: Path, output_json: Path, job_run_id: str, full: bool, binding_name: str, state: str
) -> list[str]:
    """The spark-submit command line: paths and names only, never a secret.

    The jars and the job's package (zipped beside the binding file) travel with the job, so a
    cluster's executors need nothing installed but PySpark.
    """
    master = conf.spark_master()
    command = [
        str(spark_submit_path()),
        "--master",
        master,
        "--name",
        f"reconcile-{binding_name}",
        "--jars",
        ",".join(local_jars(conf.spark_jars_dir())),
        "--py-files",
        str(package_archive(binding_file.parent)),
        "--conf",
        "spark.ui.enabled=false",
    ]
    if conf.driver_memory():
        command += ["--driver-memory", conf.driver_memory()]
    command += [
        str(JOB_SCRIPT),
        "--binding-json",
        str(binding_file),
        "--state-dir",
        state,
        "--run-id",
        job_run_id,
        "--output-json",
        str(output_json),
        "--output-jdbc-url-env",
        JDBC_URL_ENV,
        "--findings-table",
        conf.STAGING_TABLE,
        # Findings travel through the staging table; the JSON keeps counts and metadata.
        "--max-findings",
        "0",
        "--master",
        master,
    ]
    if full:
        command.append("--full")
    return command


def submit_environment(job: JobInput) -> dict[str, str]:
    """The subprocess environment: this one, plus what spark-submit needs to find Python and Spark."""
    python = sys.executable
    env = dict(os.environ)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    # spark-submit's scripts run `python3` to find SPARK_HOME and the driver runs PYSPARK_PYTHON;
    # without the venv on PATH they exit 127 (command not found).
    env["PATH"] = str(Path(python).parent) + os.pathsep + env.get("PATH", "")
    env["PYSPARK_PYTHON"] = python
    env["PYSPARK_DRIVER_PYTHON"] = python
    env["SPARK_HOME"] = str(spark_submit_path().parent.parent)
    env["SPARK_MASTER"] = conf.spark_master()
    env["SPARK_JARS_DIR"] = str(conf.spark_jars_dir())
    env["PYTHONPATH"] = str(settings.BASE_DIR) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[JDBC_URL_ENV] = job.output_jdbc_url
    return env


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def guarded(command: list[str], temp_dir: Path) -> list[str]:
    """`command` under job_guard.py: spark-submit and its children (the JVM, the Python
    driver) are stopped, and `temp_dir` removed, when this process dies, however it dies."""
    return [sys.executable, "-I", str(JOB_GUARD), str(os.getpid()), str(temp_dir), *command]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the guard (its own process group), which first ends spark-submit's group."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_spark_submit(job: JobInput, job_run_id: str, full: bool, timeout: float | None = None) -> dict[str, Any]:
    """Run the job through spark-submit; its result JSON, or a failed result explaining why."""
    timeout = timeout or conf.run_timeout_seconds()
    try:
        state = prepared_state_location()
    except StateLocationError as exc:
        return failed(str(exc))
    with tempfile.TemporaryDirectory(prefix="reconcile-") as tmp:  # mode 0700
        folder = Path(tmp)
        binding_file = folder / "binding.json"
        _write_private(binding_file, json.dumps(job.payload))
        output = folder / "result.json"
        stdout_path, stderr_path = folder / "stdout.log", folder / "stderr.log"
        try:
            command = submit_command(binding_file, output, job_run_id, full, job.payload["name"], state)
        except (FileNotFoundError, ImportError) as exc:
            return failed(f"cannot start spark-submit: {exc}")
        log.info("reconcile %s: %s", job.payload["name"], " ".join(command))
        started = time.monotonic()
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            try:
                proc = subprocess.Popen(
                    guarded(command, folder),
                    cwd=settings.BASE_DIR,
                    env=submit_environment(job),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as exc:
                return failed(f"cannot start spark-submit: {exc}")
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _stop(proc)
                return failed(f"the job ran longer than {timeout:.0f}s and was stopped")
            except BaseException:
                _stop(proc)
                raise
        elapsed = time.monotonic() - started
        result: dict[str, Any] | None = None
        if output.exists():
            try:
                result = json.loads(output.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                result = failed(f"the job's result file is unreadable: {exc}")
        if result is None:
            tail = stderr_path.read_text(errors="replace")[-STDERR_TAIL_CHARS:].strip()
            hint = " (command not found: is PYSPARK_PYTHON/PATH right?)" if code == COMMAND_NOT_FOUND_EXIT else ""
            result = failed(f"spark-submit exited with status {code}{hint} after {elapsed:.0f}s: {tail}")
        elif code != 0 and result.get("status") == "ok":
            # The findings may be staged already; they are discarded with the run.
            result = failed(f"spark-submit exited with status {code} after reporting success")
        result["error"] = explain(job.scrub(result["error"])) if result.get("error") else result.get("error")
        result["exit_code"] = code
        return result


# --- in this process -------------------------------------------------------------------------


def run_in_process(job: JobInput, job_run_id: str, full: bool) -> dict[str, Any]:
    """The same job in this process's SparkSession (built, or the running one joined)."""
    from spark_jobs.common import build_spark_session  # deferred: only in-process runs load pyspark

    return run_in_session(
        lambda: build_spark_session(f"reconcile-{job.payload['name']}", master=conf.spark_master()),
        job,
        job_run_id,
        full,
    )


def run_in_session(
    session: Callable[[], SparkSession],
    job: JobInput,
    job_run_id: str,
    full: bool,
    cancelled: threading.Event | None = None,
) -> dict[str, Any]:
    """The job in the SparkSession `session()` gives (called once the binding and the state
    location are known good); its error text scrubbed of secrets. Once `cancelled` is set the
    run stops at its next phase and never commits."""
    # deferred: spark_jobs imports pyspark, which only in-process runs need
    from spark_jobs.binding import BindingError, binding_from_dict
    from spark_jobs.reconcile import run
    from spark_jobs.reconcile_plan import RunOptions

    try:
        binding = binding_from_dict(job.payload)
    except BindingError as exc:
        return failed(job.scrub(f"BindingError: {exc}"), exit_code=BAD_BINDING_EXIT)
    try:
        state = prepared_state_location()
    except StateLocationError as exc:
        return failed(str(exc))
    options = RunOptions(
        state_dir=state,
        full=full,
        run_id=job_run_id,
        max_findings=0,
        output_jdbc_url=job.output_jdbc_url,
        findings_table=conf.STAGING_TABLE,
        cancelled=cancelled,
    )
    result = run(session(), binding, options)
    if result.get("error"):
        result["error"] = explain(job.scrub(result["error"]))
    return result
