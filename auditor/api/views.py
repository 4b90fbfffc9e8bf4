"""The tokens page: create (the raw token is shown once) and revoke."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from auditor.accounts.roles import ADMIN, VIEWER, SignedInRequest, has_role, require_role
from auditor.api.forms import TokenForm
from auditor.api.models import ApiToken
from auditor.api.tokens import create_token, revoke_token


def _visible_tokens(request: SignedInRequest) -> list[ApiToken]:
    tokens = ApiToken.objects.select_related("user")
    if not has_role(request.user, ADMIN):
        tokens = tokens.filter(user=request.user)
    return list(tokens)


@never_cache
@require_http_methods(["GET", "POST"])
@require_role(VIEWER)
def tokens(request: SignedInRequest) -> HttpResponse:
    new_token = None
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            _, new_token = create_token(request.user, form.cleaned_data["name"], form.cleaned_data["scope"])
            form = TokenForm()
    else:
        form = TokenForm()
    return render(
        request,
        "api/tokens.html",
        {
            "form": form,
            "new_token": new_token,
            "tokens": _visible_tokens(request),
            "show_owner": has_role(request.user, ADMIN),
        },
    )


@require_POST
@require_role(VIEWER)
def revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id)
    # Admins may revoke anyone's token; others only their own (others' tokens do not exist for them).
    if token.user_id != request.user.pk and not has_role(request.user, ADMIN):
        raise Http404("no such token")
    if revoke_token(token):
        messages.success(request, f"Token {token.prefix}… ({token.name}) revoked.")
    return redirect("api:tokens")
