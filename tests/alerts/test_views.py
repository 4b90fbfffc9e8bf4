"""Alert pages for each role: look (viewer), send test and acknowledge (operator), edit (admin)."""

from __future__ import annotations

import pytest

from auditor.accounts.models import Acknowledgement
from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.problems import raise_problem

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "none", "viewer", "operator", "admin"]


def expected(role: str, needs: str) -> int:
    order = ["viewer", "operator", "admin"]
    if role == "anonymous":
        return 302
    if role == "none" or order.index(role) < order.index(needs):
        return 403
    return 200


@pytest.fixture
def channel(make_channel, webhook_settings):
    channel = make_channel()
    raise_problem("finding:missing", "finding:tickets:missing", None, "12 <b>tickets</b> missing")
    return channel


@pytest.mark.parametrize("role", ROLES)
def test_it_shows_the_alerts_index_to_viewers_and_up(client_as, channel, role):
    response = client_as(role).get("/alerts/")
    assert response.status_code == expected(role, "viewer")
    if response.status_code == 200:
        assert b"finding:tickets:missing" in response.content
        assert b"12 &lt;b&gt;tickets&lt;/b&gt; missing" in response.content  # escaped
        assert (b"New channel" in response.content) == (role == "admin")


@pytest.mark.parametrize("role", ROLES)
def test_it_shows_a_channel_with_its_log_and_never_its_secret(client_as, channel, role, monkeypatch):
    response = client_as(role).get(f"/alerts/channels/{channel.pk}/")
    assert response.status_code == expected(role, "viewer")
    if response.status_code == 200:
        content = response.content.decode()
        assert "Delivery log" in content and "****" in content
        assert channel.secret not in content and channel.resolved_secret() not in content
        assert ('id="send-test"' in content) == (role in ("operator", "admin"))
        assert ("Edit</a>" in content) == (role == "admin")


def test_a_literal_webhook_url_is_shown_without_the_token_in_its_path(client_as, make_channel, webhook_settings):
    """A Slack webhook URL is itself a credential: typed in literally (not as a ${ENV}
    reference), viewers see its host only."""
    hook = make_channel("slack-hook", url="https://hooks.slack.com/services/T0/B0/XXXXSECRET")
    content = client_as("viewer").get(f"/alerts/channels/{hook.pk}/").content.decode()
    assert "XXXXSECRET" not in content and "/services/" not in content
    assert "https://hooks.slack.com/****" in content


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_operators_and_up_send_a_test(client_as, channel, role):
    before = Delivery.objects.filter(event="test").count()
    response = client_as(role).post(f"/alerts/channels/{channel.pk}/test/")
    allowed = expected(role, "operator") == 200
    assert response.status_code == (302 if allowed or role == "anonymous" else 403)
    assert Delivery.objects.filter(event="test").count() == before + allowed


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_admins_create_channels(client_as, make_channel, webhook_settings, receiver, role):
    data = {
        "name": "new-hook",
        "url": receiver.url,
        "secret": "${AUDITOR_TEST_WEBHOOK_SECRET}",
        "format": "generic",
        "enabled": "on",
        "finding_kinds": ["missing"],
        "lint_severity": "warning",
        "canary_loss": "3",
    }
    client = client_as(role)
    assert client.get("/alerts/channels/new/").status_code == expected(role, "admin")
    response = client.post("/alerts/channels/new/", data)
    created = Channel.objects.filter(name="new-hook").first()
    if role == "admin":
        assert response.status_code == 302 and created is not None
        assert created.event_filter.finding_kinds == ("missing",)
        assert (created.event_filter.lint_severity, created.event_filter.canary_loss) == ("warning", 3)
    else:
        assert response.status_code in (302, 403) and created is None


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_only_admins_edit_and_delete(client_as, channel, role):
    client = client_as(role)
    assert client.get(f"/alerts/channels/{channel.pk}/edit/").status_code == expected(role, "admin")
    client.post(f"/alerts/channels/{channel.pk}/delete/")
    assert Channel.objects.filter(pk=channel.pk).exists() == (role != "admin")


def test_it_keeps_the_secret_when_an_edit_leaves_it_empty(client_as, channel):
    client = client_as("admin")
    page = client.get(f"/alerts/channels/{channel.pk}/edit/").content.decode()
    assert channel.secret not in page  # not even the reference goes back to the browser
    response = client.post(
        f"/alerts/channels/{channel.pk}/edit/", {"name": "renamed", "url": channel.url, "secret": "", "format": "slack"}
    )
    assert response.status_code == 302
    channel.refresh_from_db()
    assert (channel.name, channel.format, channel.secret) == ("renamed", "slack", "${AUDITOR_TEST_WEBHOOK_SECRET}")


