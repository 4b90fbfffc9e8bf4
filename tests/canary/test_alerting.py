"""Canary minutes raise and resolve webhook alerts (canary:loss, canary:latency) per topic partition.

Minutes are closed by the real CanaryService._close_minute over a real CanaryAccounting,
and the alerts reach a real HTTP receiver on loopback.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import KafkaError, KafkaException
from django.conf import settings

from auditor.alerts.delivery import deliver
from auditor.alerts.models import Alert, Delivery
from auditor.canary.accounting import CanaryAccounting
from auditor.canary.alerting import fingerprint
from auditor.canary.models import CanaryPoint
from auditor.canary.payload import CanaryRecord
from auditor.canary.runner import CanaryOptions, CanaryService

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

MINUTE_MS = 60_000
START_S = datetime(2031, 1, 1, 9, 0, tzinfo=UTC).timestamp()


class NoMetadata:
    """An admin client whose cluster does not answer: the leaders stay as they were."""

    def list_topics(self, *args: object, **kwargs: object) -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))


class Minutes:
    """Drives one canary session minute by minute; times are ms into the session."""

    def __init__(self, topic: str, partitions: int = 2, cluster: str = "", bootstrap_servers: str = "") -> None:
        options = CanaryOptions(
            bootstrap_servers=bootstrap_servers or settings.KAFKA_BOOTSTRAP_SERVERS,
            topic=topic,
            sla_s=1.0,
            cluster=cluster,
        )
        self.service = CanaryService(options)
        self.accounting = CanaryAccounting(self.service.session, list(range(partitions)), sla_ms=1000)
        self.minute = 0

    def traffic(
        self, partition: int, sent: int, received: int, latency_ms: float = 5.0, leader: int | None = None
    ) -> None:
        base = START_S * 1000 + self.minute * MINUTE_MS
        records: list[CanaryRecord] = []
        for i in range(sent):
            record = self.accounting.next_record(partition, base + i)
            self.accounting.record_sent(record, leader)
            self.accounting.record_acked(partition, record.seq, record.sent_ms)
            records.append(record)
        for record in records[:received]:
            self.accounting.record_received(record, partition, record.sent_ms + latency_ms)

    def close(self) -> list[CanaryPoint]:
        """Expire what is overdue, then close the minute as the service's loop does."""
        start_s = START_S + self.minute * 60
        self.accounting.expire((start_s + 59) * 1000)
        self.service._close_minute(NoMetadata(), self.accounting, {0: 1, 1: 2}, start_s, partial=False)
        self.minute += 1
        return list(
            CanaryPoint.objects.filter(session=self.service.session, minute__gte=datetime.fromtimestamp(start_s, UTC))
        )


def deliver_pending() -> list[Delivery]:
    """What the Celery task does for each delivery once the transaction commits."""
    ids = Delivery.objects.filter(status=Delivery.PENDING).order_by("pk").values_list("pk", flat=True)
    return [deliver(pk) for pk in list(ids)]


@pytest.fixture
def topic() -> str:
    return f"canary-alert-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def channel(webhook_settings, make_channel):
    webhook_settings.AUDITOR_CANARY_LATENCY_ALERT_MS = 100
    return make_channel(events={"canary_loss": 1, "canary_latency_ms": 50})


def test_it_opens_one_alert_for_a_lossy_partition_and_resolves_it_on_a_clean_minute(channel, receiver, topic):
    minutes = Minutes(topic)
    minutes.traffic(0, sent=5, received=2)
    minutes.traffic(1, sent=5, received=5)
    points = minutes.close()
    assert sorted((p.partition, p.lost) for p in points) == [(0, 3), (1, 0)]

    [alert] = Alert.objects.filter(channel=channel)
    assert (alert.kind, alert.fingerprint, alert.state) == ("canary:loss", f"canary:loss:{topic}/0", "open")
    assert alert.summary == (
        f"canary lost 3 record(s) on {topic}/0 of {settings.KAFKA_BOOTSTRAP_SERVERS} "
        "in minute 2031-01-01 09:00 UTC, leader broker 1"
    )
    deliver_pending()
    [opened] = receiver.received
    body = opened.json()
    assert opened.signature_valid and body["event"] == "opened" and body["kind"] == "canary:loss"
    assert (body["details"]["topic"], body["details"]["partition"], body["details"]["lost"]) == (topic, 0, 3)

    minutes.traffic(0, sent=4, received=1)  # still losing: folded, no second delivery
    minutes.close()
    alert.refresh_from_db()
    assert (alert.count, alert.state, alert.details["lost"]) == (2, "open", 3)
    assert deliver_pending() == []

    minutes.traffic(0, sent=5, received=5)
    minutes.close()
    alert.refresh_from_db()
    assert alert.state == "resolved"
    deliver_pending()
    assert [r.json()["event"] for r in receiver.received] == ["opened", "resolved"]
    assert receiver.received[1].json()["fingerprint"] == f"canary:loss:{topic}/0"
    assert Alert.objects.filter(channel=channel).count() == 1


def test_it_leaves_the_alert_open_through_a_minute_that_observed_nothing(channel, receiver, topic):
    minutes = Minutes(topic, partitions=1)
    minutes.traffic(0, sent=3, received=0)
    minutes.close()
    minutes.close()  # nothing sent, received or lost: no evidence that the loss stopped
    [alert] = Alert.objects.filter(channel=channel)
    assert (alert.state, alert.count) == ("open", 1)
    minutes.traffic(0, sent=3, received=3)
    minutes.close()
    alert.refresh_from_db()
    assert alert.state == "resolved"


