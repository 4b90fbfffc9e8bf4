"""The delivery timeline of one item: which step broke, from findings and stuck evidence."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from auditor.reconcile.timeline import ORDER, Timeline

NOW = datetime(2030, 1, 2, 9, 10, tzinfo=UTC)


def stuck(verdict: str, evidence: dict, resolved_at=None) -> SimpleNamespace:
    return SimpleNamespace(
        rule=SimpleNamespace(name="tickets-new"),
        verdict=verdict,
        reason="why",
        evidence=evidence,
        since=NOW,
        status="NEW",
        resolved_at=resolved_at,
    )


SKIPPED_EVIDENCE = {
    "records": [{"partition": 2, "offset": 8812, "timestamp": "2030-01-02T09:10:01.000+00:00", "state": "committed"}],
    "ledger": [
        {
            "session": "ab" * 16,
            "seq": 4,
            "status": "acked",
            "partition": 2,
            "offset": 8812,
            "error": None,
            "persisted": "persisted",
            "at": "2030-01-02T09:10:00.500+00:00",
        }
    ],
    "groups": [{"group": "ticket-processor", "committed": 8900, "outcome": "skipped"}],
    "partition": 2,
    "offset": 8812,
}


def test_a_skipped_item_breaks_at_the_commit_step_with_the_consumer_setting() -> None:
    timeline = Timeline("tickets", "4711")
    timeline.add_stuck_item(stuck("skipped", SKIPPED_EVIDENCE), "tickets")
    states = {s.name: s.state for s in timeline.ordered}
    assert states == {
        "created": "ok",
        "sent": "ok",
        "acked": "ok",
        "in-topic": "ok",
        "committed": "broken",
        "processed": "broken",
        "updated": "pending",
    }
    assert timeline.broken is timeline.steps["committed"]
    assert "C001" in timeline.steps["committed"].rules
    assert timeline.steps["acked"].where == "2@8812"
    assert "group ticket-processor committed 8900 > offset 8812" in timeline.steps["committed"].details


def test_the_text_lists_every_step_in_order_and_where_it_broke() -> None:
    timeline = Timeline("tickets", "4711")
    timeline.add_stuck_item(stuck("skipped", SKIPPED_EVIDENCE), "tickets")
    text = timeline.as_text("http://auditor/reconcile/keys/tickets/4711/")
    numbered = [line for line in text.splitlines() if line[:1].isdigit()]
    assert numbered[0].startswith("1. [OK] row created (2030-01-02T09:10:00+00:00)")
    assert len(numbered) == len(ORDER)
    assert numbered[4].startswith("5. [BROKEN] group committed past it") and numbered[4].endswith("<- broke here")
    assert "allowed by: C001" in text
    assert text.rstrip().endswith("Permalink: http://auditor/reconcile/keys/tickets/4711/")


def test_a_missing_finding_breaks_in_the_topic_and_unknown_steps_stay_unknown() -> None:
    finding = SimpleNamespace(
        kind="missing",
        cause=None,
        run_id=7,
        partition=None,
        offset=None,
        group=None,
        evidence=None,
        session=None,
        seq=None,
    )
    timeline = Timeline("tickets", "4711")
    timeline.add_findings([finding], current_runs={7})
    assert timeline.broken is timeline.steps["in-topic"]
    assert timeline.steps["sent"].state == "unknown"  # nothing said whether it was sent
    assert timeline.steps["processed"].state == "unknown"


def test_findings_of_older_runs_do_not_count() -> None:
    finding = SimpleNamespace(
        kind="missing",
        cause=None,
        run_id=6,
        partition=None,
        offset=None,
        group=None,
        evidence=None,
        session=None,
        seq=None,
    )
    timeline = Timeline("tickets", "4711")
    timeline.add_findings([finding], current_runs={7})
    assert timeline.broken is None


def test_a_failed_send_breaks_at_the_ack_step() -> None:
    entry = {
        "session": "s",
        "seq": 1,
        "status": "failed",
        "partition": -1,
        "offset": -1,
        "error": "Broker: Not enough in-sync replicas",
        "persisted": "not",
        "at": None,
    }
    timeline = Timeline("tickets", "4711")
    timeline.add_stuck_item(stuck("produce-failed", {"ledger": [entry], "records": []}), "tickets")
    assert timeline.broken is timeline.steps["acked"]
    assert timeline.steps["sent"].state == "ok"


def test_the_key_index_places_the_record_or_marks_it_lost() -> None:
    from auditor.stuck.evidence import Sighting

    seen = Timeline("tickets", "4711")
    seen.add_key_memory(Sighting(2, 8812, 1_893_575_400_000, "run-a"), "", "tickets")
    assert seen.steps["in-topic"].state == "ok" and seen.steps["in-topic"].where == "tickets/2@8812"
    assert seen.broken is None

    lost = Timeline("tickets", "4711")
    lost.add_key_memory(Sighting(2, 8812, None, "run-a", lost=True, detected_run="run-b"), "", "tickets")
    assert lost.broken is lost.steps["in-topic"]
    assert "later that offset was rewritten (found by run run-b)" in lost.steps["in-topic"].details[0]
    assert "P001" in lost.steps["in-topic"].rules

    unreadable = Timeline("tickets", "4711")
    unreadable.add_key_memory(None, "state.json is unreadable", "tickets")
    assert unreadable.steps["in-topic"].state == "unknown"


def test_it_says_where_each_group_stands_now_against_each_record() -> None:
    records = [
        SimpleNamespace(partition=0, offset=5, aborted=False),
        SimpleNamespace(partition=1, offset=7, aborted=False),
        SimpleNamespace(partition=1, offset=9, aborted=True),  # only in an aborted transaction
    ]
    timeline = Timeline("tickets", "4711")
    timeline.add_committed(records, {"processor": {0: 6, 1: 7}}, {})
    step = timeline.steps["committed"]
    assert step.state == "pending"
    assert step.details == ["group processor committed 6, past 0@5", "group processor committed 7, not yet past 1@7"]

    past = Timeline("tickets", "4711")
    past.add_committed(
        records[:1],
        {"processor": {0: 6}, "audit": {}},
        {"billing": "its committed offsets could not be read: timed out"},
    )
    assert past.steps["committed"].state == "pending"
    assert past.steps["committed"].details == [
        "group billing: its committed offsets could not be read: timed out",
        "group audit has committed nothing on partition 0",
        "group processor committed 6, past 0@5",
    ]


def test_it_marks_the_commit_step_ok_when_every_group_is_past_every_record() -> None:
    timeline = Timeline("tickets", "4711")
    timeline.add_committed([SimpleNamespace(partition=2, offset=8812, aborted=False)], {"processor": {2: 8900}}, {})
    assert timeline.steps["committed"].state == "ok"


def test_it_reads_the_row_update_from_the_status_a_stuck_rule_watches() -> None:
    rule = SimpleNamespace(name="tickets-new", status_column="status", stuck_values=["NEW", "RETRY"])
    done = Timeline("tickets", "4711")
    done.add_row_status([rule], ["id", "status"], [["4711", "DONE"]])
    assert (done.steps["updated"].state, done.steps["updated"].details) == ("ok", ["status is DONE, not a stuck value"])

    waiting = Timeline("tickets", "4711")
    waiting.add_row_status([rule], ["id", "status"], [["4711", "RETRY"]])
    assert (waiting.steps["updated"].state, waiting.steps["updated"].details) == ("pending", ["status is still RETRY"])

    several = Timeline("tickets", "4711")
    several.add_row_status([rule], ["id", "status"], [["4711", "DONE"], ["4711", "NEW"]])
    assert several.steps["updated"].state == "unknown"
