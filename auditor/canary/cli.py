"""`audit canary`: run the canary until SIGTERM/SIGINT (or for --duration), then print totals."""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO

from django.conf import settings

from auditor.canary.runner import DEFAULT_TOPIC, CanaryOptions, CanaryResult, CanaryService
from auditor.canary.topic import CanaryError
from auditor.lib.secrets import MissingEnvError
from auditor.pipelines.connectivity import ConnectivityError, check_cluster
from auditor.pipelines.models import Cluster

HELP = "produce to and consume from every partition of a canary topic; measure loss, duplicates and latency"

log = logging.getLogger(__name__)


_SECONDS = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_seconds(value: str, allow_zero: bool = False) -> float:
    """Plain seconds (2, 0.5) or with a unit (500ms, 20s, 5m, 1h)."""
    match = _SECONDS.fullmatch(value.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration (expected e.g. 2, 0.5, 500ms, 20s, 5m)")
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise argparse.ArgumentTypeError(f"{value!r} must be more than zero")
    return seconds


def _non_negative_seconds(value: str) -> float:
    return parse_seconds(value, allow_zero=True)


def _rate(value: str) -> float:
    try:
        rate = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of records per second") from None
    if not 0 < rate <= 10_000:
        raise argparse.ArgumentTypeError(f"{value!r} must be more than 0 and at most 10000 records/s")
    return rate


_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topic(value: str) -> str:
    if not _TOPIC.fullmatch(value) or value in {".", ".."}:
        raise argparse.ArgumentTypeError(f"{value!r} is not a Kafka topic name (letters, digits, '.', '_', '-')")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topic", type=_topic, default=DEFAULT_TOPIC, help=f"the canary topic (default {DEFAULT_TOPIC})"
    )
    parser.add_argument(
        "--bootstrap-servers", default=None, help="Kafka bootstrap servers (default: KAFKA_BOOTSTRAP_SERVERS)"
    )
    parser.add_argument(
        "--cluster",
        default=None,
        help="a configured cluster (audit apply): its bootstrap servers and security settings, ${ENV} resolved",
    )
    parser.add_argument("--rate", type=_rate, default=10.0, help="records per second per partition (default 10)")
    parser.add_argument(
        "--sla",
        type=parse_seconds,
        default=20.0,
        help="a record the broker acknowledged and that is not received within this is lost (default 20s)",
    )
    parser.add_argument(
        "--duration", type=parse_seconds, default=None, help="stop after this long (default: run until stopped)"
    )
    parser.add_argument(
        "--consumer-delay",
        type=_non_negative_seconds,
        default=0.0,
        help="start consuming this long after producing (fault tests: records can disappear meanwhile)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=parse_seconds,
        default=10.0,
        help="how long to wait for the cluster at start (default 10s)",
    )
    parser.add_argument("--json", action="store_true", help="print the totals as JSON at the end")


@contextmanager
def _stopped_by_signals(service: CanaryService) -> Iterator[None]:
    """SIGTERM and SIGINT end the run cleanly (totals printed, last minute stored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: stopping the canary", signal.Signals(signum).name)
        service.stop()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _fmt_ms(value: object) -> str:
    return "-" if value is None else f"{value:.1f}"


def _write_table(result: dict[str, Any], out: TextIO) -> None:
    columns = (
        "sent",
        "received",
        "lost",
        "truncated",
        "duplicated",
        "out_of_order",
        "late",
        "produce_errors",
        "unacked",
        "pending",
    )
    out.write(f"canary session {result['session']} on {result['topic']} ({result['elapsed_s']:.1f}s)\n")
    widths = {c: max(12, len(c)) for c in columns}
    header = f"{'partition':>9} {'leader':>6} " + " ".join(f"{c:>{widths[c]}}" for c in columns)
    out.write(header + f" {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}\n")
    rows = [(key, value) for key, value in result["partitions"].items()] + [("total", result["totals"])]
    for key, value in rows:
        leader = value.get("leader")
        line = f"{key:>9} {'' if leader is None else leader:>6} " + " ".join(
            f"{value[c]:>{widths[c]}}" for c in columns
        )
        out.write(line + " " + " ".join(f"{_fmt_ms(value[k]):>8}" for k in ("p50_ms", "p99_ms", "max_ms")) + "\n")
    if result["brokers_leading_nothing"]:
        out.write(f"brokers leading no canary partition: {result['brokers_leading_nothing']}\n")


def _cluster_connection(name: str, timeout_s: float) -> tuple[str, dict[str, Any]]:
    """A configured cluster's bootstrap servers and client settings, checked to accept us."""
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        known = ", ".join(Cluster.objects.values_list("name", flat=True)) or "none configured"
        raise CanaryError(f"unknown cluster {name!r} (known: {known})")
    try:
        check_cluster(cluster, timeout_s=timeout_s)
        config = cluster.client_config()
    except (ConnectivityError, MissingEnvError) as exc:
        raise CanaryError(str(exc)) from None
    return str(config.pop("bootstrap.servers")), config


def run(options: dict[str, Any], out: TextIO) -> int:
    bootstrap = options.get("bootstrap_servers") or settings.KAFKA_BOOTSTRAP_SERVERS
    client_config: dict[str, Any] = {}
    if options.get("cluster"):
        try:
            bootstrap, client_config = _cluster_connection(options["cluster"], options["connect_timeout"])
        except CanaryError as exc:
            sys.stderr.write(f"error: {exc}\n")
            sys.stderr.write("the canary did not start; nothing was stored\n")
            return 2
    canary_options = CanaryOptions(
        client_config=client_config,
        bootstrap_servers=bootstrap,
        cluster=options.get("cluster") or "",
        topic=options["topic"],
        rate=options["rate"],
        sla_s=options["sla"],
        duration_s=options["duration"],
        consumer_delay_s=options["consumer_delay"],
        connect_timeout_s=options["connect_timeout"],
    )
    try:
        service = CanaryService(canary_options)
        with _stopped_by_signals(service):
            result: CanaryResult = service.run()
    except CanaryError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.stderr.write("the canary did not start; nothing was stored\n")
        return 2
    summary = result.as_dict()
    if options["json"]:
        out.write(json.dumps(summary) + "\n")
    else:
        _write_table(summary, out)
    return 0
