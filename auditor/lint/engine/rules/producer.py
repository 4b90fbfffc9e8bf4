"""Producer rules: what loses, duplicates or reorders a send, and what stops the client."""

from __future__ import annotations

from collections.abc import Iterator

from auditor.lint.engine import defaults as d
from auditor.lint.engine.rules import ignored_keys, refused_values
from auditor.lint.engine.terms import REFUSES_TO_START, Finding, Rule, RuleBook, Subject
from auditor.lint.engine.transactional_ids import unstable_part
from auditor.vocabulary import GUARANTEES

ALL = frozenset(GUARANTEES)
NOT_LOST = frozenset({d.AT_LEAST_ONCE, d.EXACTLY_ONCE})
EOS = frozenset({d.EXACTLY_ONCE})
RK = frozenset({"librdkafka"})
JAVA = frozenset({"java"})
MIN_DELIVERY_TIMEOUT_MS = 30_000
STARTUP_WHY = "the producer is never created, so nothing is sent"

producer_rules = RuleBook("producer")


def _ms(value: float) -> str:
    return f"{value:g} ms"


@producer_rules.rule(
    "P001",
    "acks is not all",
    NOT_LOST,
    "error",
    why="an acked write is lost when the leader fails over before a follower has copied it",
    fix="set acks=all (with min.insync.replicas=2 on RF 3 topics)",
)
def check_acks(s: Subject) -> Iterator[Finding]:
    acks = s["acks"]
    if acks.value == "all":
        return
    if acks.value == "0":
        message = (
            f"with {acks.describe()} the producer counts a record as sent once it is written to the "
            "socket: a broker error, a full log or a leader change loses it and nobody is told"
        )
    elif acks.value == "1":
        message = (
            f"with {acks.describe()} the leader acks before any follower has the record: when the "
            "leader fails over before a follower copies it, the acked write is lost"
        )
    else:
        # librdkafka sends 2 to 1000 as they are; the brokers take only -1, 0 and 1
        # (ReplicaManager.isValidRequiredAcks) and answer any other with INVALID_REQUIRED_ACKS
        message = (
            f"with {acks.describe()} every produce request is refused by the brokers, which accept only acks "
            "all (-1), 0 or 1: each record fails with INVALID_REQUIRED_ACKS and is not written unless the "
            "application sends it again"
        )
    yield Finding(acks, "all", message)


@producer_rules.rule(
    "P002",
    "retries disabled",
    NOT_LOST,
    "error",
    why="a transient broker error fails the send and the record is lost unless the app re-sends it",
    fix=(
        "leave retries at its default and bound delivery with delivery.timeout.ms / message.timeout.ms "
        "(a Java producer before Kafka 2.1 has neither: set retries, e.g. to 2147483647)"
    ),
)
def check_retries(s: Subject) -> Iterator[Finding]:
    retries = s["retries"]
    if retries.value >= 1:
        return
    message = (
        f"with {retries.describe()} a transient error (leader election, request timeout, "
        "NOT_ENOUGH_REPLICAS) fails the send at once: the record is lost unless the application "
        "sends it again"
    )
    if s.client == "java" and not d.java_has_delivery_timeout(s.java_version):
        yield Finding(retries, "> 0 (2147483647 is the default from Kafka 2.1)", message + _before_kip_91(s))
    else:
        yield Finding(retries, "> 0 (the default 2147483647)", message)


def _before_kip_91(s: Subject) -> str:
    """What a Java producer before 2.1 (KIP-91) does with retries and delivery.timeout.ms."""
    text = "; before Kafka 2.1 the Java producer's retries default is 0, and it has no delivery.timeout.ms"
    timeout = s["delivery.timeout.ms"]
    if timeout.explicit:
        text += f" (it ignores {timeout.name}={timeout.shown})"
    return text


@producer_rules.rule(
    "P003",
    "delivery timeout too short to ride out a failover",
    NOT_LOST,
    "warning",
    why="records still queued or in flight expire during a leader election or broker restart",
    fix=f"set delivery.timeout.ms (librdkafka: message.timeout.ms) >= {MIN_DELIVERY_TIMEOUT_MS}, e.g. the default",
)
def check_delivery_timeout_short(s: Subject) -> Iterator[Finding]:
    timeout = s["delivery.timeout.ms"]
    if timeout.value and timeout.value < MIN_DELIVERY_TIMEOUT_MS:
        yield Finding(
            timeout,
            f">= {MIN_DELIVERY_TIMEOUT_MS}",
            f"with {timeout.describe()} a leader election or broker restart longer than "
            f"{_ms(timeout.value)} expires the records still queued or in flight: the send fails and "
            "the record is lost unless the application sends it again",
        )


