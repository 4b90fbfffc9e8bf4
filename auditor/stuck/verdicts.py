"""The verdict of one stuck item: where its delivery broke, with the evidence.

A pure function of what the diagnosis read (evidence.py). The rule that keeps it honest:
a failure verdict needs positive evidence; whenever something that would decide it could
not be read (Kafka, a ledger, a group's offsets, records that old), the verdict is
``unknown`` with the reason.

Decision, in order:

1. Kafka unreadable -> unknown.
2. A record with the key is visible to read_committed readers -> the consumer side, per
   record and consumer group: a processed mark -> processed (the row update failed);
   the group's committed offset at or before the record -> waiting (with the lag); the
   group committed past it without a mark -> skipped (only when the group's consumer is
   probed, the consumer ledger holds every mark since the record was written, and the
   record is not below the group's first processed mark on its partition, below which the
   application may have read it before it was probed; otherwise unknown; unknown too while
   the max.poll.interval.ms of the probed session whose commit passed it has not passed
   since that commit: it may still be processing it, whatever it committed since,
   verdict_outcomes.still_processing). A mark the
   ledger deleted after a reconciliation run read it counts (recalled from the run's
   state). A group with no committed offset now that reconciliation runs saw commit past the
   record (state.json `group_commits`: deleted or expired since), and no member of it that
   may be reading the partition, is judged as committed past it.
   Across records and groups: processed > waiting > unknown > skipped.
   Earlier records with the key that are gone (acked at a position, or seen by runs, and not
   in the topic now: a re-sent item's first record, deleted since) are weighed too, each as
   in 4 and 5 (verdicts_absent.with_gone_copies): one processed -> processed-not-updated,
   whatever the record in the topic waits for; where that one is skipped, a gone one whose
   fate is unknown may have been the one processed -> unknown.
3. Only in a transaction still open (past the last stable offset) -> waiting; only in
   aborted transactions -> aborted.
4. Not in the topic at all (needs the producer ledger, else unknown):
   acked at an offset the log still covers -> broker-lost (beyond the log end, an ack not
   known to be acks=all only once no follower and no min.insync.replicas stall can hold the
   high watermark below it: held_watermark.py); acked at an offset below the
   log start -> deleted: processed mark -> processed-not-updated; the group had not
   reached it -> expired; committed past it: unknown when the consumer ledger no longer
   holds marks as old as the record or the record is below the group's first mark on its
   partition, else moved past it without reading its neighbours while they existed ->
   expired, read its neighbours but not it, or a run saw its committed offset pass the
   record while the record was in the log -> skipped (a group whose offset is gone, or moved
   back below the record, is judged by the runs' sighting where it passed it); sent unconfirmed (acks=0, the
   broker never answers) and its partition still holds everything since the send ->
   produce-failed (never broker-lost), else unknown; a failed ledger entry and no
   ack -> produce-failed; no ledger entry -> never-produced when the topic (or the
   ledger) still holds everything since the row was created, else unknown; when the
   ledger has no entries for the topic at all (the producer is not probed), only if no
   partition can have changed leader since the row was created either; and where a
   producer session that never closed may have sent the record unledgered (untraced.py: v2
   after its last ledger flush, v1 any time its report came after it), only if the topic
   holds everything it can have sent since and no leader change or log cleaning since can
   have removed it.
   Contract v2 (acks in sequence ranges, keys in `keys` records, no position): acked ->
   broker-lost when every partition still holds everything since it was produced; deleted
   when no partition holds records that old: expired when no group can have read it (never
   committed, and no run saw it commit either, or probed since before the record was produced and no mark below a log start
   is as recent as the record), else unknown; sent and never confirmed -> produce-failed when every partition holds
   everything since, else unknown.
5. The auditor's memory (what reconciliation runs saw, KeyMemory), with the acks of 4:
   seen at an offset the log still covers but no longer there -> broker-lost; seen at an
   offset since deleted -> decided as for an acked-then-deleted record (expired, ...);
   reported missing by a run while the topic held everything since the row was created,
   the topic still holds everything since that run, and no partition can have changed
   leader since the row was created (a leader change loses acks=1 records without a
   trace) -> never-produced. Each names the run. Several records with the key (retries,
   re-sends), acked with a position (4) or seen by runs, are each judged so (verdicts_memory):
   one processed -> processed-not-updated; else one unknown, or one whose position the state no longer
   keeps -> unknown; else the furthest along: skipped > expired > broker-lost. A record seen
   before a run found the topic created again (state.json `topic_records_since`) was the
   deleted topic's: unknown, never judged against the new log. Where the diagnosis could not
   read the topic's id, a record acked or seen at an offset the log covers and gone is
   unknown, not broker-lost: a re-creation since would look the same.
   A record a run read only in an aborted transaction (the state's `aborted` dataset), now
   below the log start, is aborted (naming the run), and so is an ack of it (same position,
   session and seq); it ranks below every other copy. The ack of a transactional session (its
   transactional.id in the clients topic, or aborted records of it in that dataset) of a
   record gone -> unknown (aborted records are acked too), unless a run saw a record with the
   key committed at its offset.
6. On a compacted topic whose record key is not the binding's key, a record with the item's
   key absent now may have been removed by the log cleaner after delivery: wherever the
   rules above would conclude broker-lost, never-produced or produce-failed from such an
   absence (for records older than min.compaction.lag.ms), the verdict is unknown.
7. A topic deleted and created again under its name (its topic id changed since the auditor
   last saw it, auditor.pipelines.incarnations) took its records with it, and its offsets
   start again at 0: the topic is complete only since the new id was first seen, so a
   record acked or seen at an offset and produced before then is unknown (not broker-lost,
   not expired), and never-produced needs a row created after it (or a complete producer
   ledger).
8. Where offsets were reused (7, or a partition a reconciliation rebuild found truncated
   and rewritten past an offset: state.json `marks_rewritten`, spark_jobs.mark_rules), a
   processed mark made up to the bound may be of the gone record that held the offset: it
   is not taken for the record there now (a later mark at the same position counts), and
   a record written up to the bound (plus the slack for clocks) committed past without a
   later mark is unknown, not skipped. The same holds for a record acked or seen at such an
   offset that is now below the log start (4, 5): written up to the bound, it may have been
   lost with the rewritten part or kept and deleted since -> unknown; written after it, its
   marks are judged as above, and marks past it prove no skip (they may be of lost records).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from auditor.stuck.evidence import (
    ClusterView,
    Diagnosis,
    KeyMemory,
    LedgerEntry,
    LocatedRecord,
    StuckRow,
)
from auditor.stuck.verdict_outcomes import MAX_LISTED, MarkIndex, place
from auditor.stuck.verdicts_absent import not_in_topic, with_gone_copies
from auditor.stuck.verdicts_consumer import consumer_side


def diagnose(
    row: StuckRow,
    records: Iterable[LocatedRecord],
    entries: Iterable[LedgerEntry],
    marks: MarkIndex,
    view: ClusterView,
    memory: KeyMemory | None = None,
) -> Diagnosis:
    records = sorted(records, key=lambda r: (r.partition, r.offset))
    entries = sorted(entries, key=lambda e: (e.ts_ms or 0, e.session, e.seq))
    evidence: dict[str, Any] = {
        "topic": view.topic,
        "records": [r.as_json() for r in records[:MAX_LISTED]],
        "records_found": len(records),
        "ledger": [e.as_json() for e in entries[-MAX_LISTED:]],
    }
    if view.kafka_error:
        return Diagnosis("unknown", f"Kafka could not be read: {view.kafka_error}", evidence)

    memory = memory or KeyMemory()
    committed = [r for r in records if r.state == "committed"]
    if committed:
        found = consumer_side(row, committed, marks, view, evidence)
        # an earlier copy of the item, gone from the topic now, may have got further
        return with_gone_copies(row, found, records, entries, marks, view, memory)

    open_records = [r for r in records if r.state == "open"]
    if open_records:
        record = open_records[0]
        state = view.partitions.get(record.partition)
        place(evidence, record.partition, record.offset, state, view)
        stable = state.stable if state else "?"
        return Diagnosis(
            "waiting",
            f"in a transaction still open at {view.topic}/{record.partition}@{record.offset}: read_committed "
            f"consumers wait at the last stable offset {stable} until it commits or aborts",
            evidence,
        )
    aborted = [r for r in records if r.state == "aborted"]
    if aborted:
        record = aborted[-1]
        place(evidence, record.partition, record.offset, view.partitions.get(record.partition), view)
        where = ", ".join(f"{r.partition}@{r.offset}" for r in aborted[:MAX_LISTED])
        return Diagnosis(
            "aborted",
            f"only in aborted transactions ({view.topic} {where}); read_committed consumers never see it "
            "and it was not produced again",
            evidence,
        )
    return not_in_topic(row, entries, marks, view, evidence, memory)
