"""The zone a reconciliation run reads a created column without a time zone in (real
PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from auditor.pipelines.source_zone import NOT_NEEDED, SourceZoneError, source_zone

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@pytest.fixture
def tables(source_database_url: str) -> Iterator[dict[str, str]]:
    names = {"naive": f"zn_{uuid.uuid4().hex[:8]}", "aware": f"za_{uuid.uuid4().hex[:8]}"}
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {names['naive']} (id bigint, created_at timestamp(3))")
        conn.execute(f"CREATE TABLE {names['aware']} (id bigint, created_at timestamptz)")
        server_zone = str(conn.execute("SHOW TimeZone").fetchone()[0])  # type: ignore[index]
    yield names | {"server": server_zone}
    with psycopg.connect(source_database_url, autocommit=True) as conn:
        for name in (names["naive"], names["aware"]):
            conn.execute(f"DROP TABLE IF EXISTS {name}")


def test_a_naive_column_is_read_in_the_bindings_zone_or_else_the_databases(make_binding, tables) -> None:
    unnamed = make_binding(f"z1-{uuid.uuid4().hex[:6]}", "t", f"public.{tables['naive']}")
    assert source_zone(unnamed) == tables["server"]
    named = make_binding(f"z2-{uuid.uuid4().hex[:6]}", "t", f"public.{tables['naive']}", timestamp_zone="Asia/Tokyo")
    assert source_zone(named) == "Asia/Tokyo"


def test_a_column_with_a_time_zone_needs_none_whatever_the_binding_says(make_binding, tables) -> None:
    named = make_binding(f"z3-{uuid.uuid4().hex[:6]}", "t", tables["aware"], timestamp_zone="Asia/Tokyo")
    assert source_zone(named) == NOT_NEEDED


def test_an_unreadable_source_fails_the_run_instead_of_guessing_utc(make_binding, tables) -> None:
    away = make_binding(
        f"z4-{uuid.uuid4().hex[:6]}", "t", tables["naive"], source_url="postgresql://app:pw@127.0.0.1:1/app"
    )
    with pytest.raises(SourceZoneError, match=r"could not be read from source"):
        source_zone(away, timeout_s=1)
