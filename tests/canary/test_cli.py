"""`audit canary` against the real broker: a healthy run, losses, duplicates, restarts, SIGTERM."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from django.core.management import CommandError, call_command

from auditor.alerts.models import Alert
from auditor.canary.alerting import fingerprint
from auditor.canary.models import CanaryPoint
from auditor.canary.payload import decode_record
from tests.support.canary import Background, delete_first_records, high_watermark, watermark_reader
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def assert_clean(counts: dict[str, Any]) -> None:
    assert (counts["lost"], counts["duplicated"], counts["out_of_order"], counts["late"]) == (0, 0, 0, 0), counts


def test_it_reports_no_loss_or_duplicates_on_a_healthy_cluster(run_canary, canary_topic, kafka_brokers):
    result = run_canary(canary_topic, "--duration", "6", "--rate", "50", "--sla", "2")

    partitions = max(3, kafka_brokers)
    assert sorted(result["partitions"]) == [str(p) for p in range(partitions)]
    totals = result["totals"]
    assert_clean(totals)
    assert totals["sent"] >= 0.8 * 6 * 50 * partitions
    assert totals["received"] + totals["pending"] == totals["sent"]
    assert totals["pending"] == 0  # the end of the run waits for records in flight
    assert (totals["other_sessions"], totals["invalid"]) == (0, 0)
    assert 0 < totals["p50_ms"] <= totals["p99_ms"] <= totals["max_ms"] < 2000
    for counts in result["partitions"].values():
        assert_clean(counts)
        assert counts["sent"] > 0
    assert result["brokers_leading_nothing"] == []
    assert set(result["brokers"]) == {c["leader"] for c in result["partitions"].values()}

    points = CanaryPoint.objects.filter(topic=canary_topic, session=result["session"])
    assert {p.partition for p in points} == set(range(partitions))
    assert sum(p.sent for p in points) == totals["sent"]
    assert sum(p.received for p in points) == totals["received"]
    assert sum(p.lost + p.duplicated + p.out_of_order for p in points) == 0
    assert all(p.leader in result["brokers"] for p in points)
    assert all(p.p50_ms <= p.p99_ms <= p.max_ms for p in points if p.received)


def test_it_reports_deleted_records_as_lost_and_an_injected_copy_as_a_duplicate(
    run_canary, make_topic, kafka_admin, kafka_bootstrap, kafka_brokers
):
    topic = make_topic("canary-faults", partitions=max(3, kafka_brokers), replication_factor=min(3, kafka_brokers))

    def inject_a_copy_on_partition_1() -> None:
        reader = Consumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": f"t-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}
        )
        reader.assign([TopicPartition(topic, 1, 0)])
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                msg = reader.poll(0.2)
                if msg is not None and not msg.error() and decode_record(msg.value()) is not None:
                    producer = Producer({"bootstrap.servers": kafka_bootstrap})
                    producer.produce(topic, value=msg.value(), partition=1)
                    assert producer.flush(10) == 0
                    return
            raise AssertionError("no canary record on partition 1 to copy")
        finally:
            reader.close()

    deleter = Background(lambda: delete_first_records(kafka_bootstrap, kafka_admin, topic))
    injector = Background(inject_a_copy_on_partition_1)
    deleter.start()
    injector.start()
    result = run_canary(topic, "--duration", "7", "--rate", "50", "--sla", "4", "--consumer-delay", "3")
    deleted = deleter.join_checked()
    injector.join_checked()

    lossy, copied = result["partitions"]["0"], result["partitions"]["1"]
    # Every deleted record, each reported only after its SLA (0 here: deleted after the consumer read them).
    assert lossy["lost"] == deleted > 0, (lossy, deleted)
    assert (lossy["duplicated"], lossy["late"]) == (0, 0)
    assert copied["duplicated"] == 1
    assert (copied["lost"], copied["out_of_order"]) == (0, 0)
    for partition, counts in result["partitions"].items():
        if partition not in {"0", "1"}:
            assert_clean(counts)
    assert result["totals"]["lost"] == deleted
    assert result["totals"]["duplicated"] == 1

    points = CanaryPoint.objects.filter(topic=topic, session=result["session"])
    assert sum(p.lost for p in points if p.partition == 0) == deleted
    assert sum(p.duplicated for p in points if p.partition == 1) == 1


def test_it_counts_records_the_broker_rejected_as_produce_errors_not_as_lost(
    run_canary, make_topic, make_channel, kafka_brokers, caplog
):
    # Every canary record is larger than the topic accepts: the broker never takes one,
    # so nothing can have been lost by Kafka, however long the SLA has run out.
    channel = make_channel(events={"canary_loss": 1})
    partitions = max(3, kafka_brokers)
    topic = make_topic(
        "canary-rejected",
        partitions=partitions,
        replication_factor=min(3, kafka_brokers),
        config={"max.message.bytes": "60"},
    )

    caplog.set_level(logging.WARNING, logger="auditor.canary.runner")
    result = run_canary(topic, "--duration", "4", "--rate", "20", "--sla", "1")

    totals = result["totals"]
    assert totals["sent"] > 0
    assert (totals["lost"], totals["received"], totals["late"]) == (0, 0, 0), totals
    assert totals["produce_errors"] == totals["sent"], totals
    assert totals["pending"] == 0
    points = CanaryPoint.objects.filter(topic=topic, session=result["session"])
    assert sum(p.lost for p in points) == 0
    assert sum(p.produce_errors for p in points) == totals["sent"]
    open_loss = Alert.objects.filter(channel=channel, kind="canary:loss", state=Alert.OPEN)
    assert not open_loss.exists(), [a.summary for a in open_loss]
    assert fingerprint("loss", topic, 0) not in {a.fingerprint for a in Alert.objects.filter(channel=channel)}
    # Every send failed, but the log says so once per partition (and once more at the end, with the count).
    failed = [r.getMessage() for r in caplog.records if "failed:" in r.getMessage()]
    assert len(failed) <= 2 * partitions < totals["sent"], failed
    assert {f"canary record to {topic}/{p} failed" for p in range(partitions)} <= {m.split(":")[0] for m in failed}
    left_out = sum(int(m.split("(after ")[1].split()[0]) for m in failed if "(after " in m)
    assert len(failed) + left_out == totals["produce_errors"]


def test_it_raises_no_false_alarm_after_a_restart(run_canary, canary_topic, kafka_bootstrap):
    first = run_canary(canary_topic, "--duration", "2.5", "--rate", "50", "--sla", "2")
    assert_clean(first["totals"])
    reader = watermark_reader(kafka_bootstrap)
    end_of_first = {int(p): high_watermark(reader, canary_topic, int(p)) for p in first["partitions"]}
    assert min(end_of_first.values()) > 0

    def replay_the_first_session_into_the_second() -> int:
        # As if the old producer's retries landed after the restart: the new session must ignore them.
        wait_until(lambda: high_watermark(reader, canary_topic, 0) > end_of_first[0], 10, "the second session")
        copier = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"t-{uuid.uuid4().hex}"})
        copier.assign([TopicPartition(canary_topic, p, 0) for p in end_of_first])
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        replayed = 0
        remaining = sum(end_of_first.values())
        deadline = time.monotonic() + 10
        while remaining and time.monotonic() < deadline:
            msg = copier.poll(0.2)
            if msg is None or msg.error() or msg.offset() >= end_of_first[msg.partition()]:
                continue
            remaining -= 1
            if replayed < 40:
                producer.produce(canary_topic, value=msg.value(), partition=msg.partition())
                replayed += 1
        copier.close()
        assert producer.flush(10) == 0
        return replayed

    replayer = Background(replay_the_first_session_into_the_second)
    replayer.start()
    second = run_canary(canary_topic, "--duration", "3", "--rate", "50", "--sla", "2")
    replayed = replayer.join_checked()
    reader.close()

    assert second["session"] != first["session"]
    assert_clean(second["totals"])
    assert second["totals"]["received"] == second["totals"]["sent"] > 0
    assert second["totals"]["other_sessions"] == replayed > 0
    for counts in second["partitions"].values():
        assert counts["sent"] > 0 and counts["received"] == counts["sent"]
    assert CanaryPoint.objects.filter(topic=canary_topic).values("session").distinct().count() == 2


def test_it_fails_clearly_and_stores_nothing_when_the_cluster_is_unreachable(capsys):
    before = CanaryPoint.objects.count()
    with pytest.raises(CommandError) as raised:
        call_command(
            "audit",
            "canary",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--connect-timeout",
            "1.5",
            "--duration",
            "2",
            "--json",
        )
    assert raised.value.returncode == 2
    assert "cannot reach Kafka at 127.0.0.1:1" in capsys.readouterr().err
    assert CanaryPoint.objects.count() == before


@pytest.mark.parametrize(
    "args", [["--rate", "0"], ["--sla", "0s"], ["--duration", "soon"], ["--rate", "fast"], ["--topic", "a/b"]]
)
def test_it_rejects_bad_options_by_name(args):
    with pytest.raises(CommandError, match=f"argument {args[0]}: '{args[1]}'"):
        call_command("audit", "canary", *args)
