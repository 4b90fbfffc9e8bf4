"""Problem kinds and the events filter a channel subscribes with.

A problem kind is ``<family>:<name>``:

| kind | raised by | a channel wants it when |
|---|---|---|
| ``finding:<kind>`` (missing, duplicate, …) | reconciliation | the kind is in ``finding_kinds`` |
| ``stuck:<verdict>`` (skipped, waiting, …) | stuck-item diagnosis | the verdict is in ``stuck_verdicts`` |
| ``lint:<severity>`` (error, warning, info) | config lint | it is at least as severe as ``lint_severity`` |
| ``canary:loss`` (details ``{"lost": n, "truncated": t}``) | the canary | n + t >= ``canary_loss`` |
| ``canary:latency`` (details ``{"latency_ms": x}``) | the canary | x >= ``canary_latency_ms`` |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from auditor.lib.durations import parse_duration
from auditor.vocabulary import FINDING_KINDS, STUCK_VERDICTS

LINT_SEVERITIES = ("error", "warning", "info")  # most severe first
CANARY_KINDS = ("loss", "latency")
FAMILIES = ("finding", "stuck", "lint", "canary")

Reporter = Callable[[str, str], None]


def validate_problem_kind(kind: str) -> tuple[str, str]:
    """(family, name) of a problem kind; ValueError naming the accepted kinds otherwise."""
    family, _, name = kind.partition(":") if isinstance(kind, str) else ("", "", "")
    allowed = {"finding": FINDING_KINDS, "stuck": STUCK_VERDICTS, "lint": LINT_SEVERITIES, "canary": CANARY_KINDS}
    if family not in allowed or name not in allowed[family]:
        raise ValueError(
            f"problem kind {kind!r} is not known: expected finding:<{'|'.join(FINDING_KINDS)}>, "
            f"stuck:<verdict>, lint:<{'|'.join(LINT_SEVERITIES)}> or canary:<{'|'.join(CANARY_KINDS)}>"
        )
    return family, name


@dataclass(frozen=True)
class EventFilter:
    """Which problems a channel is told about (stored as JSON on the channel)."""

    finding_kinds: tuple[str, ...] = field(default_factory=tuple)
    stuck_verdicts: tuple[str, ...] = field(default_factory=tuple)
    lint_severity: str | None = None
    canary_loss: int | None = None
    canary_latency_ms: int | None = None
    reports: bool = False

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["finding_kinds"] = list(self.finding_kinds)
        data["stuck_verdicts"] = list(self.stuck_verdicts)
        return data

    def wants(self, kind: str, details: Mapping[str, Any]) -> bool:
        family, name = validate_problem_kind(kind)
        if family == "finding":
            return name in self.finding_kinds
        if family == "stuck":
            return name in self.stuck_verdicts
        if family == "lint":
            return self.lint_severity is not None and (
                LINT_SEVERITIES.index(name) <= LINT_SEVERITIES.index(self.lint_severity)
            )
        if name == "loss":
            # records the cluster lost: acked and never read, or read and cut from the log since
            lost = _number(details.get("lost")) + _number(details.get("truncated", 0))
            return self.canary_loss is not None and lost >= self.canary_loss
        return self.canary_latency_ms is not None and _number(details.get("latency_ms")) >= self.canary_latency_ms

    def describe(self) -> list[str]:
        parts = []
        if self.finding_kinds:
            parts.append("findings: " + ", ".join(self.finding_kinds))
        if self.stuck_verdicts:
            parts.append("stuck: " + ", ".join(self.stuck_verdicts))
        if self.lint_severity:
            parts.append(f"lint: {self.lint_severity} and worse")
        if self.canary_loss is not None:
            parts.append(f"canary loss >= {self.canary_loss}")
        if self.canary_latency_ms is not None:
            parts.append(f"canary latency >= {self.canary_latency_ms} ms")
        if self.reports:
            parts.append("reports")
        return parts


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else float("-inf")


def _names(value: Any, allowed: tuple[str, ...], path: str, report: Reporter) -> tuple[str, ...]:
    if value in (None, []):
        return ()
    if value == "all":
        return allowed
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        report(path, f"must be a list of names or 'all' (names: {', '.join(allowed)})")
        return ()
    unknown = [v for v in value if v not in allowed]
    if unknown:
        report(path, f"unknown {', '.join(map(repr, unknown))} (expected: {', '.join(allowed)})")
    return tuple(v for v in allowed if v in value)


def _positive_int(value: Any, path: str, report: Reporter) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        report(path, f"must be a whole number of at least 1, got {value!r}")
        return None
    return value


def _latency_ms(value: Any, path: str, report: Reporter) -> int | None:
    """A latency threshold: a number of milliseconds or a duration such as 500ms, 5s."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str):
        try:
            if value.strip().endswith("ms"):
                return int(value.strip()[:-2])
            return parse_duration(value) * 1000
        except ValueError:
            pass
    report(path, f"must be milliseconds (e.g. 500) or a duration (e.g. 500ms, 5s), got {value!r}")
    return None


EVENT_FIELDS = ("finding_kinds", "stuck_verdicts", "lint_severity", "canary_loss", "canary_latency", "reports")


def parse_event_filter(data: Any, path: str, report: Reporter) -> EventFilter:
    """Validate an ``events:`` mapping; every problem goes to ``report(path, message)``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        report(path, f"must be a mapping with any of: {', '.join(EVENT_FIELDS)}")
        return EventFilter()
    for key in data:
        if key not in EVENT_FIELDS:
            report(f"{path}.{key}", f"unknown field (expected one of: {', '.join(EVENT_FIELDS)})")
    severity = data.get("lint_severity")
    if severity is not None and severity not in LINT_SEVERITIES:
        report(f"{path}.lint_severity", f"must be one of {', '.join(LINT_SEVERITIES)}, got {severity!r}")
        severity = None
    reports = data.get("reports", False)
    if not isinstance(reports, bool):
        report(f"{path}.reports", f"must be true or false, got {reports!r}")
        reports = False
    return EventFilter(
        finding_kinds=_names(data.get("finding_kinds"), FINDING_KINDS, f"{path}.finding_kinds", report),
        stuck_verdicts=_names(data.get("stuck_verdicts"), STUCK_VERDICTS, f"{path}.stuck_verdicts", report),
        lint_severity=severity,
        canary_loss=_positive_int(data.get("canary_loss"), f"{path}.canary_loss", report),
        canary_latency_ms=_latency_ms(data.get("canary_latency"), f"{path}.canary_latency", report),
        reports=reports,
    )


def event_filter_from_json(data: Mapping[str, Any] | None) -> EventFilter:
    """The filter stored on a channel (already validated when it was saved)."""
    data = data or {}
    return EventFilter(
        finding_kinds=tuple(data.get("finding_kinds") or ()),
        stuck_verdicts=tuple(data.get("stuck_verdicts") or ()),
        lint_severity=data.get("lint_severity"),
        canary_loss=data.get("canary_loss"),
        canary_latency_ms=data.get("canary_latency_ms"),
        reports=bool(data.get("reports", False)),
    )
