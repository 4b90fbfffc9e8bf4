"""Roles: groups from the migration, has_role ordering, the decorator and the middleware."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from auditor.accounts.roles import grant_role, has_role, highest_role, require_role

pytestmark = pytest.mark.django_db

EXPECTED = {
    "none": set(),
    "viewer": {"viewer"},
    "operator": {"viewer", "operator"},
    "admin": {"viewer", "operator", "admin"},
}


def test_it_creates_the_three_role_groups_in_a_migration():
    assert set(Group.objects.filter(name__in=["viewer", "operator", "admin"]).values_list("name", flat=True)) == {
        "viewer",
        "operator",
        "admin",
    }


@pytest.mark.parametrize("name", ["none", "viewer", "operator", "admin"])
def test_it_orders_roles_viewer_operator_admin(role_users, name):
    user = role_users[name]
    assert {role for role in ("viewer", "operator", "admin") if has_role(user, role)} == EXPECTED[name]
    assert highest_role(user) == (None if name == "none" else name)


def test_it_counts_superusers_as_admins(django_user_model):
    superuser = django_user_model.objects.create_superuser("root", password="x")
    assert has_role(superuser, "admin")
    assert highest_role(superuser) == "admin"


def test_it_gives_anonymous_and_inactive_users_no_role(role_users):
    assert not has_role(AnonymousUser(), "viewer")
    admin = role_users["admin"]
    admin.is_active = False
    assert not has_role(admin, "viewer")


def test_it_rejects_an_unknown_role_name(role_users):
    with pytest.raises(ValueError, match="unknown role 'root'"):
        has_role(role_users["admin"], "root")
    with pytest.raises(ValueError, match="unknown role"):
        require_role("owner")


def test_it_replaces_the_role_when_granting_another(role_users):
    user = role_users["admin"]
    grant_role(user, "viewer")
    assert user.groups.filter(name__in=["viewer", "operator", "admin"]).count() == 1
    assert has_role(user, "viewer") and not has_role(user, "operator")


@require_role("operator")
def _operator_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


def test_it_redirects_anonymous_users_to_login_from_a_role_view():
    request = RequestFactory().get("/somewhere/")
    request.user = AnonymousUser()
    response = _operator_view(request)
    assert response.status_code == 302 and "/login/?next=/somewhere/" in response["Location"]


@pytest.mark.parametrize("name,allowed", [("none", False), ("viewer", False), ("operator", True), ("admin", True)])
def test_it_lets_only_the_role_and_above_through_the_decorator(role_users, name, allowed):
    request = RequestFactory().get("/somewhere/")
    request.user = role_users[name]
    if allowed:
        assert _operator_view(request).status_code == 200
    else:
        with pytest.raises(PermissionDenied):
            _operator_view(request)


@pytest.fixture
def role_middleware(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "auditor.accounts.middleware.RoleRequiredMiddleware"]


@pytest.mark.parametrize("name,status", [("none", 403), ("viewer", 200)])
def test_it_denies_users_without_a_role_every_page_with_the_middleware(role_middleware, client_as, name, status):
    response = client_as(name).get("/pipelines/")
    assert response.status_code == status
    if status == 403:
        assert b"no role" in response.content


def test_it_still_lets_users_without_a_role_log_out_with_the_middleware(role_middleware, client_as):
    response = client_as("none").post("/logout/")
    assert response.status_code == 302
