"""Ground truth from a plain read and the clients' reports (no auditor code involved)."""

from __future__ import annotations

from auditor.lab.cluster import Record
from auditor.lab.truth import acked, failed, producer_side
from auditor.lab.workload import Delivery


def read(*keys: str) -> list[Record]:
    return [Record(0, offset, key) for offset, key in enumerate(keys)]


def test_it_expects_nothing_when_every_ticket_is_there_once() -> None:
    assert producer_side([1, 2], read("1", "2")) == {}


def test_it_expects_broker_lost_only_where_a_read_before_the_fault_saw_the_record() -> None:
    expected = producer_side([1, 2, 3], read("1"), seen_before=read("1", "2"))
    assert expected == {"2": {"missing/broker-lost"}, "3": {"missing"}}


def test_it_takes_a_probed_producers_ack_as_evidence_of_a_broker_side_loss() -> None:
    assert producer_side([5], read(), probed_acked={"5"}) == {"5": {"missing/broker-lost", "gap/broker-lost"}}


def test_it_names_the_duplicate_cause_the_evidence_allows() -> None:
    assert producer_side([1], read("1", "1")) == {"1": {"duplicate/unknown"}}
    assert producer_side([1], read("1", "1"), duplicate_cause="producer-retry") == {"1": {"duplicate/producer-retry"}}


def test_it_splits_delivery_reports_into_acked_and_failed() -> None:
    reports = [Delivery("1", None, 0, 4), Delivery("2", "Local: Message timed out", 0, -1), Delivery("3", None, 0, -1)]
    assert (acked(reports), failed(reports)) == ({"1"}, {"2"})
