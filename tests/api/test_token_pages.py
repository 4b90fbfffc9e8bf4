"""The tokens page: shown once on creation, revocable, per role."""

from __future__ import annotations

import pytest

from auditor.api.models import ApiToken
from auditor.api.tokens import create_token

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "role,status", [("anonymous", 302), ("none", 403), ("viewer", 200), ("operator", 200), ("admin", 200)]
)
def test_it_shows_the_tokens_page_to_every_role(client_as, role, status):
    response = client_as(role).get("/api/tokens/")
    assert response.status_code == status
    if role == "anonymous":
        assert "/login/" in response["Location"]


def test_it_shows_a_new_token_once(client_as):
    client = client_as("viewer")
    response = client.post("/api/tokens/", {"name": "grafana <b>", "scope": "read"})
    assert response.status_code == 200
    token = ApiToken.objects.get()
    raw = response.context["new_token"]
    assert raw.startswith(token.prefix)
    assert raw.encode() in response.content
    assert b"grafana &lt;b&gt;" in response.content  # escaped
    assert "no-store" in response["Cache-Control"]
    again = client.get("/api/tokens/")
    assert raw.encode() not in again.content
    assert token.prefix.encode() in again.content


@pytest.mark.parametrize("role", ["anonymous", "none"])
def test_it_refuses_token_creation_without_a_role(client_as, role):
    client_as(role).post("/api/tokens/", {"name": "x", "scope": "write"})
    assert not ApiToken.objects.exists()


def test_it_lets_users_revoke_their_own_tokens_only(client_as, role_users):
    mine, _ = create_token(role_users["viewer"], "mine", "read")
    theirs, _ = create_token(role_users["operator"], "theirs", "read")
    client = client_as("viewer")
    assert client.post(f"/api/tokens/{mine.pk}/revoke/").status_code == 302
    assert client.post(f"/api/tokens/{theirs.pk}/revoke/").status_code == 404
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.revoked_at is not None and theirs.revoked_at is None
    assert b"theirs" not in client.get("/api/tokens/").content


def test_it_lets_admins_see_and_revoke_every_token(client_as, role_users):
    theirs, _ = create_token(role_users["operator"], "theirs", "read")
    client = client_as("admin")
    assert b"theirs" in client.get("/api/tokens/").content
    assert client.post(f"/api/tokens/{theirs.pk}/revoke/").status_code == 302
    theirs.refresh_from_db()
    assert theirs.revoked_at is not None


@pytest.mark.parametrize("role,status", [("anonymous", 302), ("none", 403)])
def test_it_refuses_revocation_without_a_role(client_as, role_users, role, status):
    token, _ = create_token(role_users["viewer"], "mine", "read")
    assert client_as(role).post(f"/api/tokens/{token.pk}/revoke/").status_code == status
    token.refresh_from_db()
    assert token.revoked_at is None
