"""The stuck page at scale: pages of items in display order, and one acknowledge form for a selection."""

from __future__ import annotations

import pytest

from auditor.accounts.models import Acknowledgement
from auditor.pipelines.models import StuckRule
from auditor.stuck.models import StuckItem
from auditor.stuck.service import record_diagnosis, start_run
from auditor.stuck.views import ITEMS_PER_PAGE, page_data
from tests.support.stuck import fake_result

pytestmark = pytest.mark.django_db
URL = "/stuck/items/acknowledge/"


@pytest.fixture
def many(plain_rule: StuckRule) -> StuckRule:
    verdicts = {f"K{n:03}": ("skipped" if n % 3 else "waiting") for n in range(ITEMS_PER_PAGE + 20)}
    record_diagnosis(start_run(plain_rule, "cli"), fake_result(plain_rule, verdicts))
    return plain_rule


def test_it_pages_items_in_verdict_then_age_order(many: StuckRule) -> None:
    filters = {"rule": "", "verdict": ""}
    expected = [
        i.key
        for i in sorted(
            StuckItem.objects.open(), key=lambda i: (i.verdict != "skipped", -i.age_seconds, i.key)
        )  # skipped (a break) before waiting, oldest first
    ]
    first, second = page_data(filters, 1), page_data(filters, 2)
    assert (first["items_total"], first["pages"], second["page"]) == (70, 2, 2)
    assert [i["key"] for i in first["items"] + second["items"]] == expected
    assert page_data(filters, 99)["page"] == 2  # past the end: the last page
    waiting = page_data({"rule": "", "verdict": "waiting"}, 1)
    assert waiting["items_total"] == 24 and {i["verdict"] for i in waiting["items"]} == {"waiting"}


def test_the_page_shows_one_page_and_a_pager(client_as, many: StuckRule) -> None:
    html = client_as("viewer").get("/stuck/?page=2").content.decode()
    assert html.count('<tr data-key="') == 20
    assert "page 2 of 2" in html and 'data-page="1"' in html


def test_it_acknowledges_the_ticked_items(client_as, many: StuckRule) -> None:
    ids = list(StuckItem.objects.order_by("id").values_list("id", flat=True)[:3])
    response = client_as("operator").post(URL, {"item": ids, "action": "ack", "reason": "replaying"})
    assert response.status_code == 302
    assert sorted(Acknowledgement.objects.values_list("key", flat=True)) == sorted(str(i) for i in ids)


def test_it_mutes_every_item_matching_the_filters(client_as, many: StuckRule) -> None:
    response = client_as("operator").post(
        URL, {"scope": "matching", "verdict": "waiting", "action": "mute", "reason": "consumer down", "mute_hours": 2}
    )
    assert response["Location"] == "/stuck/?verdict=waiting"
    waiting = {str(i) for i in StuckItem.objects.filter(verdict="waiting").values_list("id", flat=True)}
    assert set(Acknowledgement.objects.values_list("key", flat=True)) == waiting
    assert {a.action for a in Acknowledgement.objects.all()} == {"mute"}


def test_a_viewer_cannot(client_as, many: StuckRule) -> None:
    assert client_as("viewer").post(URL, {"scope": "matching", "action": "ack", "reason": "x"}).status_code == 403
    assert not Acknowledgement.objects.exists()