@producer_rules.rule(
    "P004",
    "linger.ms takes most of the delivery timeout",
    NOT_LOST,
    "warning",
    why="records sit in their batch for most of their delivery budget, so a short hiccup expires them",
    fix="keep linger.ms well below half of delivery.timeout.ms / message.timeout.ms",
)
def check_linger_share(s: Subject) -> Iterator[Finding]:
    timeout, linger = s["delivery.timeout.ms"], s["linger.ms"]
    if timeout.value and timeout.value / 2 < linger.value < timeout.value:
        yield Finding(
            linger,
            f"< {timeout.name} / 2 ({_ms(timeout.value / 2)})",
            f"{linger.describe()} keeps a record in its batch for most of {timeout.describe()}: only "
            f"{_ms(timeout.value - linger.value)} are left for retries, so a short broker hiccup "
            "expires the record and the send fails",
        )


@producer_rules.rule(
    "P005",
    "transaction.timeout.ms shorter than delivery.timeout.ms",
    NOT_LOST,
    "warning",
    why="the coordinator aborts a transaction whose sends are still being retried",
    fix="set transaction.timeout.ms >= delivery.timeout.ms",
    clients=JAVA,
)
def check_transaction_timeout_vs_delivery(s: Subject) -> Iterator[Finding]:
    if not s.value("transactional.id"):
        return
    transaction, timeout = s["transaction.timeout.ms"], s["delivery.timeout.ms"]
    # Java's own defaults (60 s < 120 s) are left alone: a failed commit is retried, not lost
    if timeout.value is None or not (transaction.explicit or timeout.explicit):
        return  # None: Java before 2.1 has no delivery timeout
    if transaction.value < timeout.value:
        yield Finding(
            transaction,
            f">= {timeout.name} ({timeout.value})",
            f"{transaction.describe()} is shorter than {timeout.describe()}: the coordinator aborts "
            "the transaction while the producer may still be retrying one of its sends, and "
            "commitTransaction then fails, so the whole transaction must be redone",
        )


@producer_rules.rule(
    "P006",
    "idempotence disabled",
    ALL,
    "error",
    why="a retried batch whose ack was lost is written twice: a duplicate",
    fix="set enable.idempotence=true (librdkafka's default is false)",
)
def check_idempotence(s: Subject) -> Iterator[Finding]:
    idempotence = s["enable.idempotence"]
    if idempotence.value:
        return
    # acks=0 or retries=0: nothing is retried, so nothing is written twice (P001/P002 cover the loss)
    if s.guarantee != d.EXACTLY_ONCE and (s.value("acks") == "0" or s.value("retries") < 1):
        return
    yield Finding(
        idempotence,
        "true",
        f"with {idempotence.describe()} a retried batch whose first attempt was written (only its "
        "ack was lost) is written again: the records are duplicated in the partition",
        "warning" if s.guarantee == d.AT_LEAST_ONCE else "error",
    )


@producer_rules.rule(
    "P007",
    "several requests in flight without idempotence",
    NOT_LOST,
    "warning",
    why="a retried batch overtakes the batches sent after it: records are reordered in a partition",
    fix="set enable.idempotence=true, or max.in.flight.requests.per.connection=1",
)
def check_reordering(s: Subject) -> Iterator[Finding]:
    mif = s["max.in.flight.requests.per.connection"]
    if s.value("enable.idempotence") or s.value("retries") < 1 or s.value("acks") == "0" or mif.value <= 1:
        return
    yield Finding(
        mif,
        "1, or enable.idempotence=true (then at most 5)",
        f"with {mif.describe()} and {s['enable.idempotence'].describe()}, a failed batch that is "
        "retried lands behind the batches sent after it: records are reordered within a partition",
    )


@producer_rules.rule(
    "P008",
    "exactly-once producer without a transactional.id",
    EOS,
    "error",
    why="output and input offsets are not committed atomically, so a crash re-processes and duplicates",
    fix="set a stable transactional.id and commit the input offsets through the transaction",
)
def check_transactional_id_missing(s: Subject) -> Iterator[Finding]:
    transactional_id = s["transactional.id"]
    if transactional_id.value:
        return
    if s.context.consume_transform_produce:
        yield Finding(
            transactional_id,
            "a stable id per instance",
            "a consume-transform-produce step without a transactional.id cannot commit its input "
            "offsets atomically with its output: a crash between the two re-processes the input and "
            "writes the output twice",
            "error",
        )
    else:
        yield Finding(
            transactional_id,
            "a stable id per instance",
            "without a transactional.id, idempotence only removes the duplicates of one producer "
            "session's retries: a restart that re-sends unacknowledged records writes them again",
            "warning",
        )


