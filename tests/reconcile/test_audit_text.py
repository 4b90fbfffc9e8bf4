"""spark_jobs.reconcile_helpers.audit_text against the definition it shares with the probes,
auditor.probes.headers.decode_audit_id (Python's UTF-8 decoder with backslash escapes)."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from auditor.probes.headers import decode_audit_id
from spark_jobs.reconcile_helpers import audit_text

pytestmark = pytest.mark.integration

EDGES = [
    b"",
    b"ticket-15",
    "ü€𐍈".encode(),
    b"\xff",
    b"\xe2\x82",  # a truncated sequence
    b"\xe2\x82A",
    b"\xed\xa0\x80",  # a surrogate
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xc0\xaf",  # overlong
    b"a\\xffb",  # text that looks like an escape
    b"\x00\x1f\x7f",
]


def test_it_reads_every_byte_string_as_the_probes_name_it(spark: SparkSession) -> None:
    rng = random.Random(70)
    samples = EDGES + [rng.randbytes(rng.randint(1, 24)) for _ in range(2000)] + [None]
    frame = spark.createDataFrame([(i, s) for i, s in enumerate(samples)], "i int, raw binary")
    read = dict(frame.select("i", audit_text(F.col("raw")).alias("text")).collect())
    assert [read[i] for i in range(len(samples))] == [None if s is None else decode_audit_id(s) for s in samples]
