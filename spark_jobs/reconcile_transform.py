"""Pure transforms of the reconciliation job: DataFrames in, DataFrames out, no I/O.

Split by concern, re-exported here for the job and its callers:
- reconcile_schemas: schemas and vocabulary;
- reconcile_helpers: frame helpers and interval algebra;
- reconcile_parsing: records and their audit headers, source rows, the ledgers;
- reconcile_updates: state updates `transform_*`: (previous state, this run's new data) →
  next state. A full run is the same code with an empty previous state, so incremental and
  full runs agree;
- reconcile_findings: findings `find_*`: state → findings frames in FINDING_SCHEMA.

Keys are compared as strings: the source key column is cast to string, record keys are
decoded as UTF-8.
"""

from __future__ import annotations

from spark_jobs.reconcile_findings import (
    acks_maybe_held as acks_maybe_held,
)
from spark_jobs.reconcile_findings import (
    find_aborted as find_aborted,
)
from spark_jobs.reconcile_findings import (
    find_duplicates as find_duplicates,
)
from spark_jobs.reconcile_findings import (
    find_gaps as find_gaps,
)
from spark_jobs.reconcile_findings import (
    find_missing as find_missing,
)
from spark_jobs.reconcile_findings import (
    find_orphans as find_orphans,
)
from spark_jobs.reconcile_findings import (
    find_reprocessed as find_reprocessed,
)
from spark_jobs.reconcile_findings import (
    find_unprocessed as find_unprocessed,
)
from spark_jobs.reconcile_findings import (
    sends_unjudged as sends_unjudged,
)
from spark_jobs.reconcile_findings import (
    union_findings as union_findings,
)
from spark_jobs.reconcile_findings import (
    unverifiable_rows as unverifiable_rows,
)
from spark_jobs.reconcile_helpers import (
    RANGE_BUCKET as RANGE_BUCKET,
)
from spark_jobs.reconcile_helpers import (
    conform as conform,
)
from spark_jobs.reconcile_helpers import (
    empty_frame as empty_frame,
)
from spark_jobs.reconcile_helpers import (
    interval_holes as interval_holes,
)
from spark_jobs.reconcile_helpers import (
    is_empty_plan as is_empty_plan,
)
from spark_jobs.reconcile_helpers import (
    local_frame as local_frame,
)
from spark_jobs.reconcile_helpers import (
    merge_intervals as merge_intervals,
)
from spark_jobs.reconcile_helpers import (
    range_anti as range_anti,
)
from spark_jobs.reconcile_helpers import (
    record_key_expression as record_key_expression,
)
from spark_jobs.reconcile_helpers import (
    values_to_intervals as values_to_intervals,
)
from spark_jobs.reconcile_parsing import (
    AUDIT_HEADERS as AUDIT_HEADERS,
)
from spark_jobs.reconcile_parsing import (
    AUDIT_V2_HEADER as AUDIT_V2_HEADER,
)
from spark_jobs.reconcile_parsing import (
    AUDIT_V2_SIZE as AUDIT_V2_SIZE,
)
from spark_jobs.reconcile_parsing import (
    HEADERS_MALFORMED as HEADERS_MALFORMED,
)
from spark_jobs.reconcile_parsing import (
    HEADERS_MISSING as HEADERS_MISSING,
)
from spark_jobs.reconcile_parsing import (
    HEADERS_OK as HEADERS_OK,
)
from spark_jobs.reconcile_parsing import (
    RECORD_COUNTS as RECORD_COUNTS,
)
from spark_jobs.reconcile_parsing import (
    attach_keys as attach_keys,
)
from spark_jobs.reconcile_parsing import (
    audit_header_status as audit_header_status,
)
from spark_jobs.reconcile_parsing import (
    audit_seq as audit_seq,
)
from spark_jobs.reconcile_parsing import (
    audit_session as audit_session,
)
from spark_jobs.reconcile_parsing import (
    header_problem_counts as header_problem_counts,
)
from spark_jobs.reconcile_parsing import (
    transform_aborted as transform_aborted,
)
from spark_jobs.reconcile_parsing import (
    transform_consumer_ledger as transform_consumer_ledger,
)
from spark_jobs.reconcile_parsing import (
    transform_lost_marks as transform_lost_marks,
)
from spark_jobs.reconcile_parsing import (
    transform_producer_failures as transform_producer_failures,
)
from spark_jobs.reconcile_parsing import (
    transform_producer_keys as transform_producer_keys,
)
from spark_jobs.reconcile_parsing import (
    transform_producer_ledger as transform_producer_ledger,
)
from spark_jobs.reconcile_parsing import (
    transform_records as transform_records,
)
from spark_jobs.reconcile_parsing import (
    transform_source_rows as transform_source_rows,
)
from spark_jobs.reconcile_schemas import (
    ABORTED_SCHEMA as ABORTED_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    ACKED_RANGE as ACKED_RANGE,
)
from spark_jobs.reconcile_schemas import (
    CANDIDATE_SCHEMA as CANDIDATE_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    COMMITTED_SCHEMA as COMMITTED_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    FINDING_KINDS as FINDING_KINDS,
)
from spark_jobs.reconcile_schemas import (
    FINDING_SCHEMA as FINDING_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    INTERVAL_SCHEMA as INTERVAL_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    KAFKA_RAW_SCHEMA as KAFKA_RAW_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    KEY_INDEX_SCHEMA as KEY_INDEX_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    KEYED as KEYED,
)
from spark_jobs.reconcile_schemas import (
    LEDGER_BOUND_SCHEMA as LEDGER_BOUND_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    LEDGER_ENTRY_SCHEMA as LEDGER_ENTRY_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    LOST_MARKS_SCHEMA as LOST_MARKS_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    LOST_SIGHTING_SCHEMA as LOST_SIGHTING_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    OFFSET_STRUCT as OFFSET_STRUCT,
)
from spark_jobs.reconcile_schemas import (
    PROCESSED_INTERVAL_SCHEMA as PROCESSED_INTERVAL_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    PROCESSED_SCHEMA as PROCESSED_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    RECORD_SCHEMA as RECORD_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    REPROCESSED_SCHEMA as REPROCESSED_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    SENT as SENT,
)
from spark_jobs.reconcile_schemas import (
    SEQ_TIMES_SCHEMA as SEQ_TIMES_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    SOURCE_ROW_SCHEMA as SOURCE_ROW_SCHEMA,
)
from spark_jobs.reconcile_schemas import (
    UNVERIFIABLE as UNVERIFIABLE,
)
from spark_jobs.reconcile_schemas import (
    WATERMARK_SCHEMA as WATERMARK_SCHEMA,
)
from spark_jobs.reconcile_updates import (
    duplicates_of as duplicates_of,
)
from spark_jobs.reconcile_updates import (
    key_delta_of as key_delta_of,
)
from spark_jobs.reconcile_updates import (
    keyed_by_memory as keyed_by_memory,
)
from spark_jobs.reconcile_updates import (
    new_source_of as new_source_of,
)
from spark_jobs.reconcile_updates import (
    orphan_candidates_of as orphan_candidates_of,
)
from spark_jobs.reconcile_updates import (
    pending_of as pending_of,
)
from spark_jobs.reconcile_updates import (
    transform_duplicate_records as transform_duplicate_records,
)
from spark_jobs.reconcile_updates import (
    transform_key_stats as transform_key_stats,
)
from spark_jobs.reconcile_updates import (
    transform_key_table as transform_key_table,
)
from spark_jobs.reconcile_updates import (
    transform_ledger_bounds as transform_ledger_bounds,
)
from spark_jobs.reconcile_updates import (
    transform_ledger_open as transform_ledger_open,
)
from spark_jobs.reconcile_updates import (
    transform_lost_marks_coverage as transform_lost_marks_coverage,
)
from spark_jobs.reconcile_updates import (
    transform_lost_sightings as transform_lost_sightings,
)
from spark_jobs.reconcile_updates import (
    transform_orphan_candidates as transform_orphan_candidates,
)
from spark_jobs.reconcile_updates import (
    transform_pending_source as transform_pending_source,
)
from spark_jobs.reconcile_updates import (
    transform_processed_coverage as transform_processed_coverage,
)
from spark_jobs.reconcile_updates import (
    transform_rebuild_memory as transform_rebuild_memory,
)
from spark_jobs.reconcile_updates import (
    transform_reprocessed as transform_reprocessed,
)
from spark_jobs.reconcile_updates import (
    transform_seq_coverage as transform_seq_coverage,
)
from spark_jobs.reconcile_updates import (
    transform_seq_times as transform_seq_times,
)
from spark_jobs.reconcile_updates import (
    transform_touched_keys as transform_touched_keys,
)
from spark_jobs.reconcile_updates import (
    transform_unprocessed_candidates as transform_unprocessed_candidates,
)
