"""Every rule, failing and passing, for each client whose defaults change the outcome.

Each case lists the exact rule ids that fire for its config, so a rule that starts firing
where it should not is caught as surely as one that stops firing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from auditor.lint.engine.catalog import RULES
from auditor.lint.engine.defaults import SPRING_ACK_MODE, SPRING_KAFKA
from auditor.lint.engine.linter import lint, lint_text
from auditor.lint.engine.parsers import ParsedConfig
from auditor.lint.engine.terms import LintContext
from auditor.lint.engine.transactional_ids import unstable_part

ALO, AMO, EOS = "at-least-once", "at-most-once", "exactly-once"
RK, JAVA = "librdkafka", "java"
UUID_ID = "orders-tx-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"

# Configs that fire nothing, to change one thing at a time.
RK_PRODUCER_OK = {"enable.idempotence": True}
RK_TX_OK = {"transactional.id": "orders-tx-0"}
JAVA_TX_OK = {"transactional.id": "orders-tx-0"}
RK_CONSUMER_OK = {"enable.auto.offset.store": False, "auto.offset.reset": "earliest"}
JAVA_CONSUMER_OK = {"enable.auto.commit": False, "auto.offset.reset": "earliest"}
RK_EOS_CONSUMER_OK = {"enable.auto.commit": False, "auto.offset.reset": "earliest"}
JAVA_EOS_CONSUMER_OK = {**JAVA_CONSUMER_OK, "isolation.level": "read_committed"}
TOPIC_OK = {"replication.factor": 3, "min.insync.replicas": 2}
BROKER_OK = {"default.replication.factor": 3, "min.insync.replicas": 2}
STREAMS_OK = {"processing.guarantee": "exactly_once_v2", "replication.factor": 3}


def spring(values: dict[str, Any]) -> ParsedConfig:
    """A consumer config as Spring Boot's YAML gives it: the consumer of a listener container."""
    return ParsedConfig(values, source="application.yml", framework=SPRING_KAFKA)


@dataclass(frozen=True)
class Case:
    rule: str
    outcome: str  # "fails": the rule fires; "passes": it does not
    client: str
    kind: str
    guarantee: str
    config: dict[str, Any]
    expected: list[str]
    context: LintContext = field(default_factory=LintContext)
    severity: str | None = None  # the rule's result severity, when it fires

    @property
    def id(self) -> str:
        return f"{self.rule}-{self.outcome}-{self.client}-{self.guarantee}-{sorted(self.config)}"