def test_it_keeps_a_literal_hook_urls_token_off_the_edit_page_and_an_edit_posting_it_back_keeps_the_url(
    client_as, make_channel, webhook_settings, receiver
):
    url = f"{receiver.base_url}/services/T0/B0/XXXXSECRET"
    hook = make_channel("slack-hook", url=url)
    client = client_as("admin")
    page = client.get(f"/alerts/channels/{hook.pk}/edit/").content.decode()
    assert "XXXXSECRET" not in page and "/services/" not in page
    assert f'value="{receiver.base_url}/****"' in page
    form = {"name": "renamed", "url": f"{receiver.base_url}/****", "secret": "", "format": "generic"}
    response = client.post(f"/alerts/channels/{hook.pk}/edit/", form)
    assert response.status_code == 302
    hook.refresh_from_db()
    assert (hook.name, hook.url) == ("renamed", url)
    # a new URL is still checked
    response = client.post(f"/alerts/channels/{hook.pk}/edit/", {**form, "url": "ftp://example.com/****"})
    assert response.status_code == 200 and "must start with http:// or https://" in response.content.decode()
    hook.refresh_from_db()
    assert hook.url == url


def test_it_refuses_a_hook_url_edited_around_its_masked_token_and_keeps_the_stored_one(
    client_as, make_channel, webhook_settings, receiver
):
    url = f"{receiver.base_url}/services/T0/B0/XXXXSECRET"
    hook = make_channel("slack-hook", url=url)
    client = client_as("admin")
    edited = f"{receiver.base_url}/****".replace("127.0.0.1", "localhost")
    assert edited != f"{receiver.base_url}/****"
    form = {"name": "renamed", "url": edited, "secret": "", "format": "generic"}
    response = client.post(f"/alerts/channels/{hook.pk}/edit/", form)
    assert response.status_code == 200
    assert "retype the secret: the value shown was masked" in response.content.decode()
    hook.refresh_from_db()
    assert (hook.name, hook.url) == ("slack-hook", url)


@pytest.mark.parametrize(
    "data,error",
    [
        ({"secret": "plain-text"}, "must be a ${ENV} reference"),
        ({"secret": "${AUDITOR_TEST_NOT_SET_ANYWHERE}"}, "AUDITOR_TEST_NOT_SET_ANYWHERE is not set"),
        ({"url": "ftp://example.com/"}, "must start with http:// or https://"),
    ],
)
def test_it_rejects_bad_channels_with_a_clear_error(client_as, webhook_settings, receiver, data, error):
    form = {"name": "x", "url": receiver.url, "secret": "${AUDITOR_TEST_WEBHOOK_SECRET}", "format": "generic", **data}
    response = client_as("admin").post("/alerts/channels/new/", form)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not Channel.objects.exists()


def test_it_refuses_a_private_destination_in_the_form_by_default(client_as, webhook_settings):
    webhook_settings.AUDITOR_WEBHOOK_ALLOW_PRIVATE = False
    form = {
        "name": "x",
        "url": "http://127.0.0.1:9/hook",
        "secret": "${AUDITOR_TEST_WEBHOOK_SECRET}",
        "format": "generic",
    }
    response = client_as("admin").post("/alerts/channels/new/", form)
    assert "a loopback address" in response.content.decode()
    assert not Channel.objects.exists()


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_operators_and_up_acknowledge_and_shows_it(client_as, channel, role):
    alert = Alert.objects.get()
    client = client_as(role)
    response = client.post(f"/alerts/alerts/{alert.pk}/acknowledge/", {"action": "ack", "reason": "looking <now>"})
    acked = Acknowledgement.objects.filter(kind="problem", key=alert.fingerprint).first()
    if expected(role, "operator") == 200:
        assert response.status_code == 302 and acked is not None and acked.username == f"user-{role}"
        page = client.get("/alerts/").content.decode()
        assert "looking &lt;now&gt;" in page and f"user-{role}" in page
    else:
        assert acked is None


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_operators_and_up_withdraw(client_as, channel, role_users, role):
    from auditor.accounts.acknowledgements import acknowledge

    ack = acknowledge(role_users["admin"], "problem", "finding:tickets:missing", action="mute", reason="x")
    client_as(role).post(f"/alerts/acknowledgements/{ack.pk}/withdraw/")
    ack.refresh_from_db()
    assert (ack.withdrawn_at is not None) == (expected(role, "operator") == 200)


def test_it_mutes_for_a_number_of_hours(client_as, channel):
    alert = Alert.objects.get()
    client_as("operator").post(
        f"/alerts/alerts/{alert.pk}/acknowledge/", {"action": "mute", "reason": "deploy", "mute_hours": "2"}
    )
    ack = Acknowledgement.objects.get()
    assert ack.action == "mute" and ack.mute_until is not None


def test_it_explains_a_refused_acknowledgement(client_as, channel):
    alert = Alert.objects.get()
    response = client_as("operator").post(f"/alerts/alerts/{alert.pk}/acknowledge/", {"action": "ack"}, follow=True)
    assert "Not acknowledged: reason" in response.content.decode()
    assert not Acknowledgement.objects.exists()