@producer_rules.rule(
    "P009",
    "transactional.id changes across restarts",
    NOT_LOST,
    "warning",
    why="the old instance is not fenced and its open transaction stalls read_committed consumers",
    fix="derive the id from something stable: the app name plus an instance ordinal",
)
def check_transactional_id_stable(s: Subject) -> Iterator[Finding]:
    transactional_id = s["transactional.id"]
    if not transactional_id.value:
        return
    what = unstable_part(str(transactional_id.value))
    if what:
        yield Finding(
            transactional_id,
            "an id that survives restarts (e.g. app name + instance ordinal)",
            f"{transactional_id.name} contains {what}: a restarted instance gets a new id, so the "
            "broker cannot fence the old instance (a zombie can still write) nor abort its open "
            "transaction before transaction.timeout.ms; read_committed consumers stall meanwhile",
        )


@producer_rules.rule(
    "P010",
    "transaction.timeout.ms above the broker's transaction.max.timeout.ms",
    ALL,
    "error",
    why="InitProducerId fails with INVALID_TRANSACTION_TIMEOUT: no transaction can begin",
    fix="lower transaction.timeout.ms or raise the brokers' transaction.max.timeout.ms",
)
def check_transaction_timeout_vs_broker(s: Subject) -> Iterator[Finding]:
    if not s.value("transactional.id"):
        return
    transaction, broker_max = s["transaction.timeout.ms"], s.broker["transaction.max.timeout.ms"]
    if transaction.value > broker_max.value:
        where = "the broker's" if broker_max.explicit else "the broker's default"
        yield Finding(
            transaction,
            f"<= {broker_max.value} ({where} transaction.max.timeout.ms)",
            f"{transaction.describe()} exceeds {where} transaction.max.timeout.ms={broker_max.value}: "
            "InitProducerId fails with INVALID_TRANSACTION_TIMEOUT and the producer cannot begin "
            "any transaction",
        )


# --- combinations the clients reject when they are constructed ---------------------------


def _refused_for(s: Subject, setting_explicit: bool) -> bool:
    """Does a producer that is (or was asked to be) idempotent refuse this setting's value?

    librdkafka, and Java before 3.0.1 or 3.1.0 (idempotence on when enable.idempotence is
    set true or a transactional.id is set; an unset acks follows it to all): refused when
    idempotence is on and the value was set. Java 3.0.1+ (other than 3.1.0): refused when
    enable.idempotence was set true; a defaulted true is silently turned off instead.
    """
    idempotence = s["enable.idempotence"]
    if s.client == "librdkafka" or d.java_idempotence_opt_in(s.java_version):
        return bool(idempotence.value) and setting_explicit
    return idempotence.explicit and bool(idempotence.value)


def _java_idempotence_requested(s: Subject) -> bool:
    """Java validates idempotence settings when it is on before being silently turned off."""
    setting = s["enable.idempotence"]
    if setting.explicit:
        return bool(setting.value)
    return bool(d.java_producer_defaults(s.java_version)["enable.idempotence"])


@producer_rules.rule(
    "P011",
    "a key the producer does not know",
    ALL,
    "warning",
    why="the Java producer ignores a key it does not know: the setting meant has no effect",
    fix="write the key without blanks around it",
    clients=JAVA,
)
def check_ignored_producer_key(s: Subject) -> Iterator[Finding]:
    yield from ignored_keys(s)


@producer_rules.rule(
    "P101",
    "idempotence with acks other than all",
    ALL,
    "error",
    why=STARTUP_WHY,
    fix="set acks=all (or leave it unset)",
)
def check_startup_idempotence_acks(s: Subject) -> Iterator[Finding]:
    acks, idempotence = s["acks"], s["enable.idempotence"]
    if acks.value == "all":
        return
    if _refused_for(s, acks.explicit):
        yield Finding(
            acks,
            "all",
            f"{REFUSES_TO_START}: {idempotence.describe()} requires acks=all, got {acks.describe()}",
        )


@producer_rules.rule(
    "P102",
    "idempotence with retries=0",
    ALL,
    "error",
    why=STARTUP_WHY,
    fix="leave retries unset",
)
def check_startup_idempotence_retries(s: Subject) -> Iterator[Finding]:
    retries, idempotence = s["retries"], s["enable.idempotence"]
    if retries.value >= 1:
        return
    if _refused_for(s, retries.explicit):
        yield Finding(
            retries,
            ">= 1",
            f"{REFUSES_TO_START}: {idempotence.describe()} requires retries >= 1, got {retries.describe()}",
        )


@producer_rules.rule(
    "P103",
    "idempotence with more than 5 requests in flight",
    ALL,
    "error",
    why=STARTUP_WHY,
    fix="set max.in.flight.requests.per.connection <= 5",
)
def check_startup_idempotence_in_flight(s: Subject) -> Iterator[Finding]:
    mif = s["max.in.flight.requests.per.connection"]
    if mif.value <= d.IDEMPOTENT_MAX_IN_FLIGHT:
        return
    if s.client == "java" and s.java_version >= (4, 0, 0):
        refused = _java_idempotence_requested(s)
    else:
        refused = _refused_for(s, mif.explicit)
    if refused:
        yield Finding(
            mif,
            "<= 5",
            f"{REFUSES_TO_START}: idempotence requires max.in.flight.requests.per.connection <= 5, "
            f"got {mif.describe()}",
        )


