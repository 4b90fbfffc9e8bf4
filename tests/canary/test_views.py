"""The /canary/ page and its JSON, the minute store and its live push."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.utils import timezone

from auditor.accounts.roles import grant_role
from auditor.canary.accounting import DeliveryCounts
from auditor.canary.models import CanaryPoint
from auditor.canary.store import record_minute

pytestmark = pytest.mark.django_db

HOSTILE = '<img src=x onerror="alert(1)">'


def make_points(topic: str, minutes: int = 3, partitions: int = 3, session: str = "s" * 32, **where: str) -> datetime:
    now = timezone.now().replace(second=0, microsecond=0)
    for m in range(minutes):
        for p in range(partitions):
            CanaryPoint.objects.create(
                **where,
                session=session,
                topic=topic,
                minute=now - timedelta(minutes=minutes - m),
                partition=p,
                leader=p % 2 + 1,
                sent=600,
                received=600 - (p == 0),
                lost=int(p == 0),
                duplicated=0,
                p50_ms=2.0,
                p99_ms=9.5 + m,
                max_ms=20.0,
            )
    return now


@pytest.fixture
def user_client(client):
    user = get_user_model().objects.create_user(username=f"u-{uuid.uuid4().hex[:6]}", password="pw-long-enough")
    grant_role(user, "viewer")  # roles gate every page
    client.force_login(user)
    return client


def embedded_data(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="canary-data" type="application/json">') + len(
        '<script id="canary-data" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def test_it_requires_a_login(client):
    response = client.get("/canary/")
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_it_embeds_the_points_of_the_chosen_topic_and_window(user_client):
    make_points("canary-a")
    make_points("canary-b", partitions=1)
    CanaryPoint.objects.create(session="old", topic="canary-a", minute=timezone.now() - timedelta(hours=3), partition=0)

    response = user_client.get("/canary/", {"topic": "canary-a"})
    assert response.status_code == 200
    data = embedded_data(response)
    assert data["topic"] == "canary-a"
    assert len(data["points"]) == 9  # the 3-hour-old point is outside the default hour
    assert {p["partition"] for p in data["points"]} == {0, 1, 2}
    assert sum(p["lost"] for p in data["points"]) == 3
    assert b"plotly.min.js" in response.content
    assert b'id="chart-partition-lost"' in response.content and b'id="chart-broker-p99"' in response.content

    wide = embedded_data(user_client.get("/canary/", {"topic": "canary-a", "minutes": "240"}))
    assert len(wide["points"]) == 10


def test_it_shows_one_cluster_of_a_topic_at_a_time(user_client, settings):
    # Three canaries on one topic name: the default cluster (servers recorded or not), a named
    # cluster and other servers; each loses one record per minute on partition 0.
    topic = f"canary-{uuid.uuid4().hex[:6]}"
    make_points(topic, session="a" * 32)
    make_points(topic, session="b" * 32, bootstrap_servers=settings.KAFKA_BOOTSTRAP_SERVERS)
    make_points(topic, session="c" * 32, cluster="east", bootstrap_servers="east-1:9092")
    make_points(topic, session="d" * 32, bootstrap_servers="West-1:9092")

    default = embedded_data(user_client.get("/canary/", {"topic": topic}))
    assert default["cluster"] == ""
    assert {p["session"] for p in default["points"]} == {"a" * 32, "b" * 32}
    assert sum(p["lost"] for p in default["points"]) == 6

    response = user_client.get("/canary/", {"topic": topic, "cluster": "east"})
    east = embedded_data(response)
    assert (east["cluster"], {p["session"] for p in east["points"]}) == ("east", {"c" * 32})
    assert {p["scope"] for p in east["points"]} == {"east"}
    html = response.content.decode()
    for scope in ("east", "servers=west-1:9092"):
        assert f'<option value="{scope}"' in html
    assert '<option value="east" selected>' in html

    west = user_client.get("/canary/api/points/", {"topic": topic, "cluster": "servers=west-1:9092"}).json()
    assert {p["session"] for p in west["points"]} == {"d" * 32}
    assert embedded_data(user_client.get("/canary/", {"topic": topic, "cluster": "nowhere"}))["points"] == []


def test_it_shows_the_cluster_that_ran_on_the_topic_by_default(user_client):
    topic = f"canary-{uuid.uuid4().hex[:6]}"
    make_points(topic, cluster="east")
    assert embedded_data(user_client.get("/canary/", {"topic": topic}))["cluster"] == "east"


def test_it_shows_the_most_recent_topic_by_default(user_client):
    make_points("canary-recent", partitions=1)
    data = embedded_data(user_client.get("/canary/"))
    assert data["topic"] == "canary-recent"


def test_it_escapes_names_it_did_not_write(user_client):
    make_points(HOSTILE, minutes=1, partitions=1)
    response = user_client.get("/canary/", {"topic": HOSTILE})
    assert HOSTILE.encode() not in response.content
    assert embedded_data(response)["topic"] == HOSTILE


def test_it_serves_the_points_as_json(user_client):
    make_points("canary-json", minutes=2, partitions=2)
    response = user_client.get("/canary/api/points/", {"topic": "canary-json", "minutes": "nonsense"})
    assert response.status_code == 200
    body = response.json()
    assert (body["topic"], body["minutes"], len(body["points"])) == ("canary-json", 60, 4)


def test_it_stores_a_minute_and_pushes_it_after_the_commit(django_capture_on_commit_callbacks):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("canary", channel)
    counts = {0: DeliveryCounts(sent=10, received=9, lost=1), 1: DeliveryCounts(sent=10, received=10, duplicated=2)}
    counts[1].latency.add(4.0)
    minute = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
    topic = f"canary-push-{uuid.uuid4().hex[:6]}"
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            record_minute("f" * 32, topic, minute, counts, {0: 1, 1: -1})
            assert CanaryPoint.objects.filter(topic=topic).count() == 2
        assert len(callbacks) == 1

        def next_event() -> dict:
            while True:
                message = async_to_sync(layer.receive)(channel)
                if message["payload"].get("topic") == topic:
                    return message

        message = next_event()
    finally:
        async_to_sync(layer.group_discard)("canary", channel)
    assert (message["group"], message["event"]) == ("canary", "points")
    by_partition = {p["partition"]: p for p in message["payload"]["points"]}
    assert by_partition[0]["lost"] == 1 and by_partition[0]["leader"] == 1
    assert by_partition[1]["duplicated"] == 2 and by_partition[1]["leader"] is None  # -1: no leader
    assert by_partition[1]["p99_ms"] == 4.0 and by_partition[0]["p99_ms"] is None
    assert by_partition[0]["minute"] == "2024-05-01T12:30:00+00:00"
