"""`audit demo setup|run|produce|consume`: the demo ticket pipeline.

``make run`` calls ``audit demo setup`` once, then keeps ``audit demo run``
running until SIGTERM. Defaults come from the environment:
KAFKA_BOOTSTRAP_SERVERS, SOURCE_DATABASE_URL, AUDITOR_DEMO_MODE,
AUDITOR_DEMO_FAULTS and AUDITOR_DEMO_RATE; options win over them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any, TextIO

import psycopg
from confluent_kafka import KafkaException

from auditor.demo.consumer import CRASH_EXIT_CODE, ConsumeResult
from auditor.demo.options import DeliveryMode, DemoOptionError, Faults, parse_faults
from auditor.demo.producer import TicketProducer
from auditor.demo.runner import ConsumerSpec, DemoService, DemoSettings, install_stop_handlers, setup_demo
from auditor.demo.store import ApplyOutcome
from auditor.lib.identifiers import IdentifierError, validate_table_name

HELP = "the demo ticket pipeline: setup, run (service), produce, consume"

# `make run`: a pipeline with real problems for the dashboard, mild enough to stay readable:
# one ticket in 100 never produced, a consumer crash (and restart) every 500 records.
DEFAULT_RUN_FAULTS = "drop-every=100,crash-after=500"
DEFAULT_MODE = DeliveryMode.AT_LEAST_ONCE
DEFAULT_RATE = 2.0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)")
    parser.add_argument("--source-url", help="source-of-truth PostgreSQL URL (default: $SOURCE_DATABASE_URL)")
    parser.add_argument("--table", default="tickets", help="tickets table, 'table' or 'schema.table' (tickets)")
    parser.add_argument("--processed-table", default="processed_keys", help="idempotency-key table (processed_keys)")
    parser.add_argument("--topic", default="tickets", help="ticket topic (tickets)")
    parser.add_argument("--output-topic", default="tickets.processed", help="transactional mode's output topic")
    parser.add_argument("--group", default="ticket-processor", help="consumer group id (ticket-processor)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _add_mode(parser: argparse.ArgumentParser) -> None:
    modes = ", ".join(mode.value for mode in DeliveryMode)
    parser.add_argument("--mode", help=f"{modes} (default: $AUDITOR_DEMO_MODE or {DEFAULT_MODE})")


def _add_faults(parser: argparse.ArgumentParser, faults_default: str) -> None:
    parser.add_argument(
        "--faults",
        help="comma-separated: crash-after=N, drop-every=N, fail-update-every=N, slow-ms=N, fire-and-forget, "
        "no-idempotence, abort-every=N (the producer runs a transaction per ticket and aborts every Nth one "
        "without producing it again: that ticket stays NEW), "
        f"or none (default: $AUDITOR_DEMO_FAULTS or {faults_default})",
    )


def _add_consumer_tuning(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", type=_positive_int, default=100, help="records per consume() call (100)")
    parser.add_argument("--commit-every", type=_positive_int, default=100, help="commit after N records (100)")
    parser.add_argument("--commit-interval", type=_non_negative_float, default=5.0, help="or after S seconds (5)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="demo_action", required=True, metavar="ACTION")

    setup = actions.add_parser("setup", help="create the tables and topics (idempotent)")
    _add_common(setup)
    setup.add_argument("--partitions", type=_positive_int, default=3, help="ticket topic partitions (3)")
    setup.add_argument("--replication-factor", type=_positive_int, help="default: min(3, brokers)")

    run = actions.add_parser("run", help="produce and consume continuously until SIGTERM")
    _add_common(run)
    _add_mode(run)
    _add_faults(run, DEFAULT_RUN_FAULTS)
    _add_consumer_tuning(run)
    run.add_argument(
        "--rate", type=_non_negative_float, help=f"tickets per second (default: $AUDITOR_DEMO_RATE or {DEFAULT_RATE})"
    )
    run.add_argument(
        "--restart-delay", type=_non_negative_float, default=5.0, help="seconds before a crashed consumer restarts (5)"
    )

    produce = actions.add_parser("produce", help="insert and produce N tickets, then exit")
    _add_common(produce)
    _add_faults(produce, "none")
    produce.add_argument("--count", type=_positive_int, required=True, help="tickets to create")

    consume = actions.add_parser("consume", help="process tickets until N records, idle, or a crash fault")
    _add_common(consume)
    _add_mode(consume)
    _add_faults(consume, "none")
    _add_consumer_tuning(consume)
    consume.add_argument("--max-records", type=_positive_int, help="stop after N records")
    consume.add_argument(
        "--idle-timeout", type=_non_negative_float, default=10.0, help="stop after S idle seconds; 0: never (10)"
    )


class _UsageError(Exception):
    pass


def _setting(option: Any, env_name: str, default: str | None = None) -> str:
    if option not in (None, ""):
        return str(option)
    value = os.environ.get(env_name) or default
    if not value:
        raise _UsageError(f"{env_name} is not set (or pass the matching option)")
    return value


def _settings(options: dict[str, Any]) -> DemoSettings:
    for name in ("table", "processed_table"):
        try:
            validate_table_name(options[name])
        except IdentifierError as exc:
            raise _UsageError(f"--{name.replace('_', '-')}: {exc}") from None
    return DemoSettings(
        kafka_config={"bootstrap.servers": _setting(options["bootstrap_servers"], "KAFKA_BOOTSTRAP_SERVERS")},
        source_url=_setting(options["source_url"], "SOURCE_DATABASE_URL"),
        table=options["table"],
        processed_table=options["processed_table"],
        topic=options["topic"],
        output_topic=options["output_topic"],
        group=options["group"],
    )


def _mode(options: dict[str, Any]) -> DeliveryMode:
    if options.get("mode"):
        return DeliveryMode.parse(options["mode"], "--mode")
    env = os.environ.get("AUDITOR_DEMO_MODE")
    return DeliveryMode.parse(env, "AUDITOR_DEMO_MODE") if env else DEFAULT_MODE


def _faults(options: dict[str, Any], default: str) -> Faults:
    if options.get("faults") is not None:
        return parse_faults(options["faults"], "--faults")
    env = os.environ.get("AUDITOR_DEMO_FAULTS")
    return parse_faults(env, "AUDITOR_DEMO_FAULTS") if env is not None else parse_faults(default)


def _rate(options: dict[str, Any]) -> float:
    if options.get("rate") is not None:
        return float(options["rate"])
    env = os.environ.get("AUDITOR_DEMO_RATE")
    if not env:
        return DEFAULT_RATE
    try:
        return _non_negative_float(env)
    except argparse.ArgumentTypeError as exc:
        raise _UsageError(f"AUDITOR_DEMO_RATE: {exc}") from None


def run(options: dict[str, Any], out: TextIO) -> int:
    action = options["demo_action"]
    try:
        settings = _settings(options)
        if action == "setup":
            return _setup(settings, options, out)
        if action == "produce":
            return _produce(settings, options, out)
        if action == "consume":
            return _consume(settings, options, out)
        return _run_service(settings, options, out)
    except (_UsageError, DemoOptionError) as exc:
        sys.stderr.write(f"audit demo {action}: {exc}\n")
        return 2
    except psycopg.OperationalError as exc:
        sys.stderr.write(f"audit demo {action}: cannot use the source database: {exc}\n")
        return 1
    except KafkaException as exc:
        sys.stderr.write(f"audit demo {action}: Kafka error: {exc}\n")
        return 1


def _setup(settings: DemoSettings, options: dict[str, Any], out: TextIO) -> int:
    result = setup_demo(settings, options["partitions"], options["replication_factor"])
    if options["json"]:
        out.write(json.dumps({"tables": result.tables, "topics_created": result.topics_created}) + "\n")
    else:
        out.write(f"tables ready: {', '.join(result.tables)}\n")
        out.write(f"topics created: {', '.join(result.topics_created) or 'none (all existed)'}\n")
    return 0


def _produce(settings: DemoSettings, options: dict[str, Any], out: TextIO) -> int:
    faults = _faults(options, "none")
    producer = TicketProducer(
        kafka_config=settings.kafka_config,
        store=settings.store(),
        topic=settings.topic,
        faults=faults,
        probe_topics=settings.probe_topics,
    )
    try:
        created = producer.create_tickets(options["count"])
        undelivered = producer.flush(30)
    finally:
        producer.close(30)
    stats = producer.stats
    summary = {
        "inserted": stats.inserted,
        "produced": stats.produced,
        "acked": stats.acked,
        "failed": stats.failed_ids,
        "undelivered": undelivered,
        "dropped": [item.ticket_id for item in created if not item.produced],
        "aborted": stats.aborted_ids,
        "first": created[0].ticket_id,
        "last": created[-1].ticket_id,
        "faults": str(faults),
    }
    if options["json"]:
        out.write(json.dumps(summary) + "\n")
    else:
        out.write(
            f"{summary['inserted']} tickets inserted ({summary['first']}..{summary['last']}), "
            f"{stats.produced} produced, {stats.acked} acked, {stats.failed} failed, "
            f"{stats.dropped} never produced, {len(stats.aborted_ids)} in aborted transactions (faults: {faults})\n"
        )
    return 1 if undelivered else 0


def _consume(settings: DemoSettings, options: dict[str, Any], out: TextIO) -> int:
    spec = ConsumerSpec(
        settings,
        mode=_mode(options),
        faults=_faults(options, "none"),
        batch_size=options["batch_size"],
        commit_every=options["commit_every"],
        commit_interval_s=options["commit_interval"],
    )
    stop = threading.Event()
    install_stop_handlers(stop)
    consumer = spec.build(crash_exits_process=True)  # the crash fault exits with CRASH_EXIT_CODE
    idle = options["idle_timeout"] or None
    result = consumer.run(max_records=options["max_records"], idle_timeout_s=idle, stop=stop)
    _report_consume(result, spec, options["json"], out)
    return CRASH_EXIT_CODE if result.crashed else 0


def _report_consume(result: ConsumeResult, spec: ConsumerSpec, as_json: bool, out: TextIO) -> None:
    summary: dict[str, Any] = {
        "session": result.session_id,
        "mode": str(spec.mode),
        "faults": str(spec.faults),
        "handled": len(result.handled),
        "applied": len(result.ticket_ids(ApplyOutcome.APPLIED)),
        "duplicates_skipped": result.ticket_ids(ApplyOutcome.DUPLICATE),
        "updates_lost": result.ticket_ids(ApplyOutcome.LOST),
        "unknown_tickets": result.ticket_ids(ApplyOutcome.UNKNOWN),
        "stop_reason": result.stop_reason,
    }
    if as_json:
        out.write(json.dumps(summary) + "\n")
        return
    out.write(
        f"consumer {result.session_id} ({spec.mode}, faults: {spec.faults}): {summary['handled']} records, "
        f"{summary['applied']} set DONE, {len(summary['duplicates_skipped'])} duplicates skipped, "
        f"{len(summary['updates_lost'])} updates lost; stopped: {result.stop_reason}\n"
    )


def _run_service(settings: DemoSettings, options: dict[str, Any], out: TextIO) -> int:
    spec = ConsumerSpec(
        settings,
        mode=_mode(options),
        faults=_faults(options, DEFAULT_RUN_FAULTS),
        batch_size=options["batch_size"],
        commit_every=options["commit_every"],
        commit_interval_s=options["commit_interval"],
    )
    service = DemoService(spec, rate=_rate(options), restart_delay_s=options["restart_delay"])
    setup_demo(settings)  # cheap and idempotent: `run` also works without a separate setup
    stop = threading.Event()
    install_stop_handlers(stop)
    out.write(f"demo pipeline running ({spec.mode}, faults: {spec.faults}); stop with SIGTERM\n")
    out.flush()
    service.run(stop)
    return 0