CASES: list[Case] = [
    # P001 acks
    Case("P001", "fails", JAVA, "producer", ALO, {"acks": "1"}, ["P001", "P006", "P007"], severity="error"),
    Case("P001", "fails", RK, "producer", ALO, {"request.required.acks": 0}, ["P001"]),
    Case("P001", "passes", RK, "producer", ALO, {**RK_PRODUCER_OK, "acks": "all"}, []),
    Case("P001", "passes", JAVA, "producer", ALO, {"acks": "-1"}, []),
    Case("P001", "passes", RK, "producer", AMO, {"acks": 0, "retries": 0}, []),
    # P002 retries
    # nothing is retried, so idempotence (P006) and ordering (P007) no longer matter
    Case("P002", "fails", JAVA, "producer", ALO, {"retries": 0}, ["P002"]),
    Case("P002", "fails", RK, "producer", ALO, {"retries": 0}, ["P002"]),
    Case("P002", "fails", RK, "producer", EOS, {"retries": 0}, ["P002", "P006", "P008"]),
    Case("P002", "passes", RK, "producer", ALO, {**RK_PRODUCER_OK, "retries": 3}, []),
    Case("P002", "passes", RK, "producer", AMO, {"message.send.max.retries": 0}, []),
    # Java before 2.1 (KIP-91) does not retry unless told to: unset is retries=0
    Case("P002", "fails", JAVA, "producer", ALO, {}, ["P001", "P002"], LintContext(client_version="2.0.1")),
    Case(
        "P002",
        "passes",
        JAVA,
        "producer",
        ALO,
        {"acks": "all", "retries": 5},
        ["P006", "P007"],
        LintContext(client_version="2.0.1"),
    ),
    Case("P002", "passes", JAVA, "producer", ALO, {}, ["P001", "P006", "P007"], LintContext(client_version="2.1.0")),
    # ... and turns retries up to 2147483647 when idempotent, as it does acks
    Case("P002", "passes", JAVA, "producer", EOS, JAVA_TX_OK, [], LintContext(client_version="2.0.1")),
    # P003 delivery timeout
    Case("P003", "fails", RK, "producer", ALO, {**RK_PRODUCER_OK, "message.timeout.ms": 10_000}, ["P003"]),
    Case(
        "P003",
        "fails",
        JAVA,
        "producer",
        ALO,
        {"delivery.timeout.ms": 20_000, "request.timeout.ms": 10_000, "linger.ms": 0},
        ["P003"],
    ),
    Case("P003", "passes", RK, "producer", ALO, {**RK_PRODUCER_OK, "delivery.timeout.ms": 30_000}, []),
    Case("P003", "passes", RK, "producer", ALO, {**RK_PRODUCER_OK, "message.timeout.ms": 0}, []),
    # P004 linger vs delivery timeout
    Case("P004", "fails", RK, "producer", ALO, {**RK_PRODUCER_OK, "linger.ms": 200_000}, ["P004"]),
    Case("P004", "fails", JAVA, "producer", ALO, {"linger.ms": 100_000}, ["P004"]),
    Case("P004", "passes", RK, "producer", ALO, {**RK_PRODUCER_OK, "queue.buffering.max.ms": 100}, []),
    Case("P004", "passes", JAVA, "producer", ALO, {"linger.ms": 20}, []),
    # P005 transaction timeout vs delivery timeout (Java; librdkafka lowers its own)
    Case("P005", "fails", JAVA, "producer", EOS, {**JAVA_TX_OK, "transaction.timeout.ms": 30_000}, ["P005"]),
    Case("P005", "passes", JAVA, "producer", EOS, {**JAVA_TX_OK, "transaction.timeout.ms": 120_000}, []),
    Case("P005", "passes", JAVA, "producer", EOS, JAVA_TX_OK, []),
    Case("P005", "passes", RK, "producer", EOS, {**RK_TX_OK, "transaction.timeout.ms": 30_000}, []),
    # Java before 2.1 has no delivery.timeout.ms: the one set here is ignored by the client
    Case(
        "P005",
        "passes",
        JAVA,
        "producer",
        EOS,
        {**JAVA_TX_OK, "delivery.timeout.ms": 300_000},
        [],
        LintContext(client_version="2.0.1"),
    ),
    # P006 idempotence: librdkafka's default is off, Java's on
    Case("P006", "fails", RK, "producer", ALO, {}, ["P006", "P007"], severity="warning"),
    Case(
        "P006",
        "fails",
        RK,
        "producer",
        EOS,
        {"transactional.id": "t-0", "enable.idempotence": False},
        ["P006", "P007", "P104"],
        severity="error",
    ),
    Case("P006", "fails", RK, "producer", AMO, {}, ["P006"], severity="error"),
    Case("P006", "fails", JAVA, "producer", ALO, {"enable.idempotence": False}, ["P006", "P007"]),
    Case("P006", "passes", JAVA, "producer", ALO, {}, []),
    Case("P006", "passes", JAVA, "producer", AMO, {}, []),
    Case("P006", "passes", RK, "producer", ALO, RK_PRODUCER_OK, []),
    # P007 reordering
    Case("P007", "fails", RK, "producer", ALO, {"max.in.flight.requests.per.connection": 5}, ["P006", "P007"]),
    Case("P007", "passes", RK, "producer", ALO, {"max.in.flight": 1}, ["P006"]),
    Case("P007", "passes", JAVA, "producer", ALO, {}, []),
    # P008 transactional.id missing
    Case("P008", "fails", RK, "producer", EOS, RK_PRODUCER_OK, ["P008"], severity="warning"),
    Case("P008", "fails", JAVA, "producer", EOS, {}, ["P008"], LintContext(consume_transform_produce=True), "error"),
    Case("P008", "passes", RK, "producer", EOS, RK_TX_OK, []),
    Case("P008", "passes", JAVA, "producer", ALO, {}, []),
    # P009 unstable transactional.id
    Case("P009", "fails", RK, "producer", EOS, {"transactional.id": UUID_ID}, ["P009"]),
    Case("P009", "fails", JAVA, "producer", EOS, {"transactional.id": "tx-12345@worker-1"}, ["P009"]),
    Case("P009", "fails", JAVA, "producer", EOS, {"transactional.id": "processor-7d9f8c6b5-x2xkq"}, ["P009"]),
    Case("P009", "passes", JAVA, "producer", EOS, {"transactional.id": "ticket-processor-3"}, []),
    # an instance ordinal after a dotted name is no host-pid suffix; rapid-7 holds no process id
    *(
        Case("P009", "passes", client, "producer", EOS, {"transactional.id": stable}, [])
        for client in (RK, JAVA)
        for stable in ("com.acme.orders.copier-01", "orders.copier-01", "app.tx.00", "rapid-7", "orders.copier-123")
    ),
    *(
        Case("P009", "fails", RK, "producer", EOS, {"transactional.id": unstable}, ["P009"])
        for unstable in (
            "orders-10.0.0.5-12345",
            "orders-tx-ip-10-0-0-5-4242",
            "worker-3.prod.example.com-31337",
            "tx-localhost-9876",
            "tx-host-web3-4312",
            "orders_pid_4242",
        )
    ),
    # P010 transaction.timeout.ms vs the broker's transaction.max.timeout.ms
    Case("P010", "fails", RK, "producer", EOS, {**RK_TX_OK, "transaction.timeout.ms": 1_000_000}, ["P010"]),
    Case(
        "P010",
        "fails",
        JAVA,
        "producer",
        EOS,
        JAVA_TX_OK,
        ["P010"],
        LintContext(broker_configs={"transaction.max.timeout.ms": "30000"}),
    ),
    Case("P010", "passes", RK, "producer", EOS, {**RK_TX_OK, "transaction.timeout.ms": 900_000}, []),
    # P011 a key with blanks around it: the Java producer ignores it (librdkafka refuses it: P109)
    Case("P011", "fails", JAVA, "producer", ALO, {" acks": "0"}, ["P011"], severity="warning"),
    Case("P011", "fails", JAVA, "producer", AMO, {"acks ": "0", "retries": 0}, ["P011"]),
    Case("P011", "passes", RK, "producer", ALO, {**RK_PRODUCER_OK, " acks": "0"}, ["P109"]),
    Case("P011", "passes", JAVA, "producer", ALO, {"acks": "0"}, ["P001"]),
    # P101 idempotence with acks != all
    Case("P101", "fails", RK, "producer", ALO, {"enable.idempotence": True, "acks": 1}, ["P001", "P101"]),
    Case("P101", "fails", RK, "producer", EOS, {**RK_TX_OK, "acks": "1"}, ["P001", "P101"]),
    Case("P101", "fails", JAVA, "producer", ALO, {"enable.idempotence": "true", "acks": "1"}, ["P001", "P101"]),
    Case("P101", "passes", JAVA, "producer", AMO, {"acks": "0"}, []),
    Case("P101", "passes", RK, "producer", AMO, {"acks": "0", "retries": 0}, []),
    # P102 idempotence with retries=0
    Case("P102", "fails", RK, "producer", ALO, {"enable.idempotence": True, "retries": 0}, ["P002", "P102"]),
    Case("P102", "fails", JAVA, "producer", ALO, {"enable.idempotence": True, "retries": 0}, ["P002", "P102"]),
    Case("P102", "passes", JAVA, "producer", AMO, {"retries": 0}, []),
    # P103 idempotence with > 5 in flight
    Case("P103", "fails", RK, "producer", ALO, {"enable.idempotence": True, "max.in.flight": 6}, ["P103"]),
    Case("P103", "fails", JAVA, "producer", ALO, {"max.in.flight.requests.per.connection": 6}, ["P103"]),
    Case(
        "P103",
        "fails",
        JAVA,
        "producer",
        ALO,
        {"acks": "1", "max.in.flight.requests.per.connection": 6},
        ["P001", "P006", "P007", "P103"],
    ),
    Case(
        "P103",
        "passes",
        JAVA,
        "producer",
        ALO,
        {"max.in.flight.requests.per.connection": 6},
        ["P006", "P007"],
        LintContext(client_version="3.9.2"),
    ),
    Case("P103", "passes", RK, "producer", ALO, RK_PRODUCER_OK, []),
    # P104 transactional.id without idempotence
    Case("P104", "fails", JAVA, "producer", EOS, {**JAVA_TX_OK, "acks": "1"}, ["P001", "P006", "P007", "P104"]),
    Case(
        "P104", "fails", JAVA, "producer", EOS, {**JAVA_TX_OK, "enable.idempotence": "false"}, ["P006", "P007", "P104"]
    ),
    Case("P104", "passes", RK, "producer", EOS, RK_TX_OK, []),
    # P105 librdkafka message.timeout.ms > transaction.timeout.ms
    Case("P105", "fails", RK, "producer", EOS, {**RK_TX_OK, "message.timeout.ms": 70_000}, ["P105"]),
    Case("P105", "passes", RK, "producer", EOS, {**RK_TX_OK, "delivery.timeout.ms": 60_000}, []),
    Case("P105", "passes", JAVA, "producer", EOS, {**JAVA_TX_OK, "transaction.timeout.ms": 120_000}, []),
    # P106 librdkafka linger.ms >= message.timeout.ms
    Case(
        "P106",
        "fails",
        RK,
        "producer",
        ALO,
        {**RK_PRODUCER_OK, "linger.ms": 1000, "message.timeout.ms": 1000},
        ["P003", "P106"],
    ),
    Case("P106", "fails", RK, "producer", ALO, {**RK_PRODUCER_OK, "linger.ms": 300_000}, ["P106"]),
    Case("P106", "passes", RK, "producer", ALO, {**RK_PRODUCER_OK, "message.timeout.ms": 0, "linger.ms": 100}, []),
    # P107 Java delivery.timeout.ms < linger.ms + request.timeout.ms (4.x lingers 5 ms by default, 3.x 0)
    Case("P107", "fails", JAVA, "producer", ALO, {"delivery.timeout.ms": 30_000}, ["P107"]),
    Case(
        "P107",
        "passes",
        JAVA,
        "producer",
        ALO,
        {"delivery.timeout.ms": 30_000},
        [],
        LintContext(client_version="3.9.2"),
    ),
    Case("P107", "passes", JAVA, "producer", ALO, {"linger.ms": 100, "delivery.timeout.ms": 30_100}, []),
    # nor does a Java client before 2.1, which ignores delivery.timeout.ms (P003 stays quiet too)
    Case(
        "P107",
        "passes",
        JAVA,
        "producer",
        ALO,
        {"acks": "all", "retries": 5, "delivery.timeout.ms": 10_000},
        ["P006", "P007"],
        LintContext(client_version="2.0.1"),
    ),
    # P108 librdkafka socket.timeout.ms > transaction.timeout.ms + 100
    Case("P108", "fails", RK, "producer", EOS, {**RK_TX_OK, "socket.timeout.ms": 70_000}, ["P108"]),
    Case("P108", "passes", RK, "producer", EOS, {**RK_TX_OK, "socket.timeout.ms": 60_100}, []),
    # P109 a value the producer refuses as written (kafka-clients 3.7.2 to 4.3.1: "Invalid value ALL
    # for configuration acks: String must be one of: all, -1, 0, 1"; librdkafka 2.16: "Expected bool
    # value for "enable.idempotence": true or false", acks -1 to 1000)
    Case("P109", "fails", JAVA, "producer", ALO, {"acks": "ALL"}, ["P109"], severity="error"),
    Case("P109", "fails", JAVA, "producer", AMO, {"acks": "0", "enable.idempotence": "no"}, ["P109"]),
    Case("P109", "fails", RK, "producer", ALO, {"enable.idempotence": "yes"}, ["P109"]),
    Case("P109", "fails", RK, "producer", ALO, {**RK_PRODUCER_OK, "acks": "1001"}, ["P001", "P101", "P109"]),
    Case("P109", "passes", JAVA, "producer", ALO, {"acks": " all", "enable.idempotence": "TRUE"}, []),
    Case("P109", "passes", RK, "producer", ALO, {"acks": "ALL", "enable.idempotence": "1"}, []),
    # C001 commit before processing
    Case("C001", "fails", RK, "consumer", ALO, {"auto.offset.reset": "earliest"}, ["C001"], severity="error"),
    Case("C001", "fails", JAVA, "consumer", ALO, {"auto.offset.reset": "earliest"}, ["C001"], severity="warning"),
    Case("C001", "passes", RK, "consumer", ALO, RK_CONSUMER_OK, []),
    Case("C001", "passes", RK, "consumer", ALO, {"enable.auto.commit": False, "auto.offset.reset": "smallest"}, []),
    Case("C001", "passes", JAVA, "consumer", ALO, JAVA_CONSUMER_OK, []),
    # C002 isolation level: Java reads uncommitted by default, librdkafka committed
    Case("C002", "fails", JAVA, "consumer", EOS, JAVA_CONSUMER_OK, ["C002"]),
    Case("C002", "fails", RK, "consumer", EOS, {**RK_EOS_CONSUMER_OK, "isolation.level": "read_uncommitted"}, ["C002"]),
    Case("C002", "passes", RK, "consumer", EOS, RK_EOS_CONSUMER_OK, []),
    Case("C002", "passes", JAVA, "consumer", EOS, JAVA_EOS_CONSUMER_OK, []),
    Case("C002", "passes", JAVA, "consumer", ALO, JAVA_CONSUMER_OK, []),
    # C003 auto.offset.reset latest
    Case("C003", "fails", JAVA, "consumer", ALO, {"enable.auto.commit": False}, ["C003"]),
    Case(
        "C003",
        "fails",
        RK,
        "consumer",
        ALO,
        {"enable.auto.offset.store": False, "auto.offset.reset": "largest"},
        ["C003"],
    ),
    Case(
        "C003", "passes", RK, "consumer", ALO, {"enable.auto.offset.store": False, "auto.offset.reset": "beginning"}, []
    ),
    Case("C003", "passes", JAVA, "consumer", AMO, {"enable.auto.commit": False}, []),
    # C004 auto-commit re-delivers processed records
    Case("C004", "fails", RK, "consumer", AMO, {}, ["C004"], severity="error"),
    Case("C004", "fails", JAVA, "consumer", AMO, {}, ["C004"]),
    Case(
        "C004",
        "fails",
        JAVA,
        "consumer",
        ALO,
        {"auto.offset.reset": "earliest", "auto.commit.interval.ms": 120_000},
        ["C001", "C004"],
    ),
    Case("C004", "passes", RK, "consumer", AMO, {"enable.auto.commit": "false"}, []),
    Case("C004", "passes", RK, "consumer", ALO, RK_CONSUMER_OK, []),
    # C005 max.poll.interval.ms
    Case(
        "C005",
        "fails",
        RK,
        "consumer",
        ALO,
        {**RK_CONSUMER_OK, "max.poll.interval.ms": 30_000, "session.timeout.ms": 10_000},
        ["C005"],
        severity="warning",
    ),
    Case(
        "C005",
        "fails",
        JAVA,
        "consumer",
        ALO,
        JAVA_CONSUMER_OK,
        ["C005"],
        LintContext(max_processing_ms=400_000),
        "error",
    ),
    Case("C005", "passes", JAVA, "consumer", ALO, JAVA_CONSUMER_OK, [], LintContext(max_processing_ms=10_000)),
    # C006 offsets not in the transaction
    Case("C006", "fails", RK, "consumer", EOS, {"auto.offset.reset": "earliest"}, ["C006"]),
    Case(
        "C006",
        "fails",
        JAVA,
        "consumer",
        EOS,
        JAVA_EOS_CONSUMER_OK,
        ["C006"],
        LintContext(consume_transform_produce=True, offsets_in_transaction=False),
    ),
    Case(
        "C006",
        "passes",
        JAVA,
        "consumer",
        EOS,
        JAVA_EOS_CONSUMER_OK,
        [],
        LintContext(consume_transform_produce=True, offsets_in_transaction=True),
    ),
    Case("C006", "passes", RK, "consumer", EOS, RK_EOS_CONSUMER_OK, []),
    # C007 librdkafka's legacy auto.commit.enable, which the KafkaConsumer ignores
    Case(
        "C007",
        "fails",
        RK,
        "consumer",
        ALO,
        {"auto.commit.enable": False, "auto.offset.reset": "earliest"},
        ["C001", "C007"],
        severity="info",
    ),
    Case(
        "C007",
        "passes",
        RK,
        "consumer",
        ALO,
        {"auto.commit.enable": False, "enable.auto.commit": False, "auto.offset.reset": "earliest"},
        [],
    ),
    Case("C007", "passes", RK, "consumer", ALO, RK_CONSUMER_OK, []),
    # C008 Spring's listener container commits after the listener ran (AckMode BATCH by default)
    Case("C008", "fails", JAVA, "consumer", AMO, spring({}), ["C008"], severity="error"),
    Case("C008", "fails", JAVA, "consumer", AMO, spring({SPRING_ACK_MODE: "record"}), ["C008"]),
    Case("C008", "fails", JAVA, "consumer", AMO, spring({SPRING_ACK_MODE: "count_time"}), ["C008"]),
    # acknowledge() only queues the offset: the container commits it after the poll's records
    Case(
        "C008",
        "fails",
        JAVA,
        "consumer",
        AMO,
        spring({SPRING_ACK_MODE: "MANUAL", "enable.auto.commit": "false"}),
        ["C008"],
        severity="error",
    ),
    # MANUAL_IMMEDIATE commits when the listener acknowledges: the guarantee rests on the application
    Case(
        "C008", "fails", JAVA, "consumer", AMO, spring({SPRING_ACK_MODE: "manual-immediate"}), ["C008"], severity="info"
    ),
    Case(
        "C008",
        "fails",
        JAVA,
        "consumer",
        ALO,
        spring({SPRING_ACK_MODE: "MANUAL_IMMEDIATE", "auto.offset.reset": "earliest"}),
        ["C008"],
        severity="info",
    ),
    Case("C008", "passes", JAVA, "consumer", ALO, spring({"auto.offset.reset": "earliest"}), []),
    Case(
        "C008",
        "passes",
        JAVA,
        "consumer",
        ALO,
        spring({SPRING_ACK_MODE: "MANUAL", "auto.offset.reset": "earliest"}),
        [],
    ),
    # with auto-commit on, the container does not commit: C004 reports the auto-commit
    Case("C008", "passes", JAVA, "consumer", AMO, spring({"enable.auto.commit": True}), ["C004"]),
    Case("C008", "passes", JAVA, "consumer", AMO, {"enable.auto.commit": False}, []),
    Case(
        "C008",
        "passes",
        JAVA,
        "consumer",
        EOS,
        spring({"isolation.level": "read_committed", "auto.offset.reset": "earliest"}),
        [],
    ),
    # C009 a key with blanks around it: the Java consumer ignores it (librdkafka refuses it: C105)
    Case(
        "C009",
        "fails",
        JAVA,
        "consumer",
        ALO,
        {**JAVA_CONSUMER_OK, " enable.auto.commit": "true"},
        ["C009"],
        severity="warning",
    ),
    Case("C009", "passes", RK, "consumer", ALO, {**RK_CONSUMER_OK, "isolation.level ": "read_committed"}, ["C105"]),
    # C101 librdkafka max.poll.interval.ms < session.timeout.ms
    Case("C101", "fails", RK, "consumer", ALO, {**RK_CONSUMER_OK, "max.poll.interval.ms": 10_000}, ["C005", "C101"]),
    Case("C101", "passes", JAVA, "consumer", ALO, {**JAVA_CONSUMER_OK, "max.poll.interval.ms": 10_000}, ["C005"]),
    Case("C101", "passes", RK, "consumer", ALO, {**RK_CONSUMER_OK, "max.poll.interval.ms": 60_000}, []),
    Case(
        "C101",
        "passes",
        RK,
        "consumer",
        ALO,
        {**RK_CONSUMER_OK, "group.id": "x", "group.protocol": "consumer", "max.poll.interval.ms": 30_000},
        ["C005"],
    ),
    # C102 librdkafka classic-protocol settings with group.protocol=consumer
    Case(
        "C102",
        "fails",
        RK,
        "consumer",
        ALO,
        {**RK_CONSUMER_OK, "group.id": "x", "group.protocol": "consumer", "session.timeout.ms": 45_000},
        ["C102"],
        severity="error",
    ),
    Case(
        "C102",
        "passes",
        RK,
        "consumer",
        ALO,
        {**RK_CONSUMER_OK, "group.id": "x", "group.protocol": "classic", "session.timeout.ms": 45_000},
        [],
    ),
    Case("C102", "passes", RK, "consumer", ALO, {**RK_CONSUMER_OK, "group.id": "x", "group.protocol": "consumer"}, []),
    # C102 the Java consumer refuses the same three from 4.0 (KAFKA-17338); 3.7 to 3.9 ignore them
    Case(
        "C102",
        "fails",
        JAVA,
        "consumer",
        ALO,
        {**JAVA_CONSUMER_OK, "group.protocol": "consumer", "heartbeat.interval.ms": 3000},
        ["C102"],
        severity="error",
    ),
    Case(
        "C102",
        "fails",
        JAVA,
        "consumer",
        AMO,
        {
            "enable.auto.commit": False,
            "group.protocol": "CONSUMER",
            "session.timeout.ms": 45_000,
            "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor",
        },
        ["C102", "C102"],
        LintContext(client_version="4.3.1"),
    ),
    Case(
        "C102",
        "passes",
        JAVA,
        "consumer",
        ALO,
        {**JAVA_CONSUMER_OK, "group.protocol": "consumer", "session.timeout.ms": 45_000},
        [],
        LintContext(client_version="3.9.2"),
    ),
    Case("C102", "passes", JAVA, "consumer", ALO, {**JAVA_CONSUMER_OK, "session.timeout.ms": 10_000}, []),
    # group.protocol.type is librdkafka's: the Java consumer does not know it
    Case(
        "C102",
        "passes",
        JAVA,
        "consumer",
        ALO,
        {**JAVA_CONSUMER_OK, "group.protocol": "consumer", "group.protocol.type": "consumer"},
        [],
    ),
    # C103 the Java consumer refuses group.remote.assignor under the classic protocol from 3.9.0
    Case(
        "C103",
        "fails",
        JAVA,
        "consumer",
        ALO,
        {**JAVA_CONSUMER_OK, "group.remote.assignor": "uniform"},
        ["C103"],
        severity="error",
    ),
    Case(
        "C103",
        "fails",
        JAVA,
        "consumer",
        AMO,
        {"enable.auto.commit": False, "group.protocol": "CLASSIC", "group.remote.assignor": "range"},
        ["C103"],
        LintContext(client_version="3.9.0"),
    ),
    # 3.7 and 3.8 accept it and ignore it
    Case(
        "C103",
        "passes",
        JAVA,
        "consumer",
        ALO,
        {**JAVA_CONSUMER_OK, "group.remote.assignor": "uniform"},
        [],
        LintContext(client_version="3.8.1"),
    ),
    Case(
        "C103",
        "passes",
        JAVA,
        "consumer",
        ALO,
        {**JAVA_CONSUMER_OK, "group.protocol": "consumer", "group.remote.assignor": "uniform"},
        [],
    ),
    # the client trims the value: a blank one is not set
    Case("C103", "passes", JAVA, "consumer", ALO, {**JAVA_CONSUMER_OK, "group.remote.assignor": " "}, []),
    # librdkafka accepts it under classic
    Case("C103", "passes", RK, "consumer", ALO, {**RK_CONSUMER_OK, "group.remote.assignor": "uniform"}, []),
    # C104 Spring's listener container refuses auto-commit with MANUAL or MANUAL_IMMEDIATE: it never
    # starts, so the auto-commit's own findings (C001, C004, C006) are not reported on top
    Case(
        "C104",
        "fails",
        JAVA,
        "consumer",
        AMO,
        spring({"enable.auto.commit": True, SPRING_ACK_MODE: "manual"}),
        ["C104"],
        severity="error",
    ),
    Case(
        "C104",
        "fails",
        JAVA,
        "consumer",
        ALO,
        spring({"enable.auto.commit": "true", SPRING_ACK_MODE: "manual-immediate", "auto.offset.reset": "earliest"}),
        ["C104"],
    ),
    Case(
        "C104",
        "fails",
        JAVA,
        "consumer",
        EOS,
        spring(
            {
                "enable.auto.commit": True,
                SPRING_ACK_MODE: "MANUAL_IMMEDIATE",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        ),
        ["C104"],
    ),
    # other ack modes start with auto-commit on (the container then leaves the commits to it)
    Case(
        "C104",
        "passes",
        JAVA,
        "consumer",
        AMO,
        spring({"enable.auto.commit": True, SPRING_ACK_MODE: "record"}),
        ["C004"],
    ),
    Case(
        "C104",
        "passes",
        JAVA,
        "consumer",
        ALO,
        spring({"enable.auto.commit": False, SPRING_ACK_MODE: "MANUAL", "auto.offset.reset": "earliest"}),
        [],
    ),
    # C105 a value the consumer refuses as written (see P109; librdkafka refuses none, Java
    # before 4.0 by_duration: KIP-1106)
    Case(
        "C105",
        "fails",
        JAVA,
        "consumer",
        EOS,
        {**JAVA_EOS_CONSUMER_OK, "isolation.level": "READ_COMMITTED"},
        ["C105"],
        severity="error",
    ),
    Case("C105", "fails", JAVA, "consumer", ALO, {**JAVA_CONSUMER_OK, "enable.auto.commit": "no"}, ["C105"]),
    Case("C105", "fails", JAVA, "consumer", ALO, {**JAVA_CONSUMER_OK, "auto.offset.reset": "smallest"}, ["C105"]),
    Case(
        "C105",
        "fails",
        JAVA,
        "consumer",
        AMO,
        {"auto.offset.reset": "by_duration:PT1H"},
        ["C004", "C105"],
        LintContext(client_version="3.9.2"),
    ),
    Case("C105", "fails", RK, "consumer", ALO, {**RK_CONSUMER_OK, "enable.auto.offset.store": "off"}, ["C105"]),
    Case("C105", "fails", RK, "consumer", ALO, {**RK_CONSUMER_OK, "auto.offset.reset": "none"}, ["C105"]),
    Case("C105", "passes", RK, "consumer", ALO, {**RK_CONSUMER_OK, "auto.offset.reset": "smallest"}, []),
    Case("C105", "passes", RK, "consumer", EOS, {**RK_EOS_CONSUMER_OK, "isolation.level": "READ_COMMITTED"}, []),
    Case("C105", "passes", JAVA, "consumer", AMO, {"auto.offset.reset": "by_duration:PT1H"}, ["C004"]),
    # T001 replication factor
    Case(
        "T001",
        "fails",
        JAVA,
        "topic",
        ALO,
        {"replication.factor": 1, "min.insync.replicas": 1},
        ["T001", "T002"],
        severity="error",
    ),
    Case(
        "T001",
        "fails",
        RK,
        "topic",
        ALO,
        {"replication.factor": 2, "min.insync.replicas": 2},
        ["T001", "T003"],
        severity="warning",
    ),
    Case("T001", "passes", JAVA, "topic", ALO, TOPIC_OK, []),
    Case("T001", "passes", JAVA, "topic", AMO, {}, []),
    # T002 min.insync.replicas=1
    Case("T002", "fails", JAVA, "topic", EOS, {"replication.factor": 3, "min.insync.replicas": 1}, ["T002"]),
    Case("T002", "fails", JAVA, "topic", ALO, {"replication.factor": 3}, ["T002"]),
    Case(
        "T002",
        "passes",
        JAVA,
        "topic",
        ALO,
        {"replication.factor": 3},
        [],
        LintContext(broker_configs={"min.insync.replicas": "2"}),
    ),
    # T003 min.insync.replicas >= replication factor
    Case(
        "T003",
        "fails",
        JAVA,
        "topic",
        ALO,
        {"replication.factor": 3, "min.insync.replicas": 3},
        ["T003"],
        severity="warning",
    ),
    Case(
        "T003",
        "fails",
        JAVA,
        "topic",
        ALO,
        {"replication.factor": 3, "min.insync.replicas": 4},
        ["T003"],
        severity="warning",
    ),
    # brokers cap min ISR at the replica count: with RF 1 it acts as 1; older brokers refuse
    # every acks=all write, and the broker's version is not known: an info
    Case(
        "T003",
        "fails",
        JAVA,
        "topic",
        ALO,
        {"replication.factor": 1, "min.insync.replicas": 2},
        ["T001", "T003"],
        severity="info",
    ),
    Case(
        "T003",
        "fails",
        JAVA,
        "topic",
        ALO,
        {"replication.factor": 1},
        ["T001", "T003"],
        LintContext(broker_configs={"min.insync.replicas": "2", "default.replication.factor": "3"}),
        severity="info",
    ),
    Case("T003", "passes", JAVA, "topic", ALO, TOPIC_OK, []),
    # T004 unclean leader election
    Case("T004", "fails", JAVA, "topic", ALO, {**TOPIC_OK, "unclean.leader.election.enable": "true"}, ["T004"]),
    Case(
        "T004",
        "fails",
        JAVA,
        "topic",
        ALO,
        TOPIC_OK,
        ["T004"],
        LintContext(broker_configs={"unclean.leader.election.enable": "true"}),
    ),
    Case("T004", "passes", JAVA, "topic", AMO, {"unclean.leader.election.enable": "true"}, []),
    # T005 retention vs the consumers' lag
    Case("T005", "fails", JAVA, "topic", ALO, TOPIC_OK, ["T005"], LintContext(consumer_lag_seconds=8 * 86400), "error"),
    Case(
        "T005",
        "fails",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "retention.ms": 3_600_000},
        ["T005"],
        LintContext(consumer_lag_seconds=2400),
        "warning",
    ),
    Case("T005", "passes", JAVA, "topic", ALO, TOPIC_OK, [], LintContext(consumer_lag_seconds=86400)),
    Case(
        "T005",
        "passes",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "retention.ms": -1},
        [],
        LintContext(consumer_lag_seconds=100 * 86400),
    ),
    # a compacted topic deletes no record by age; its tombstones are T007's
    Case(
        "T005",
        "passes",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "cleanup.policy": "compact"},
        ["T007"],
        LintContext(consumer_lag_seconds=100 * 86400),
    ),
    # T006 compaction vs items that share a record key
    Case(
        "T006",
        "fails",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "cleanup.policy": "compact"},
        ["T006"],
        LintContext(item_keys={"": "json:$.ticket_id"}),
        "error",
    ),
    Case(
        "T006",
        "fails",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "cleanup.policy": "compact,delete", "min.compaction.lag.ms": 86_400_000},
        ["T006"],
        LintContext(item_keys={"": "header:id"}),
        "warning",
    ),
    Case(
        "T006",
        "passes",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "cleanup.policy": "compact"},
        [],
        LintContext(item_keys={"": "key"}),
    ),
    Case("T006", "passes", JAVA, "topic", ALO, TOPIC_OK, [], LintContext(item_keys={"": "json:$.ticket_id"})),
    Case(
        "T006",
        "passes",
        JAVA,
        "topic",
        AMO,
        {"cleanup.policy": "compact"},
        [],
        LintContext(item_keys={"": "json:$.ticket_id"}),
    ),
    # T007 tombstones of a compacted topic vs the consumers' lag
    Case(
        "T007",
        "fails",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "cleanup.policy": "compact"},
        ["T007"],
        LintContext(consumer_lag_seconds=3 * 86400),
        "error",
    ),
    Case(
        "T007",
        "fails",
        JAVA,
        "topic",
        EOS,
        {**TOPIC_OK, "cleanup.policy": "compact,delete"},
        ["T007"],
        LintContext(consumer_lag_seconds=13 * 3600),
        "warning",
    ),
    Case(
        "T007",
        "passes",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "cleanup.policy": "compact"},
        [],
        LintContext(consumer_lag_seconds=3600),
    ),
    # the cleaner may not touch a tombstone younger than min.compaction.lag.ms: 7 d + 1 d kept
    Case(
        "T007",
        "passes",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "cleanup.policy": "compact", "min.compaction.lag.ms": 7 * 86_400_000},
        [],
        LintContext(consumer_lag_seconds=2 * 86400),
    ),
    Case(
        "T007",
        "passes",
        JAVA,
        "topic",
        ALO,
        {**TOPIC_OK, "cleanup.policy": "compact", "delete.retention.ms": 7 * 86_400_000},
        [],
        LintContext(consumer_lag_seconds=3 * 86400),
    ),
    Case(
        "T007",
        "passes",
        JAVA,
        "topic",
        AMO,
        {"cleanup.policy": "compact"},
        [],
        LintContext(consumer_lag_seconds=3 * 86400),
    ),
    # B001 offsets.retention.minutes
    Case("B001", "fails", JAVA, "broker", ALO, {**BROKER_OK, "offsets.retention.minutes": 1440}, ["B001"]),
    Case(
        "B001",
        "fails",
        JAVA,
        "broker",
        ALO,
        BROKER_OK,
        ["B001"],
        LintContext(topic_configs={"audit": {"retention.ms": str(30 * 86_400_000)}}),
    ),
    Case(
        "B001",
        "passes",
        JAVA,
        "broker",
        ALO,
        BROKER_OK,
        [],
        LintContext(topic_configs={"audit": {"retention.ms": str(7 * 86_400_000)}}),
    ),
    # B002 __consumer_offsets replication
    Case("B002", "fails", JAVA, "broker", ALO, {**BROKER_OK, "offsets.topic.replication.factor": "1"}, ["B002"]),
    Case("B002", "passes", JAVA, "broker", AMO, {"offsets.topic.replication.factor": "1"}, []),
    # B003 / B004 __transaction_state replication and min ISR
    Case(
        "B003",
        "fails",
        JAVA,
        "broker",
        EOS,
        {**BROKER_OK, "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1},
        ["B003", "B004"],
    ),
    Case(
        "B003",
        "passes",
        JAVA,
        "broker",
        ALO,
        {**BROKER_OK, "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1},
        [],
    ),
    Case(
        "B004",
        "fails",
        JAVA,
        "broker",
        EOS,
        {**BROKER_OK, "transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 3},
        ["B004"],
        severity="warning",
    ),
    Case("B004", "passes", JAVA, "broker", EOS, BROKER_OK, []),
    # B005 transaction partition verification
    Case(
        "B005",
        "fails",
        JAVA,
        "broker",
        EOS,
        {**BROKER_OK, "transaction.partition.verification.enable": False},
        ["B005"],
    ),
    Case("B005", "passes", JAVA, "broker", EOS, {**BROKER_OK, "transaction.partition.verification.enable": True}, []),
    # B006 unclean leader election by default
    Case("B006", "fails", JAVA, "broker", ALO, {**BROKER_OK, "unclean.leader.election.enable": "true"}, ["B006"]),
    Case("B006", "passes", JAVA, "broker", ALO, {**BROKER_OK, "unclean.leader.election.enable": "false"}, []),
    # B007 / B008 broker defaults for new topics
    Case("B007", "fails", JAVA, "broker", ALO, {"min.insync.replicas": 2}, ["B007"]),
    Case("B007", "passes", JAVA, "broker", ALO, BROKER_OK, []),
    Case("B008", "fails", JAVA, "broker", EOS, {"default.replication.factor": 3}, ["B008"]),
    Case("B008", "passes", JAVA, "broker", AMO, {}, []),
    # S001 Streams at_least_once under exactly-once
    Case("S001", "fails", JAVA, "streams", EOS, {"replication.factor": 3}, ["S001"]),
    Case("S001", "passes", JAVA, "streams", EOS, STREAMS_OK, []),
    Case("S001", "passes", JAVA, "streams", ALO, {"replication.factor": 3}, []),
    # S002 removed exactly_once / exactly_once_beta
    Case(
        "S002",
        "fails",
        JAVA,
        "streams",
        EOS,
        {**STREAMS_OK, "processing.guarantee": "exactly_once"},
        ["S002"],
        severity="error",
    ),
    Case(
        "S002",
        "fails",
        JAVA,
        "streams",
        ALO,
        {**STREAMS_OK, "processing.guarantee": "exactly_once_beta"},
        ["S002"],
        LintContext(client_version="3.9.0"),
        "warning",
    ),
    Case("S002", "passes", JAVA, "streams", ALO, STREAMS_OK, []),
    # S003 Streams internal topics
    Case("S003", "fails", JAVA, "streams", ALO, {**STREAMS_OK, "replication.factor": 2}, ["S003"]),
    Case("S003", "fails", JAVA, "streams", ALO, {**STREAMS_OK, "replication.factor": -1}, ["S003"]),
    Case(
        "S003",
        "passes",
        JAVA,
        "streams",
        ALO,
        {**STREAMS_OK, "replication.factor": -1},
        [],
        LintContext(broker_configs={"default.replication.factor": "3"}),
    ),
    # before 3.0 (KIP-733) an unset replication.factor is 1, whatever the brokers' default
    Case(
        "S003",
        "fails",
        JAVA,
        "streams",
        ALO,
        {},
        ["S003"],
        LintContext(broker_configs={"default.replication.factor": "3"}, client_version="2.8.1"),
    ),
    Case(
        "S003",
        "passes",
        JAVA,
        "streams",
        ALO,
        {},
        [],
        LintContext(broker_configs={"default.replication.factor": "3"}, client_version="3.0.0"),
    ),
]


def fired(case: Case) -> list[str]:
    results = lint(case.config, client=case.client, kind=case.kind, guarantee=case.guarantee, context=case.context)
    return sorted(result.rule for result in results)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_it_fires_exactly_the_expected_rules(case: Case) -> None:
    assert fired(case) == sorted(case.expected)
    if case.outcome == "fails":
        assert case.rule in case.expected
    else:
        assert case.rule not in case.expected


@pytest.mark.parametrize("case", [c for c in CASES if c.severity], ids=lambda case: case.id)
def test_it_reports_the_severity_the_guarantee_calls_for(case: Case) -> None:
    results = lint(case.config, client=case.client, kind=case.kind, guarantee=case.guarantee, context=case.context)
    assert [r.severity for r in results if r.rule == case.rule] == [case.severity]


def test_it_has_a_failing_and_a_passing_case_for_every_rule() -> None:
    outcomes = {(case.rule, case.outcome) for case in CASES}
    missing = [
        f"{rule.id} {outcome}"
        for rule in RULES
        for outcome in ("fails", "passes")
        if (rule.id, outcome) not in outcomes
    ]
    assert missing == []


def test_it_judges_min_insync_above_the_replication_factor_as_capped_at_it() -> None:
    # Partition.scala: effectiveMinIsr = min(min.insync.replicas, replica count)
    results = lint(
        {"replication.factor": 3, "min.insync.replicas": 4}, client="java", kind="topic", guarantee="at-least-once"
    )
    (t003,) = [r for r in results if r.rule == "T003"]
    assert t003.severity == "warning"
    assert "replication.factor=3: every acks=all write fails" not in t003.message
    assert "cap it at the replica count" in t003.message
    assert "while any one replica is down" in t003.message
    assert "older brokers refuse every acks=all write" in t003.message


def _severities(text: str, kind: str, client: str = "librdkafka", guarantee: str = "at-least-once") -> dict[str, str]:
    results = lint_text(text, fmt="properties", client=client, kind=kind, guarantee=guarantee)
    return {r.rule: r.severity for r in results}


def test_a_pasted_topic_config_leaves_the_brokers_defaults_unknown() -> None:
    # replication.factor is not a topic config, and an unset min.insync.replicas is the brokers'
    assert _severities("min.insync.replicas=2\ncleanup.policy=delete\n", "topic") == {"T001": "info", "T003": "info"}
    assert _severities("retention.ms=604800000\n", "topic") == {"T001": "info", "T002": "info"}
    (t001,) = lint_text("retention.ms=1\n", fmt="properties", client="java", kind="topic", guarantee="exactly-once")[:1]
    assert "default.replication.factor, not given" in t001.message and t001.value == "unknown"


def test_a_pasted_streams_config_leaves_the_brokers_replication_factor_unknown() -> None:
    text = "processing.guarantee=exactly_once_v2\n"
    assert _severities(text, "streams", client="java", guarantee="exactly-once") == {"S003": "info"}


def test_a_scan_that_gives_the_brokers_settings_judges_their_defaults() -> None:
    # a live scan whose brokers set none of these keys runs with Apache's defaults
    for context in (LintContext(broker_configs={}), LintContext(broker_configs={"log.retention.hours": "168"})):
        results = lint({}, client="java", kind="topic", guarantee="at-least-once", context=context)
        assert {r.rule: r.severity for r in results} == {"T001": "error", "T002": "error"}
    streams = lint({}, client="java", kind="streams", guarantee="at-least-once", context=LintContext(broker_configs={}))
    assert [(r.rule, r.severity) for r in streams] == [("S003", "warning")]


@pytest.mark.parametrize(
    "transactional_id",
    [
        "payment-processor-east1",
        "orders-pipeline-north",
        "orders-enricher-00001",
        "billing-database-sync1",
        "fraud-detector-zone1",
    ],
)
def test_a_stable_id_of_words_is_no_kubernetes_pod_name(transactional_id: str) -> None:
    assert unstable_part(transactional_id) is None


@pytest.mark.parametrize("transactional_id", ["orders-7d9f8b6c5d-x2k4z", "processor-7d9f8c6b5-x2xkq"])
def test_a_deployment_pod_name_is_unstable(transactional_id: str) -> None:
    assert unstable_part(transactional_id) == "a Kubernetes Deployment pod name"


def test_it_says_the_brokers_refuse_acks_above_one() -> None:
    # librdkafka accepts 2 to 1000; the brokers answer INVALID_REQUIRED_ACKS (ReplicaManager.isValidRequiredAcks)
    results = lint({"acks": "2"}, client="librdkafka", kind="producer", guarantee="at-least-once")
    (p001,) = [r for r in results if r.rule == "P001"]
    assert p001.severity == "error"
    assert "before any follower" not in p001.message
    assert "INVALID_REQUIRED_ACKS" in p001.message
    (one,) = [
        r for r in lint({"acks": "1"}, client="java", kind="producer", guarantee="at-least-once") if r.rule == "P001"
    ]
    assert "before any follower has the record" in one.message