@producer_rules.rule(
    "P104",
    "transactional.id without idempotence",
    ALL,
    "error",
    why=STARTUP_WHY,
    fix="set enable.idempotence=true (and acks=all, retries > 0)",
)
def check_startup_transactional_without_idempotence(s: Subject) -> Iterator[Finding]:
    transactional_id, idempotence = s["transactional.id"], s["enable.idempotence"]
    if transactional_id.value and not idempotence.value:
        yield Finding(
            idempotence,
            "true",
            f"{REFUSES_TO_START}: a transactional.id requires idempotence, got {idempotence.describe()}",
        )


@producer_rules.rule(
    "P105",
    "message.timeout.ms above transaction.timeout.ms",
    ALL,
    "error",
    why=STARTUP_WHY,
    fix="leave message.timeout.ms unset (librdkafka then uses transaction.timeout.ms)",
    clients=RK,
)
def check_startup_message_timeout_vs_transaction(s: Subject) -> Iterator[Finding]:
    timeout, transaction = s["delivery.timeout.ms"], s["transaction.timeout.ms"]
    if not (s.value("transactional.id") and s.value("enable.idempotence") and timeout.explicit):
        return
    if timeout.value > transaction.value:
        yield Finding(
            timeout,
            f"<= transaction.timeout.ms ({transaction.value})",
            f"{REFUSES_TO_START}: {timeout.describe()} must be <= {transaction.describe()}",
        )


@producer_rules.rule(
    "P106",
    "linger.ms not below message.timeout.ms",
    ALL,
    "error",
    why=STARTUP_WHY,
    fix="set linger.ms well below message.timeout.ms",
    clients=RK,
)
def check_startup_linger_vs_message_timeout(s: Subject) -> Iterator[Finding]:
    timeout, linger = s["delivery.timeout.ms"], s["linger.ms"]
    if not (linger.explicit and timeout.value and timeout.value <= linger.value):
        return
    if timeout.explicit:
        message = f"{REFUSES_TO_START}: {timeout.describe()} must be greater than {linger.describe()}"
    else:
        message = (
            f"{REFUSES_TO_START} producing: every produce() fails with 'Invalid argument or "
            f"configuration' because {timeout.describe()} is not greater than {linger.describe()}"
        )
    yield Finding(linger, f"< {timeout.name} ({timeout.value})", message)


@producer_rules.rule(
    "P107",
    "delivery.timeout.ms below linger.ms + request.timeout.ms",
    ALL,
    "error",
    why=STARTUP_WHY,
    fix="set delivery.timeout.ms >= linger.ms + request.timeout.ms",
    clients=JAVA,
)
def check_startup_java_delivery_timeout(s: Subject) -> Iterator[Finding]:
    timeout = s["delivery.timeout.ms"]
    floor = s.value("linger.ms") + s.value("request.timeout.ms")
    # None: Java before 2.1 does not know the key, so it neither checks nor refuses it
    if timeout.explicit and timeout.value is not None and timeout.value < floor:
        yield Finding(
            timeout,
            f">= linger.ms + request.timeout.ms ({floor:g})",
            f"{REFUSES_TO_START}: {timeout.describe()} must be >= {s['linger.ms'].describe()} + "
            f"{s['request.timeout.ms'].describe()}",
        )


@producer_rules.rule(
    "P108",
    "socket.timeout.ms above transaction.timeout.ms + 100",
    ALL,
    "error",
    why=STARTUP_WHY,
    fix="leave socket.timeout.ms unset for a transactional producer",
    clients=RK,
)
def check_startup_socket_timeout_vs_transaction(s: Subject) -> Iterator[Finding]:
    socket, transaction = s["socket.timeout.ms"], s["transaction.timeout.ms"]
    if s.value("transactional.id") and socket.explicit and socket.value > transaction.value + 100:
        yield Finding(
            socket,
            f"<= transaction.timeout.ms + 100 ({transaction.value + 100})",
            f"{REFUSES_TO_START}: {socket.describe()} must be <= {transaction.describe()} + 100",
        )


@producer_rules.rule(
    "P109",
    "a value the producer does not accept",
    ALL,
    "error",
    why=STARTUP_WHY,
    fix="write the value as the client spells it: acks=all, enable.idempotence=true (Java: lower case, "
    "true or false only)",
)
def check_startup_refused_producer_value(s: Subject) -> Iterator[Finding]:
    yield from refused_values(s)


RULES: tuple[Rule, ...] = producer_rules.rules