def test_it_raises_latency_over_the_threshold_and_resolves_below_it(channel, receiver, topic):
    minutes = Minutes(topic, partitions=1)
    minutes.traffic(0, sent=10, received=10, latency_ms=250.0)
    minutes.close()
    [alert] = Alert.objects.filter(channel=channel)
    assert (alert.kind, alert.fingerprint) == ("canary:latency", f"canary:latency:{topic}/0")
    assert (alert.details["latency_ms"], alert.details["threshold_ms"]) == (250.0, 100.0)
    minutes.traffic(0, sent=10, received=10, latency_ms=20.0)
    minutes.close()
    alert.refresh_from_db()
    assert alert.state == "resolved"
    deliver_pending()
    assert [r.json()["event"] for r in receiver.received] == ["opened", "resolved"]
    assert all(r.signature_valid for r in receiver.received)


def test_it_keeps_latency_under_the_threshold_quiet(channel, receiver, topic):
    minutes = Minutes(topic, partitions=1)
    minutes.traffic(0, sent=10, received=10, latency_ms=99.0)  # the channel would take it; the setting is 100
    minutes.close()
    assert not Alert.objects.filter(fingerprint__contains=topic).exists()


def test_it_shortens_the_fingerprint_of_a_very_long_topic():
    long_topic = "t" * 249
    key = fingerprint("loss", long_topic, 7)
    assert len(key) <= 200 and key.startswith("canary:loss:ttt") and key.endswith("/7")
    assert key != fingerprint("loss", long_topic[:-1] + "u", 7)
    scoped = fingerprint("loss", long_topic, 7, "c" * 100)
    assert len(scoped) <= 200 and scoped != fingerprint("loss", long_topic, 7, "c" * 99 + "d")


def test_it_keeps_canaries_on_different_clusters_apart(channel, receiver, topic):
    on_a = Minutes(topic, partitions=1, cluster="cluster-a", bootstrap_servers="127.0.0.1:1")
    on_b = Minutes(topic, partitions=1, cluster="cluster-b", bootstrap_servers="127.0.0.1:2")
    on_a.traffic(0, sent=5, received=2)
    on_a.close()
    on_b.traffic(0, sent=5, received=5)  # a clean minute on another cluster is no evidence about a
    on_b.close()

    [alert] = Alert.objects.filter(channel=channel)
    assert (alert.fingerprint, alert.state) == (f"canary:loss:cluster-a:{topic}/0", "open")
    assert f"{topic}/0 of cluster cluster-a in minute" in alert.summary
    assert (alert.details["cluster"], alert.details["bootstrap_servers"]) == ("cluster-a", "127.0.0.1:1")

    on_a.traffic(0, sent=5, received=5)
    on_a.close()
    alert.refresh_from_db()
    assert alert.state == "resolved"


def test_it_tells_unnamed_canaries_apart_by_their_bootstrap_servers(channel, receiver, topic):
    default = Minutes(topic, partitions=1)
    other = Minutes(topic, partitions=1, bootstrap_servers="Kafka-2:9092, kafka-1:9092")
    default.traffic(0, sent=5, received=2)
    default.close()
    other.traffic(0, sent=5, received=1)
    other.close()
    alerts = Alert.objects.filter(channel=channel).order_by("pk")
    assert [(a.fingerprint, a.state) for a in alerts] == [
        (f"canary:loss:{topic}/0", "open"),  # the default cluster's, as before clusters were told apart
        (f"canary:loss:servers=kafka-1:9092,kafka-2:9092:{topic}/0", "open"),
    ]


def test_it_names_the_leader_the_lost_records_were_sent_to_not_the_one_at_minute_close(channel, receiver, topic):
    minutes = Minutes(topic, partitions=1)
    minutes.traffic(0, sent=5, received=2, leader=3)  # broker 3 took them; broker 1 leads when the minute closes
    [point] = minutes.close()
    assert (point.leader, point.lost, point.lost_leaders) == (1, 3, {"3": 3})
    [alert] = Alert.objects.filter(channel=channel)
    assert alert.summary == (
        f"canary lost 3 record(s) sent to leader broker 3 on {topic}/0 of {settings.KAFKA_BOOTSTRAP_SERVERS} "
        "in minute 2031-01-01 09:00 UTC"
    )
    assert alert.details["lost_leaders"] == {"3": 3}


def test_records_read_and_then_cut_from_the_log_raise_the_loss_alert(channel, receiver, topic):
    minutes = Minutes(topic, partitions=1)
    sent = []
    for n in range(4):
        record = minutes.accounting.next_record(0, (START_S + 1) * 1000 + n)
        minutes.accounting.record_sent(record, 1)
        minutes.accounting.record_acked(0, record.seq, record.sent_ms)
        sent.append(record)
    for offset, record in enumerate(sent[:3]):  # read at offsets 0-2
        minutes.accounting.record_received(record, 0, record.sent_ms + 5, offset=offset)
    minutes.accounting.record_received(sent[3], 0, sent[3].sent_ms + 5, offset=1)  # the log was cut at 1
    [point] = minutes.close()
    assert (point.lost, point.truncated, point.received) == (0, 2, 4)
    [alert] = Alert.objects.filter(channel=channel)
    assert (alert.kind, alert.state, alert.details["truncated"]) == ("canary:loss", "open", 2)
    assert alert.summary.startswith(f"canary saw 2 record(s) it had read cut from the log on {topic}/0")
