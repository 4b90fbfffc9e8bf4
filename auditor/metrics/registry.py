"""Metric collectors, one per app, found automatically.

Contract for an app that wants its numbers on ``/metrics/``: create
``auditor/<app>/metrics.py`` with a function ``collect()`` that returns or yields
``Sample`` objects::

    from auditor.metrics.registry import Sample

    def collect() -> Iterator[Sample]:
        for row in Run.objects.values("binding__name").annotate(last=Max("finished_at")):
            yield Sample(
                "auditor_reconcile_last_success_timestamp_seconds",
                row["last"].timestamp(),
                {"binding": row["binding__name"]},
                help="When the binding's last successful reconciliation finished",
            )

Rules (a sample that breaks one makes its whole collector fail, see below):

- names start with ``auditor_`` and match ``[a-zA-Z_:][a-zA-Z0-9_:]*``; label names
  match ``[a-zA-Z_][a-zA-Z0-9_]*`` and do not start with ``__``; label values are any
  text (the exposition escapes them);
- every sample of one name has the same ``type`` (``gauge`` unless said otherwise) and
  ``help``, and no two samples of a name have the same labels;
- values are int or float (NaN and infinities are allowed; None and bool are not).
  Leave a series out rather than inventing a value for it;
- ``collect()`` reads the database (a few aggregate queries, never one per row) and
  returns within a scrape's timeout; it is called on every scrape.

Every installed ``auditor.*`` app is searched once, when the first scrape comes. A
collector that raises, or yields a bad sample, is logged and left out of that scrape;
``auditor_collector_up{collector="<app label>"}`` then reads 0, so the failure shows in
Prometheus rather than hiding the other apps' numbers.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import import_module
from typing import Literal

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

log = logging.getLogger(__name__)

MetricType = Literal["gauge", "counter", "untyped"]
Collector = Callable[[], Iterable["Sample"]]
PREFIX = "auditor_"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class SampleError(ValueError):
    """A collector produced a sample that the exposition format cannot carry."""


@dataclass(frozen=True)
class Sample:
    name: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)
    help: str = ""
    type: MetricType = "gauge"

    def check(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name) or not self.name.startswith(PREFIX):
            raise SampleError(f"metric name {self.name!r} must start with {PREFIX!r} and match {_NAME.pattern}")
        if self.type not in ("gauge", "counter", "untyped"):
            raise SampleError(f"{self.name}: type {self.type!r} must be gauge, counter or untyped")
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise SampleError(f"{self.name}: value {self.value!r} must be an int or a float")
        for label, value in self.labels.items():
            if not isinstance(label, str) or not _LABEL.fullmatch(label) or label.startswith("__"):
                raise SampleError(f"{self.name}: label name {label!r} must match {_LABEL.pattern} without a leading __")
            if not isinstance(value, str):
                raise SampleError(f"{self.name}: label {label} must be a string, got {value!r}")

    @property
    def label_key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.labels.items()))


@dataclass
class Family:
    """All samples of one metric name, in the order they were collected."""

    name: str
    help: str
    type: MetricType
    samples: list[Sample] = field(default_factory=list)
    label_keys: set[tuple[tuple[str, str], ...]] = field(default_factory=set)


# The apps' collectors, listed here rather than found by file existence: a renamed or broken
# module fails loudly instead of its metrics silently disappearing.
COLLECTOR_APPS = ("canary", "lint", "reconcile", "stuck")


@cache
def discovered_collectors() -> dict[str, Collector]:
    """``{app label: collect}`` of the apps in COLLECTOR_APPS."""
    found: dict[str, Collector] = {}
    for label in COLLECTOR_APPS:
        module = import_module(f"auditor.{label}.metrics")
        collect = getattr(module, "collect", None)
        if not callable(collect):
            raise ImproperlyConfigured(f"auditor.{label}.metrics must define collect() yielding Sample objects")
        found[label] = collect
    return found


def _add(families: dict[str, Family], samples: list[Sample]) -> None:
    """Add one collector's samples, all or none: on a conflict ``families`` is left unchanged."""
    staged: dict[str, list[Sample]] = {}
    staged_keys: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for sample in samples:
        sample.check()
        first = staged[sample.name][0] if sample.name in staged else None
        existing = families.get(sample.name)
        reference = first or existing
        if reference is not None and (reference.type, reference.help) != (sample.type, sample.help):
            raise SampleError(f"{sample.name}: every sample of a name needs the same type and help")
        key = sample.label_key
        if (sample.name, key) in staged_keys or (existing is not None and key in existing.label_keys):
            raise SampleError(f"{sample.name}: two samples with the labels {dict(key)}")
        staged_keys.add((sample.name, key))
        staged.setdefault(sample.name, []).append(sample)
    for name, new in staged.items():
        family = families.setdefault(name, Family(name, new[0].help, new[0].type))
        family.samples.extend(new)
        family.label_keys.update(sample.label_key for sample in new)


def collect_all(collectors: Mapping[str, Collector] | None = None) -> list[Family]:
    """Every collector's samples, grouped by name, plus auditor_up and per-collector health."""
    chosen = discovered_collectors() if collectors is None else collectors
    families: dict[str, Family] = {}
    _add(families, [Sample("auditor_up", 1, help="1 when the auditor answered this scrape")])
    health: list[Sample] = []
    for label, collect in chosen.items():
        started = time.monotonic()
        try:
            with transaction.atomic():  # a savepoint: a failed query must not poison the next collector's
                _add(families, list(collect()))
            up = 1
        except Exception:  # one broken collector must not hide the others
            log.exception("metrics collector %s failed", label)
            up = 0
        elapsed = time.monotonic() - started
        health.append(
            Sample(
                "auditor_collector_up",
                up,
                {"collector": label},
                help="1 when the app's collector answered this scrape, 0 when it failed (see the server log)",
            )
        )
        health.append(
            Sample(
                "auditor_collector_duration_seconds",
                round(elapsed, 6),
                {"collector": label},
                help="How long the app's collector took",
            )
        )
    _add(families, health)
    return list(families.values())
