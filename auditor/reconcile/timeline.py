"""An item's delivery timeline: each step of its life, in order, and the step where it broke.

row created → send attempted (producer ledger) → acked at p@o → in the topic → group
committed past it → processed (consumer ledger) → row updated.

Built only from what the auditor already holds for the key: its source row, the records
the key page read from the topic, the reconciliation findings of the key and the stuck
items of its rules (whose evidence carries ledger entries, committed offsets and
processed marks) and the key index reconciliation keeps (where a run saw the key's record).
Each source adds what it knows through one ``add_*`` method. A step nothing
speaks about stays ``unknown``: the timeline never guesses that a step happened or not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from auditor.lint.engine.catalog import RULES_BY_ID
from auditor.lint.engine.evidence import rules_explaining

CREATED, SENT, ACKED, IN_TOPIC, COMMITTED, PROCESSED, UPDATED = (
    "created",
    "sent",
    "acked",
    "in-topic",
    "committed",
    "processed",
    "updated",
)
STEP_TITLES = {
    CREATED: "row created",
    SENT: "send attempted (producer ledger)",
    ACKED: "acked by the broker",
    IN_TOPIC: "in the topic",
    COMMITTED: "group committed past it",
    PROCESSED: "processed (consumer ledger)",
    UPDATED: "row updated",
}
ORDER = (CREATED, SENT, ACKED, IN_TOPIC, COMMITTED, PROCESSED, UPDATED)
OK, BROKEN, PENDING, UNKNOWN = "ok", "broken", "pending", "unknown"

# Where each stuck verdict breaks, and the finding (kind, cause) whose lint rules allow it.
VERDICT_BREAKS: dict[str, tuple[str, str, tuple[str, str | None] | None]] = {
    "never-produced": (SENT, BROKEN, ("missing", None)),
    "produce-failed": (ACKED, BROKEN, ("gap", "send-failed")),
    "broker-lost": (IN_TOPIC, BROKEN, ("gap", "broker-lost")),
    "aborted": (IN_TOPIC, BROKEN, ("aborted", None)),
    "expired": (IN_TOPIC, BROKEN, ("missing", None)),
    "waiting": (COMMITTED, PENDING, None),
    "skipped": (COMMITTED, BROKEN, ("unprocessed", None)),
    "processed-not-updated": (UPDATED, BROKEN, None),
}
# Where each reconciliation finding breaks (kind, cause or None for any cause).
FINDING_BREAKS: dict[tuple[str, str | None], str] = {
    ("gap", "never-sent"): SENT,
    ("gap", "send-failed"): ACKED,
    ("gap", "send-unconfirmed"): ACKED,
    ("gap", "broker-lost"): IN_TOPIC,
    ("missing", None): IN_TOPIC,
    ("duplicate", None): IN_TOPIC,
    ("aborted", None): IN_TOPIC,
    ("unprocessed", None): PROCESSED,
    ("reprocessed", None): PROCESSED,
}


@dataclass
class Step:
    name: str
    state: str = UNKNOWN
    at: datetime | str | None = None
    where: str = ""
    details: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # what said so
    rules: list[str] = field(default_factory=list)  # lint rules whose setting allows the break

    @property
    def title(self) -> str:
        return STEP_TITLES[self.name]

    @property
    def rule_links(self) -> list[tuple[str, str]]:
        return [(r, RULES_BY_ID[r].title if r in RULES_BY_ID else r) for r in self.rules]

    def note(self, state: str, text: str, source: str, *, at: Any = None, where: str = "") -> None:
        """Add what ``source`` says; a break outranks pending, which outranks ok, which outranks unknown."""
        rank = {UNKNOWN: 0, OK: 1, PENDING: 2, BROKEN: 3}
        if rank[state] >= rank[self.state]:
            self.state = state
        if text and text not in self.details:
            self.details.append(text)
        if source not in self.sources:
            self.sources.append(source)
        if at and not self.at:
            self.at = at
        if where and not self.where:
            self.where = where


@dataclass
class Timeline:
    binding: str
    key: str
    steps: dict[str, Step] = field(default_factory=lambda: {name: Step(name) for name in ORDER})
    verdicts: list[str] = field(default_factory=list)

    @property
    def ordered(self) -> list[Step]:
        return [self.steps[name] for name in ORDER]

    @property
    def broken(self) -> Step | None:
        return next((s for s in self.ordered if s.state == BROKEN), None)

    def mark_break(self, step: str, state: str, text: str, source: str, explained: tuple[str, str | None] | None):
        self.steps[step].note(state, text, source)
        if explained is not None and state == BROKEN:
            for rule in rules_explaining(*explained):
                if rule not in self.steps[step].rules:
                    self.steps[step].rules.append(rule)

    # --- what each source adds ---------------------------------------------------------------

    def add_source_row(self, created: datetime | None, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        if rows:
            self.steps[CREATED].note(OK, "the row is in the source table", "source row", at=created)
        elif created is not None:
            self.steps[CREATED].note(OK, "", "findings", at=created)

    def add_row_status(self, rules: Iterable[Any], columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """The source row's status read now against each stuck rule of the binding: a status the
        rule does not call stuck means the consumer's update reached the row."""
        if len(rows) != 1:
            return  # no row, or several: which one was updated cannot be told
        for rule in rules:
            if rule.status_column not in columns:
                continue
            status = rows[0][list(columns).index(rule.status_column)]
            source = f"source row ({rule.name})"
            if status in rule.stuck_values:
                self.steps[UPDATED].note(PENDING, f"{rule.status_column} is still {status}", source)
            else:
                self.steps[UPDATED].note(OK, f"{rule.status_column} is {status}, not a stuck value", source)

    def add_records(self, records: Iterable[Any], topic: str) -> None:
        """Records of the key read from the topic now (key page lookup)."""
        for record in records:
            where = f"{topic}/{record.partition}@{record.offset}"
            if getattr(record, "aborted", False):
                self.steps[IN_TOPIC].note(BROKEN, f"{where} only in an aborted transaction", "topic read", where=where)
            else:
                self.steps[IN_TOPIC].note(OK, f"read at {where}", "topic read", at=record.timestamp, where=where)
            audit = record.audit if hasattr(record, "audit") else {}
            if audit.get("audit-pid"):
                self.steps[SENT].note(
                    OK, f"producer session {audit['audit-pid']} seq {audit.get('audit-seq', '?')}", "record headers"
                )

    def add_findings(self, findings: Iterable[Any], current_runs: set[int]) -> None:
        """Reconciliation findings of the key; only those of each binding's latest run count as now."""
        for finding in findings:
            if finding.run_id not in current_runs:
                continue
            step = FINDING_BREAKS.get((finding.kind, finding.cause)) or FINDING_BREAKS.get((finding.kind, None))
            if step is None:
                continue
            label = finding.kind + (f" ({finding.cause})" if finding.cause else "")
            where = f"{finding.partition}@{finding.offset}" if finding.offset is not None else ""
            group = f" by group {finding.group}" if finding.group else ""
            self.verdicts.append(label)
            self.mark_break(
                step, BROKEN, f"run #{finding.run_id}: {label}{group}", "reconciliation", (finding.kind, finding.cause)
            )
            if where:
                self.steps[step].where = self.steps[step].where or where
            ledger = (finding.evidence or {}).get("ledger") if isinstance(finding.evidence, dict) else None
            if isinstance(ledger, dict):
                self._ledger_entry(ledger, finding.session, finding.seq, "reconciliation ledger")

    def add_key_memory(self, sighting: Any, reason: str, topic: str) -> None:
        """The key index reconciliation keeps (auditor/reconcile/memory.py): where a run first saw
        a record with this key, and whether a later run found that offset rewritten."""
        if reason:
            self.steps[IN_TOPIC].note(UNKNOWN, f"the key index could not be read: {reason}", "key index")
        if sighting is None:
            return
        where = f"{topic}/{sighting.partition}@{sighting.offset}"
        at = datetime.fromtimestamp(sighting.ts_ms / 1000, UTC) if sighting.ts_ms else None
        if sighting.lost:
            detected = f" (found by run {sighting.detected_run})" if sighting.detected_run else ""
            self.verdicts.append("broker-lost")
            self.mark_break(
                IN_TOPIC,
                BROKEN,
                f"run {sighting.run_id} saw it at {where}; later that offset was rewritten{detected}",
                "key index",
                ("gap", "broker-lost"),
            )
        else:
            self.steps[IN_TOPIC].note(OK, f"run {sighting.run_id} saw it at {where}", "key index", at=at, where=where)

    def add_committed(
        self, records: Iterable[Any], committed: dict[str, dict[int, int]], errors: dict[str, str]
    ) -> None:
        """Where the groups stand now against each record the page read (not aborted ones)."""
        source = "committed offsets now"
        for group, reason in sorted(errors.items()):
            self.steps[COMMITTED].note(UNKNOWN, f"group {group}: {reason}", source)
        for record in records:
            if getattr(record, "aborted", False):
                continue
            where = f"{record.partition}@{record.offset}"
            for group, offsets in sorted(committed.items()):
                at = offsets.get(record.partition)
                if at is None:
                    self.steps[COMMITTED].note(
                        PENDING, f"group {group} has committed nothing on partition {record.partition}", source
                    )
                elif at > record.offset:
                    self.steps[COMMITTED].note(OK, f"group {group} committed {at}, past {where}", source)
                else:
                    self.steps[COMMITTED].note(PENDING, f"group {group} committed {at}, not yet past {where}", source)

    def add_stuck_item(self, item: Any, topic: str) -> None:
        """A stuck item of the key: its verdict, and the ledgers and offsets its evidence holds."""
        evidence = item.evidence if isinstance(item.evidence, dict) else {}
        source = f"stuck diagnosis ({item.rule.name})"
        self.verdicts.append(item.verdict)
        if item.since:
            self.steps[CREATED].note(OK, "", source, at=item.since)
        for entry in evidence.get("ledger") or []:
            self._ledger_entry(entry, entry.get("session"), entry.get("seq"), source)
        for record in evidence.get("records") or []:
            where = f"{topic}/{record.get('partition')}@{record.get('offset')}"
            state = BROKEN if record.get("state") == "aborted" else OK
            self.steps[IN_TOPIC].note(
                state, f"the diagnosis found it at {where} ({record.get('state')})", source, at=record.get("timestamp")
            )
        offset = evidence.get("offset")
        for group in evidence.get("groups") or []:
            committed = group.get("committed")
            name = group.get("group")
            if committed is not None and offset is not None and committed > offset:
                self.steps[COMMITTED].note(OK, f"group {name} committed {committed} > offset {offset}", source)
            elif committed is not None:
                self.steps[COMMITTED].note(PENDING, f"group {name} committed {committed}", source)
            if group.get("processed"):
                mark = group["processed"]
                self.steps[PROCESSED].note(
                    OK, f"processed by group {name} (session {mark.get('consumer_session')})", source, at=mark.get("at")
                )
            elif group.get("outcome") == "skipped":
                self.steps[PROCESSED].note(BROKEN, f"no processed mark of group {name}", source)
        if item.resolved_at is None:
            self.steps[UPDATED].note(
                BROKEN if item.verdict == "processed-not-updated" else PENDING, f"still {item.status}", source
            )
        else:
            self.steps[UPDATED].note(OK, "no longer stuck", source, at=item.resolved_at)
        brk = VERDICT_BREAKS.get(item.verdict)
        if brk is not None and item.resolved_at is None:
            step, state, explained = brk
            self.mark_break(step, state, f"{item.verdict}: {item.reason}", source, explained)

    def _ledger_entry(self, entry: dict[str, Any], session: Any, seq: Any, source: str) -> None:
        status = entry.get("status")
        at = entry.get("at")
        self.steps[SENT].note(OK, f"producer session {session} seq {seq}", source, at=at)
        where = f"{entry.get('partition')}@{entry.get('offset')}"
        if status == "acked":
            self.steps[ACKED].note(OK, f"the producer ledger says acked at {where}", source, where=where)
        elif status == "unconfirmed":
            self.steps[ACKED].note(PENDING, "sent with acks=0: never confirmed", source)
        elif status == "failed":
            self.steps[ACKED].note(BROKEN, f"failed: {entry.get('error')} ({entry.get('persisted')})", source)

    # --- output -------------------------------------------------------------------------------

    def as_text(self, permalink: str = "") -> str:
        """The plain text an operator pastes into an incident."""
        lines = [f"Delivery timeline of {self.key!r} (binding {self.binding})"]
        if self.verdicts:
            lines.append("Verdict: " + ", ".join(dict.fromkeys(self.verdicts)))
        for number, step in enumerate(self.ordered, start=1):
            at = step.at.isoformat() if isinstance(step.at, datetime) else (step.at or "")
            head = f"{number}. [{step.state.upper()}] {step.title}"
            if step.where:
                head += f" at {step.where}"
            if at:
                head += f" ({at})"
            lines.append(head + (" <- broke here" if step is self.broken else ""))
            lines.extend(f"     {d}" for d in step.details)
            if step.rules:
                lines.append("     allowed by: " + ", ".join(f"{r} {t}" for r, t in step.rule_links))
        if permalink:
            lines.append(f"Permalink: {permalink}")
        return "\n".join(lines) + "\n"
