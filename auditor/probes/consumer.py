"""AuditedConsumer: a confluent_kafka.Consumer that keeps a processed ledger of offset
ranges (record contract version 2, docs/contracts.md, ``_audit.consumer-ledger``).

The poll path parses no header (reconciliation reads every record anyway and counts the
ones without or with malformed audit headers). ``poll`` and ``consume`` are the inner
client's bound methods where the application stores offsets itself; where it leaves
``enable.auto.offset.store`` on (the default), they also keep the last record handed per
partition, whose position the probe's deferred store stores with the session's commit
metadata in librdkafka's place (offset_store.py; docs/contracts.md, "Commit metadata").
``mark_processed`` only appends the message to a buffer; every hundred or so
marks (and at each background flush) they become per-partition ranges of consecutive offsets,
which the ledger writer joins and writes.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from itertools import groupby, repeat, starmap
from operator import add, lshift, sub
from typing import Any, Literal, cast

from confluent_kafka import Consumer, Message, Producer, libversion

from auditor.probes.codec import (
    ProcessedRangeRow,
    encode_client_record,
    encode_marks_aborted,
    encode_marks_lost,
    encode_session_end,
    encode_session_start,
    processed_ranges_header,
)
from auditor.probes.config import ledger_producer_config
from auditor.probes.native import RangeMarker, use_native
from auditor.probes.topics import CLIENTS_TOPIC, CONSUMER_LEDGER_TOPIC
from auditor.probes.wrapping import (
    HOLDING,
    ConsumerWrapper,
    GroupMetadata,
    TransactionPositions,
    inner_consumer_config,
    probe_stores_offsets,
)
from auditor.probes.writer import LedgerWriter

_time_ns = time.time_ns
# Offsets stay far below 2**62 and partitions below 2**20 (Kafka allows far fewer): a shift
# of 62 keeps "partition, offset - index" one exact integer.
_PARTITION_SHIFT = 62
# Marks are held as Message objects until this many, then turned into ranges by the marking
# thread: a hundred messages stay in the CPU cache, a thousand did not (~0.15 us more per mark,
# measured with 100-byte records).
_COMPACT_EVERY = 128


def offset_ranges(messages: list[Message], first_ms: int, last_ms: int) -> list[ProcessedRangeRow]:
    """Consecutive offsets of one partition, in marking order, as ledger range rows.

    A mark that does not extend the current run (another partition or topic, a gap, a seek
    back) starts a new one, so marking the same offset twice gives two ranges (reprocessing
    stays visible). Error events are skipped: they are not records.
    """
    if any(map(Message.error, messages)):
        messages = [msg for msg in messages if msg.error() is None]
    if not messages:
        return []
    # casts: a record (not an event) always has its topic, partition and offset.
    topics = cast(list[str], list(map(Message.topic, messages)))
    partitions = cast(list[int], list(map(Message.partition, messages)))
    offsets = cast(list[int], list(map(Message.offset, messages)))
    count, first = len(offsets), offsets[0]
    if (
        topics.count(topics[0]) == count
        and partitions.count(partitions[0]) == count
        and offsets[-1] - first == count - 1
        and offsets == list(range(first, first + count))
    ):
        return [(topics[0], partitions[0], first, offsets[-1], first_ms, last_ms)]  # the common case
    if topics.count(topics[0]) != len(topics):
        # Several topics in one batch: number them, so a change of topic breaks a run too.
        numbers: dict[str, int] = {}
        partitions = [numbers.setdefault(t, len(numbers)) << 20 | p for t, p in zip(topics, partitions, strict=True)]
    # Within a run, partition and offset - index are both constant: one C-level pass finds
    # the runs (no Python frame per mark).
    runs = map(add, map(lshift, partitions, repeat(_PARTITION_SHIFT)), map(sub, offsets, range(len(offsets))))
    rows: list[ProcessedRangeRow] = []
    index = 0
    for _, run in groupby(runs):
        length = len(list(run))
        end = index + length - 1
        rows.append(
            (topics[index], cast(int, messages[index].partition()), offsets[index], offsets[end], first_ms, last_ms)
        )
        index = end + 1
    return rows


def merge_ranges(chunks: list[list[ProcessedRangeRow]]) -> list[ProcessedRangeRow]:
    """Range rows of consecutive chunks of marks, in order, with a row that continues the
    previous one (same partition, the next offset) joined to it."""
    merged: list[ProcessedRangeRow] = []
    for rows in chunks:
        if merged:
            topic, partition, first, last, first_ms, _ = merged[-1]
            head = rows[0]
            if head[0] == topic and head[1] == partition and head[2] == last + 1:
                merged[-1] = (topic, partition, first, head[3], first_ms, head[5])
                merged.extend(rows[1:])
                continue
        merged.extend(rows)
    return merged


def _ranges(rows: list[ProcessedRangeRow]) -> list[tuple[str, int, int, int]]:
    """(topic, partition, first, last) of each row, as marks-aborted and marks-lost name them."""
    return [(topic, partition, first, last) for topic, partition, first, last, _, _ in rows]


def split_at_positions(
    rows: list[ProcessedRangeRow], positions: TransactionPositions
) -> tuple[list[ProcessedRangeRow], list[ProcessedRangeRow]]:
    """The rows' marks below the positions a transaction carried (of that transaction), and
    the others (of partitions it did not carry, or at and past its position: a later one's)."""
    inside: list[ProcessedRangeRow] = []
    outside: list[ProcessedRangeRow] = []
    for row in rows:
        topic, partition, first, last, first_ms, last_ms = row
        position = positions.get((topic, partition))
        if position is None or first >= position:
            outside.append(row)
        elif last < position:
            inside.append(row)
        else:
            inside.append((topic, partition, first, position - 1, first_ms, last_ms))
            outside.append((topic, partition, position, last, first_ms, last_ms))
    return inside, outside


class AuditedConsumer(ConsumerWrapper):
    """A confluent_kafka.Consumer with a processed ledger of offset ranges.

    Call ``mark_processed(msg)`` (or use ``with consumer.processing(msg):``) once the
    application has finished with a record. Marks are buffered and written in batches;
    ``commit()`` first hands the buffered marks to the ledger (and, for a synchronous
    commit, waits for them up to ``ledger_flush_timeout_s``) so a committed offset normally
    does not run ahead of its processed marks. The probe never fails or holds up a commit
    for its ledger: marks whose ledger record was not written (a failed delivery, a queue
    full for 10 s) are named in a ``marks-lost`` record once the ledger takes records again
    (docs/contracts.md).
    A consume-transform-produce copier hands its positions to a probed transactional
    producer (``send_offsets_to_transaction(..., consumer.consumer_group_metadata())``): from
    then on (from the start with ``transactional=True``) its marks wait for the outcome of the
    transaction that carries them, and are written when it commits; the marks of a transaction
    that aborts are named in a ``marks-aborted`` record instead, never as processed (the
    application's output of them was discarded). A commit by the consumer itself writes the
    marks held; at ``close()`` marks of a transaction that has not ended are named in a
    ``marks-lost`` record (its outcome is unknown).
    Offsets committed by ``enable.auto.commit`` cannot be ordered that way; audit-minded
    consumers commit explicitly. The last processed offset per partition goes to the
    ledger in ``session-end`` checkpoints (every ``ledger_flush_interval_s`` when it
    changed, on ``flush_ledger()``, and on ``close()``).
    """

    kind: Literal["consumer"] = "consumer"
    contract_version = 2

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        ledger_topic: str = CONSUMER_LEDGER_TOPIC,
        clients_topic: str = CLIENTS_TOPIC,
        ledger_batch_size: int = 1000,
        ledger_flush_interval_s: float = 1.0,
        ledger_flush_timeout_s: float = 30.0,
        ledger_config: Mapping[str, Any] | None = None,
        consumer_factory: Callable[[dict[str, Any]], Any] = Consumer,
        producer_factory: Callable[[dict[str, Any]], Any] = Producer,
        native: bool | None = None,
        transactional: bool = False,
    ) -> None:
        self._config = dict(config)
        self._consumer: Consumer = consumer_factory(inner_consumer_config(config))  # or a test double
        self.session_id = uuid.uuid4().hex
        self.native = use_native(native)
        # Commits name the session in their metadata (docs/contracts.md). librdkafka's own
        # offset store (enable.auto.offset.store, on by default) stores none, so the probe stores
        # the handed records' positions in its place, deferred (offset_store.py): poll keeps the
        # last record per partition (in C, without a Python frame, when native). Otherwise the
        # poll path is the wrapped client's.
        self._stores_offsets = probe_stores_offsets(self._config)
        self.poll, self.consume = self._offset_store_calls(self.native)
        group = self._config.get("group.id")
        self.group: str | None = None if group is None else str(group)
        self.client_id: str = str(self._config.get("client.id", "rdkafka"))
        self.host = socket.gethostname()
        self._ledger_flush_timeout_s = ledger_flush_timeout_s
        self._processed = 0
        # topic -> partition -> offset of the last record marked processed, learnt from
        # the marks as the writer drains them (so it never runs ahead of the ledger).
        self._last_offsets: dict[str, dict[int, int]] = {}
        self._last_checkpoint: dict[str, dict[int, int]] = {}
        self._closed = False

        self._ledger = LedgerWriter(
            ledger_producer_config(self._config, self.client_id, ledger_config),
            topic=ledger_topic,
            key=self.session_id.encode("ascii"),
            batch_size=ledger_batch_size,
            flush_interval_s=ledger_flush_interval_s,
            name=f"consumer-{self.session_id[:8]}",
            producer_factory=producer_factory,
        )
        now_ms = _time_ns() // 1_000_000
        # Marks not yet turned into ranges, and the lock that turns them, one batch at a time.
        self._held: deque[Message] = deque()
        self._compact_lock = threading.Lock()
        self._compacted_ms = now_ms
        # The clock at the first mark made into an empty buffer (pure-Python path; see _compact).
        self._since_ms = [0]
        self._compact_every = min(_COMPACT_EVERY, ledger_batch_size)
        # Range rows waiting for the outcome of the transaction that carries them: from the
        # first send_offsets_to_transaction of a probed producer (or from the start).
        self._holding = transactional
        self._joined = False
        self._held_rows: list[ProcessedRangeRow] = []
        # Rows held when probed producers aborted, in marking order, each with the producers
        # that aborted since it was marked: a commit by one of them that carries the row names
        # it aborted (note_abort). All older than _held_rows.
        self._held_at_aborts: list[tuple[ProcessedRangeRow, frozenset[str]]] = []
        # Chunks of range rows, one per batch of marks, joined when the ledger writer drains them.
        self._marks = self._ledger.stream(
            processed_ranges_header(self.session_id, self.group), self._observe_ranges, merge_ranges
        )
        self._chunks_per_record = max(1, ledger_batch_size // self._compact_every)
        # The native marker keeps runs of offsets itself instead of holding messages, and calls
        # _compact once _compact_every runs (not marks) wait: consecutive marks stay in C, and
        # the background flush takes the open run every ledger_flush_interval_s.
        self._marker = RangeMarker(self._compact_every, self._compact, Message) if self.native else None
        self.mark_processed = self._marker if self._marker is not None else self._make_mark_processed()
        self._ledger.write(
            encode_session_start("consumer", self.session_id, self.client_id, now_ms, self.host, self.group)
        )
        self._ledger.write(
            encode_client_record(
                "consumer",
                self.session_id,
                self.client_id,
                self.group,
                libversion()[0],
                self._config,
                self.host,
                now_ms,
            ),
            topic=clients_topic,
        )
        self._ledger.set_checkpoint(self._session_end)
        # Values of ledger records that were not written (served by the ledger producer's
        # reports): their marks are named in a marks-lost record at the next flush.
        self._lost_records: deque[bytes] = deque()
        self._closing_clean = False  # close() settled the ledger: every mark written or named lost
        self._ledger.set_on_lost(self._lost_records.append)
        # An idle consumer's last marks reach the ledger within the flush interval.
        self._ledger.set_before_flush(self._before_flush)
        if transactional:
            HOLDING.add(self)  # last: a producer's abort may reach it at once, from another thread

    # --- processed marks -------------------------------------------------------------------
    # mark_processed(msg): record that the application finished processing ``msg`` (a record,
    # not an event). A closure bound per instance: attribute lookups on self cost more than
    # the rest of the call.
    mark_processed: Callable[[Message], None]

    def _make_mark_processed(self) -> Callable[[Message], None]:
        held = self._held
        hold = held.append
        every = self._compact_every
        compact = self._compact
        since = self._since_ms
        clock = _time_ns

        def mark_processed(msg: Message) -> None:
            """Record that the application finished processing ``msg`` (a record, not an event)."""
            if not held:
                since[0] = clock() // 1_000_000  # the first mark since the buffer emptied
            hold(msg)
            if len(held) >= every:
                compact()

        return mark_processed

    def _hand_marks_over(self) -> None:
        self._compact()

    def _compact(self) -> None:
        """Turn the held marks into range rows for the ledger writer (marking thread or the
        background flush); hand them to the ledger when enough are waiting.

        A range's ``first_ms`` is a lower bound of its marks' times, and readers take it as
        the mark's time: a mark dated before its record existed is dropped as one of a
        truncated log's lost records. It is the later of two bounds:

        * the moment the previous compaction took its marks, read *before* it took them (so
          a mark it left behind was made after it); the background flush calls this every
          ``ledger_flush_interval_s`` even when nothing waits;
        * the clock read by the first mark made into an empty buffer (both paths read it
          once per batch, not per mark). After an idle spell it dates the first new marks at
          their making, not up to a flush interval before (when a record produced and marked
          within that interval could be dated before it existed).

        A mark made into a buffer that a compaction emptied meanwhile carries no reading of
        its own; the compaction's moment, later than the older reading, bounds it."""
        with self._compact_lock:
            taken_ms = _time_ns() // 1_000_000
            if self._marker is not None:
                runs = self._marker.take()
                if not runs:
                    self._compacted_ms = taken_ms
                    return
                now_ms = _time_ns() // 1_000_000
                first_ms = max(self._compacted_ms, self._marker.taken_since_ms() or 0)
                rows = [(topic, partition, first, last, first_ms, now_ms) for topic, partition, first, last in runs]
            else:
                held = self._held
                count = len(held)
                if not count:
                    self._compacted_ms = taken_ms
                    return
                # Pops exactly the marks counted, in order: marks appended meanwhile wait their turn.
                messages = list(starmap(held.popleft, repeat((), count)))
                now_ms = _time_ns() // 1_000_000
                rows = offset_ranges(messages, max(self._compacted_ms, self._since_ms[0]), now_ms)
            self._compacted_ms = taken_ms
            if rows:
                if self._holding:
                    self._held_rows.extend(rows)
                else:
                    self._marks.append(rows)
        if len(self._marks) >= self._chunks_per_record:
            # Bounded batches: holding a second of marks costs more than writing them.
            self._ledger.flush_entries()

    def _before_flush(self) -> None:
        self._compact()
        self._report_lost_marks()

    def _settle_before_end(self) -> None:
        """close()'s last step before the final session-end: every record of the session
        written (waiting up to ledger_flush_timeout_s each time), the marks of those that were
        not named in a written `marks-lost` record. The end says `closed` only when every mark
        of the session is accounted for that way and nothing is left unsent."""
        unsent = self._ledger.flush(self._ledger_flush_timeout_s)
        if self._lost_records:
            self._report_lost_marks()
            unsent = self._ledger.flush(self._ledger_flush_timeout_s)
        self._closing_clean = not unsent and not self._lost_records

    def _report_lost_marks(self) -> None:
        """Name the marks of the ledger records that were not written in one ``marks-lost``
        record, so readers call those offsets unknown rather than unprocessed. If it is not
        written either, its marks come back here and go in the next one: it is written once
        the ledger takes records again."""
        lost = self._lost_records
        count = len(lost)
        if not count:
            return
        ranges: list[tuple[str, int, int, int]] = []
        for value in starmap(lost.popleft, repeat((), count)):
            try:
                record = json.loads(value)
            except ValueError:
                continue
            if not isinstance(record, dict) or record.get("type") not in ("processed-ranges", "marks-lost"):
                continue  # a session start or end: no marks
            ranges.extend((e[0], e[1], e[2], e[3]) for e in record.get("entries", ()))
        if ranges:
            self._ledger.write(
                encode_marks_lost(self.session_id, self.group, _time_ns() // 1_000_000, ranges, self._ledger.last_error)
            )

    # --- transactions: marks wait for the outcome of the one that carries them --------------
    def consumer_group_metadata(self) -> GroupMetadata:
        """The wrapped consumer's group metadata (bytes any producer takes), telling a probed
        producer whose marks its transaction carries."""
        metadata = GroupMetadata(self._consumer.consumer_group_metadata())
        metadata.transaction_marks = self
        return metadata

    def join_transaction(self) -> None:
        """A probed producer sends this consumer's positions to its transaction: hold marks
        from now on (those still buffered included) until the transaction carrying them ends."""
        with self._compact_lock:
            self._holding = self._joined = True
        HOLDING.add(self)

    def note_abort(self, producer: str) -> None:
        """A probed producer is about to abort its transaction. The marks held now that its
        positions did not carry (aborted before send_offsets_to_transaction, or a partition
        whose position it did not send) were of that transaction if it is the producer this
        consumer's positions go to: its next commit carrying them names them aborted instead
        of writing them. Another producer's commit writes them as before."""
        if self._closed:
            return
        self._compact()
        with self._compact_lock:
            aborted_by = [(row, by | {producer}) for row, by in self._held_at_aborts]
            self._held_at_aborts = aborted_by + [(row, frozenset((producer,))) for row in self._held_rows]
            self._held_rows = []

    def end_transaction(self, positions: TransactionPositions, committed: bool, producer: str) -> None:
        """The transaction that carried ``positions`` committed (its marks below them are
        written) or aborted (they are named in a ``marks-aborted`` record). Marks of
        partitions it did not carry, and at or past its positions, wait for a later one."""
        self._compact()
        with self._compact_lock:
            # In marking order: the rows held across aborts are the older ones.
            of_its_aborts: list[ProcessedRangeRow] = []  # held when this producer aborted: of that transaction
            inside: list[ProcessedRangeRow] = []
            kept: list[tuple[ProcessedRangeRow, frozenset[str]]] = []
            for row, by in self._held_at_aborts:
                carried, rest = split_at_positions([row], positions)
                (of_its_aborts if producer in by else inside).extend(carried)
                kept.extend((later, by) for later in rest)
            self._held_at_aborts = kept
            carried, self._held_rows = split_at_positions(self._held_rows, positions)
            inside.extend(carried)
            written = inside if committed else []
            aborted = of_its_aborts if committed else of_its_aborts + inside
            if written:
                self._marks.append(merge_ranges([[row] for row in written]))  # one entry per run
        if written:
            self._ledger.flush_entries()
        if aborted:
            now_ms = _time_ns() // 1_000_000
            self._ledger.write(encode_marks_aborted(self.session_id, self.group, now_ms, producer, _ranges(aborted)))

    def _release_held_marks(self, closing: bool = False) -> None:
        """The consumer commits offsets itself: the marks held are written. At close, the marks
        of a transaction that has not ended are named in a ``marks-lost`` record: processed,
        with an outcome nobody can tell (not unprocessed, nor a processing)."""
        if not self._holding:
            return  # nothing held (a consumer whose positions never went to a transaction): no cost on its commits
        self._compact()
        with self._compact_lock:
            held = [row for row, _ in self._held_at_aborts] + self._held_rows  # in marking order
            self._held_rows, self._held_at_aborts = [], []
            if not held:
                return
            if not (closing and self._joined):
                self._marks.append(merge_ranges([[row] for row in held]))  # one entry per run
                return
        ranges = _ranges(held)
        reason = "closed before the transaction carrying these marks ended"
        self._ledger.write(encode_marks_lost(self.session_id, self.group, _time_ns() // 1_000_000, ranges, reason))

    def _observe_ranges(self, rows: list[Any]) -> None:
        last = self._last_offsets
        for topic, partition, _, offset, _, _ in rows:
            offsets = last.get(topic)
            if offsets is None:
                offsets = last[topic] = {}
            offsets[partition] = offset
            self._processed += 1

    def last_offsets(self) -> dict[str, dict[int, int]]:
        """Per topic and partition, the offset of the last mark handed to the ledger."""
        return {topic: dict(offsets) for topic, offsets in dict(self._last_offsets).items()}

    def _session_end(self, force: bool) -> bytes | None:
        # Runs under the ledger's write lock after its drain: last_offsets covers exactly
        # the marks written before this record.
        state = self.last_offsets()
        if not force and state == self._last_checkpoint:
            return None
        self._last_checkpoint = state
        return encode_session_end(
            "consumer",
            self.session_id,
            _time_ns() // 1_000_000,
            group=self.group,
            last_offset=state,
            # close()'s last record, once every earlier one was written (_settle_before_end): a
            # session whose ledger ends without it died (kill -9, a crash) with the marks it had
            # not written yet, or could not write them all
            closed=force and self._closing_clean,
        )

    # --- introspection -------------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        marker = self._marker
        pending = {"marks_pending": len(self._held)} if marker is None else {
            "marks_pending": len(marker), "runs_pending": marker.runs_waiting()
        }  # fmt: skip
        return {"processed_ranges": self._processed, **pending, **self._ledger.stats()}
