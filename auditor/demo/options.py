"""Delivery modes and fault switches of the demo pipeline, and their text forms.

Faults are written as a comma-separated list, e.g.
``drop-every=100,crash-after=500,slow-ms=20,fire-and-forget``; ``none`` (or an
empty string) means no faults. The same text is accepted by ``--faults`` and by
the ``AUDITOR_DEMO_FAULTS`` environment variable.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum

from auditor.probes import CLIENTS_TOPIC, CONSUMER_LEDGER_TOPIC, PRODUCER_LEDGER_TOPIC


class DemoOptionError(ValueError):
    """A mode or fault specification the demo cannot use; the message names the input."""


class DeliveryMode(StrEnum):
    AT_MOST_ONCE = "at-most-once"  # commit a batch's offsets, then process it
    AT_LEAST_ONCE = "at-least-once"  # process, store the offset, commit later
    EXACTLY_ONCE = "exactly-once"  # at-least-once + an idempotency-key table in the update's transaction
    TRANSACTIONAL = "transactional"  # consume-process-produce with offsets sent in the Kafka transaction

    @classmethod
    def parse(cls, text: str, what: str = "mode") -> DeliveryMode:
        try:
            return cls(text.strip().lower())
        except ValueError:
            choices = ", ".join(mode.value for mode in cls)
            raise DemoOptionError(f"{what} {text!r} is not a delivery mode (expected one of: {choices})") from None


# Binding guarantee (docs: at-most-once | at-least-once | exactly-once) each mode delivers.
GUARANTEE_OF_MODE: dict[DeliveryMode, str] = {
    DeliveryMode.AT_MOST_ONCE: "at-most-once",
    DeliveryMode.AT_LEAST_ONCE: "at-least-once",
    DeliveryMode.EXACTLY_ONCE: "exactly-once",
    DeliveryMode.TRANSACTIONAL: "exactly-once",
}


@dataclass(frozen=True)
class Faults:
    """Fault switches. Counters are per client instance, 1-based ("every 4th record")."""

    # Consumer: stop like a dying process once this many records were handled
    # (nothing further committed; at-most-once has already committed its batch).
    crash_after: int | None = None
    # Producer: insert every Nth ticket but never produce it (the app "forgot").
    drop_every: int | None = None
    # Producer: acks=0, retries=0, no idempotence (losses go unnoticed).
    fire_and_forget: bool = False
    # Producer: enable.idempotence=false while retries stay on (retry duplicates, reordering).
    no_idempotence: bool = False
    # Consumer: sleep this long per record.
    slow_ms: int = 0
    # Consumer: every Nth record is processed and marked, but its status update is rolled back.
    fail_update_every: int | None = None
    # Producer: run transactionally, one Kafka transaction per ticket, and abort every Nth
    # ticket's transaction after its record reached the broker; it is never produced again,
    # so read_committed consumers never see it and the ticket stays NEW.
    abort_every: int | None = None

    def __post_init__(self) -> None:
        if self.abort_every is not None and (self.fire_and_forget or self.no_idempotence):
            # A transactional producer needs idempotence and acks=all: librdkafka refuses otherwise.
            weakened = "fire-and-forget" if self.fire_and_forget else "no-idempotence"
            raise DemoOptionError(f"abort-every needs a transactional producer and cannot be combined with {weakened}")

    def __str__(self) -> str:
        return format_faults(self)

    @property
    def any(self) -> bool:
        return self != Faults()


_COUNTERS = {
    "crash-after": "crash_after",
    "drop-every": "drop_every",
    "fail-update-every": "fail_update_every",
    "abort-every": "abort_every",
}
_FLAGS = {"fire-and-forget": "fire_and_forget", "no-idempotence": "no_idempotence"}
_DURATIONS = {"slow-ms": "slow_ms"}


def _known() -> str:
    return ", ".join([f"{name}=N" for name in (*_COUNTERS, *_DURATIONS)] + list(_FLAGS) + ["none"])


def parse_faults(text: str | None, what: str = "faults") -> Faults:
    """``"drop-every=100,crash-after=500"`` -> Faults; raises DemoOptionError naming the bad part."""
    if text is None or text.strip().lower() in ("", "none"):
        return Faults()
    values: dict[str, int | bool] = {}
    for raw_part in text.split(","):
        part = raw_part.strip()
        if not part:
            continue
        name, sep, raw_value = (piece.strip() for piece in part.partition("="))
        name = name.lower()
        if name in _FLAGS:
            if sep and raw_value.lower() not in ("1", "true", "yes", "on"):
                raise DemoOptionError(f"{what}: '{part}': {name} is a switch, write just '{name}'")
            values[_FLAGS[name]] = True
            continue
        if name not in _COUNTERS and name not in _DURATIONS:
            raise DemoOptionError(f"{what}: unknown fault '{name}' (expected: {_known()})")
        try:
            number = int(raw_value)
        except ValueError:
            raise DemoOptionError(f"{what}: '{part}' needs a whole number, as in {name}=10") from None
        minimum = 0 if name in _DURATIONS else 1
        if number < minimum:
            raise DemoOptionError(f"{what}: '{part}' must be >= {minimum}")
        values[_COUNTERS.get(name) or _DURATIONS[name]] = number
    try:
        return Faults(**values)  # type: ignore[arg-type]  # keys are Faults' field names, from the tables
    except DemoOptionError as exc:
        raise DemoOptionError(f"{what}: {exc}") from None


def format_faults(faults: Faults) -> str:
    """The text form parse_faults() reads back; ``none`` when no fault is on."""
    names = {field: name for name, field in (*_COUNTERS.items(), *_FLAGS.items(), *_DURATIONS.items())}
    parts: list[str] = []
    for item in fields(faults):
        value = getattr(faults, item.name)
        if value is None or value is False or (item.name == "slow_ms" and value == 0):
            continue
        name = names[item.name]
        parts.append(name if value is True else f"{name}={value}")
    return ",".join(parts) or "none"


@dataclass(frozen=True)
class ProbeTopics:
    """Where the probes write their ledgers: the contract's defaults unless a test isolates them."""

    producer_ledger: str = PRODUCER_LEDGER_TOPIC
    consumer_ledger: str = CONSUMER_LEDGER_TOPIC
    clients: str = CLIENTS_TOPIC
    ledger_flush_interval_s: float = 1.0
    # The record contract the probes write (docs/contracts.md): 2, or 1 for the old format.
    contract: int = 2
