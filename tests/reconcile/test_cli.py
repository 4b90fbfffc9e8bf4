"""The job's command line: binding JSON in, run result out (JSON file and PostgreSQL)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession

from spark_jobs.reconcile import main


def test_it_fails_with_exit_code_2_on_a_bad_binding_without_starting_spark(tmp_path: Path, capsys):
    out = tmp_path / "run.json"
    code = main(["--binding-json", json.dumps({"name": "tickets", "topic": "t"}), "--output-json", str(out)])
    assert code == 2
    result = json.loads(out.read_text())
    assert result["status"] == "failed"
    assert "binding 'tickets': missing required field(s)" in result["error"]
    assert result["findings"] == []
    assert json.loads(capsys.readouterr().out) == result


@pytest.mark.integration
def test_it_runs_from_the_command_line_and_loads_findings(
    spark: SparkSession, kafka_bootstrap: str, source_database_url: str, make_topic, tmp_path: Path, capsys
):
    from confluent_kafka import Producer

    topic = make_topic("cli")
    table = f"cli_{uuid.uuid4().hex[:8]}"
    findings_table = f"findings_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, created_at timestamptz)")
        conn.execute(f"INSERT INTO {table} VALUES (1, now() - interval '1 hour'), (2, now() - interval '1 hour')")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, key=b"1", value=b"{}")
    producer.produce(topic, key=b"1", value=b"{}")
    assert producer.flush(30) == 0
    binding = {
        "name": "cli",
        "topic": topic,
        "bootstrap_servers": kafka_bootstrap,
        "source_url": source_database_url,
        "table": table,
        "key_column": "id",
        "created_column": "created_at",
        "record_key": "key",
        "producer_ledger_topic": f"_audit.none-{uuid.uuid4().hex[:6]}",
    }
    (tmp_path / "binding.json").write_text(json.dumps(binding))
    out = tmp_path / "out" / "run.json"
    try:
        code = main(
            [
                "--binding-json",
                str(tmp_path / "binding.json"),
                "--state-dir",
                str(tmp_path / "state"),
                "--output-json",
                str(out),
                "--output-jdbc-url",
                source_database_url,
                "--findings-table",
                findings_table,
                "--run-id",
                "run-1",
            ]
        )
        assert code == 0
        result = json.loads(out.read_text())
        assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
        assert result["status"] == "ok"
        assert result["counts"] == {
            "missing": 1,
            "duplicate": 1,
            "orphan": 0,
            "gap": 0,
            "aborted": 0,
            "unprocessed": 0,
            "reprocessed": 0,
            "unverifiable": 0,
            "late": 0,
            "records_without_headers": 2,
            "records_malformed_headers": 0,
        }
        assert sorted((f["kind"], f["key"], f["cause"]) for f in result["findings"]) == [
            ("duplicate", "1", "unknown"),
            ("missing", "2", None),
        ]
        assert result["offset_ranges"]["topic"] == {"0": [0, 2]}
        with psycopg.connect(source_database_url) as conn:
            rows = conn.execute(f'SELECT run_id, kind, key, cause, "offset", is_new FROM {findings_table}').fetchall()
        assert sorted(rows, key=str) == sorted(
            [("run-1", "duplicate", "1", "unknown", 0, True), ("run-1", "missing", "2", None, None, True)], key=str
        )
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"DROP TABLE IF EXISTS {findings_table}")


@pytest.mark.integration
def test_it_loads_the_finding_of_a_record_key_holding_a_nul_readably_escaped(
    spark: SparkSession, kafka_bootstrap: str, source_database_url: str, make_topic, tmp_path: Path, capsys
):
    """PostgreSQL text cannot hold U+0000: a record key with one is written escaped, and the
    run completes (it failed at the load, and so did every later run)."""
    from confluent_kafka import Producer

    topic = make_topic("cli")
    table = f"cli_{uuid.uuid4().hex[:8]}"
    findings_table = f"findings_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, created_at timestamptz)")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    written_ms = int(time.time() * 1000) - 10 * 60 * 1000  # well past the grace period
    producer.produce(topic, key=b"\x00\x01", value=b"{}", timestamp=written_ms)
    assert producer.flush(30) == 0
    binding = {
        "name": "cli-nul",
        "topic": topic,
        "bootstrap_servers": kafka_bootstrap,
        "source_url": source_database_url,
        "table": table,
        "key_column": "id",
        "created_column": "created_at",
        "record_key": "key",
        "grace": "5s",
        "producer_ledger_topic": f"_audit.none-{uuid.uuid4().hex[:6]}",
    }
    (tmp_path / "binding.json").write_text(json.dumps(binding))
    out = tmp_path / "out" / "run.json"
    args = ["--binding-json", str(tmp_path / "binding.json"), "--state-dir", str(tmp_path / "state")]
    args += ["--output-json", str(out), "--output-jdbc-url", source_database_url, "--findings-table", findings_table]
    try:
        for run_id in ("run-1", "run-2"):  # the next run loads it the same way
            assert main([*args, "--run-id", run_id]) == 0
            result = json.loads(out.read_text())
            assert result["status"] == "ok", result["error"]
            assert [(f["kind"], f["key"]) for f in result["findings"]] == [("orphan", "\x00\x01")]
        with psycopg.connect(source_database_url) as conn:
            rows = conn.execute(f"SELECT run_id, kind, key FROM {findings_table}").fetchall()
        assert sorted(rows) == [("run-1", "orphan", "\\u0000\x01"), ("run-2", "orphan", "\\u0000\x01")]
    finally:
        with psycopg.connect(source_database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"DROP TABLE IF EXISTS {findings_table}")
