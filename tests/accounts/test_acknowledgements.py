"""Acknowledging and muting record who, when and why; expired mutes stop counting."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from auditor.accounts.acknowledgements import (
    AcknowledgementError,
    acknowledge,
    acknowledgement_json,
    attach_acknowledgements,
    current_acknowledgement,
    current_acknowledgements,
    is_muted,
    mutes_in_force,
    withdraw,
)
from auditor.accounts.models import Acknowledgement

pytestmark = pytest.mark.django_db


def test_it_records_who_when_and_why(role_users):
    before = timezone.now()
    ack = acknowledge(role_users["operator"], "finding", "42", action="ack", reason="known replay, ticket OPS-1")
    assert (ack.username, ack.reason, ack.action) == ("user-operator", "known replay, ticket OPS-1", "ack")
    assert ack.created_at >= before
    assert current_acknowledgement("finding", "42") == ack
    assert ack.as_dict()["by"] == "user-operator"


@pytest.mark.parametrize("name", ["none", "viewer"])
def test_it_refuses_acknowledgements_below_operator(role_users, name):
    with pytest.raises(PermissionDenied):
        acknowledge(role_users[name], "finding", "42", action="ack", reason="x")
    assert not Acknowledgement.objects.exists()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"action": "ack", "reason": "  "}, "reason is required"),
        ({"action": "snooze", "reason": "x"}, "must be 'ack' or 'mute'"),
        ({"action": "ack", "reason": "x", "mute_until": timezone.now() + timedelta(hours=1)}, "only applies"),
        ({"action": "mute", "reason": "x", "mute_until": timezone.now() - timedelta(hours=1)}, "in the past"),
    ],
)
def test_it_rejects_bad_acknowledgements_with_a_clear_error(role_users, kwargs, message):
    with pytest.raises(AcknowledgementError, match=message):
        acknowledge(role_users["operator"], "finding", "42", **kwargs)


def test_it_ends_a_mute_at_mute_until(role_users):
    until = timezone.now() + timedelta(hours=2)
    mute = acknowledge(role_users["admin"], "problem", "fp", action="mute", reason="maintenance", mute_until=until)
    assert is_muted("problem", "fp") == mute
    assert is_muted("problem", "fp", now=until + timedelta(seconds=1)) is None


def test_it_lets_the_newest_acknowledgement_decide_and_answers_many_keys_at_once(role_users, django_assert_num_queries):
    operator = role_users["operator"]
    acknowledge(operator, "problem", "a", action="mute", reason="first")
    newest = acknowledge(operator, "problem", "a", action="ack", reason="second")
    other = acknowledge(operator, "problem", "b", action="ack", reason="b")
    with django_assert_num_queries(1):
        current = current_acknowledgements("problem", ["a", "b", "c"])
    assert current == {"a": newest, "b": other}


def test_it_withdraws_with_who_and_keeps_the_history(role_users):
    ack = acknowledge(role_users["operator"], "problem", "a", action="mute", reason="noisy")
    assert withdraw(role_users["admin"], ack)
    assert not withdraw(role_users["admin"], ack)
    assert ack.withdrawn_by == "user-admin" and ack.withdrawn_at is not None
    assert is_muted("problem", "a") is None
    assert Acknowledgement.objects.count() == 1
    with pytest.raises(PermissionDenied):
        withdraw(role_users["viewer"], ack)


def test_it_finds_only_the_mutes_in_force_under_a_key_prefix(role_users):
    operator = role_users["operator"]
    now = timezone.now()
    live = acknowledge(operator, "finding", "7:a", action="mute", reason="live")
    acknowledge(operator, "finding", "7:b", action="mute", reason="ends", mute_until=now + timedelta(minutes=5))
    withdraw(operator, acknowledge(operator, "finding", "7:c", action="mute", reason="withdrawn"))
    acknowledge(operator, "finding", "7:d", action="mute", reason="superseded")
    acknowledge(operator, "finding", "7:d", action="ack", reason="an acknowledgement now")
    acknowledge(operator, "finding", "8:a", action="mute", reason="other binding")
    acknowledge(operator, "stuck-item", "7:a", action="mute", reason="other kind")
    assert mutes_in_force("finding", key_prefix="7:") == {"7:a": live, "7:b": Acknowledgement.objects.get(key="7:b")}
    assert set(mutes_in_force("finding", key_prefix="7:", now=now + timedelta(minutes=10))) == {"7:a"}
    assert set(mutes_in_force("finding")) == {"7:a", "7:b", "8:a"}


def test_it_attaches_the_acknowledgement_in_force_to_each_object(role_users, django_assert_num_queries):
    class Thing:
        def __init__(self, key: str) -> None:
            self.key = key

    ack = acknowledge(role_users["operator"], "stuck-item", "1", action="ack", reason="seen")
    with django_assert_num_queries(1):
        things = attach_acknowledgements([Thing("1"), Thing("2")], "stuck-item", lambda t: t.key)
    assert [acknowledgement_json(t) for t in things] == [ack.as_dict(), None]
