"""Channel pages (viewer+ to look, operator+ to send a test or acknowledge, admin to edit)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from auditor.accounts.forms import AcknowledgeForm
from auditor.accounts.models import Acknowledgement
from auditor.accounts.pages import acknowledge_from_post, withdraw_from_post
from auditor.accounts.roles import ADMIN, OPERATOR, VIEWER, SignedInRequest, has_role, require_role
from auditor.alerts.acknowledgements import attach_acknowledgements
from auditor.alerts.forms import ChannelForm
from auditor.alerts.models import Alert, Channel, Delivery
from auditor.alerts.outbox import send_test
from auditor.alerts.problems import PROBLEM_ACK_KIND

DELIVERY_LOG_SIZE = 50


def _page_roles(request: HttpRequest) -> dict[str, bool]:
    return {"can_operate": has_role(request.user, OPERATOR), "can_admin": has_role(request.user, ADMIN)}


@require_GET
@require_role(VIEWER)
def index(request: HttpRequest) -> HttpResponse:
    since = timezone.now() - timedelta(days=1)
    channels = Channel.objects.annotate(
        open_alerts=Count("alerts", filter=Q(alerts__state=Alert.OPEN), distinct=True),
        failed_deliveries=Count(
            "deliveries",
            filter=Q(deliveries__status=Delivery.FAILED, deliveries__created_at__gte=since),
            distinct=True,
        ),
    )
    open_alerts = Alert.objects.filter(state=Alert.OPEN).select_related("channel", "binding")[:200]
    return render(
        request,
        "alerts/index.html",
        {
            "channels": channels,
            "alerts": attach_acknowledgements(open_alerts),
            "ack_form": AcknowledgeForm(),
            **_page_roles(request),
        },
    )


@require_GET
@require_role(VIEWER)
def channel_detail(request: HttpRequest, channel_id: int) -> HttpResponse:
    channel = get_object_or_404(Channel.objects.prefetch_related("bindings"), pk=channel_id)
    deliveries = channel.deliveries.select_related("alert")[:DELIVERY_LOG_SIZE]
    alerts = channel.alerts.select_related("binding")[:100]
    return render(
        request,
        "alerts/channel_detail.html",
        {
            "channel": channel,
            "deliveries": deliveries,
            "alerts": attach_acknowledgements(alerts),
            "ack_form": AcknowledgeForm(),
            **_page_roles(request),
        },
    )


@require_http_methods(["GET", "POST"])
@require_role(ADMIN)
def channel_edit(request: HttpRequest, channel_id: int | None = None) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=channel_id) if channel_id is not None else None
    form = ChannelForm(request.POST or None, instance=channel)
    if request.method == "POST" and form.is_valid():
        saved = form.save()
        messages.success(request, f"Channel {saved.name} saved.")
        return redirect("alerts:channel", channel_id=saved.pk)
    return render(request, "alerts/channel_form.html", {"form": form, "channel": channel})


@require_POST
@require_role(ADMIN)
def channel_delete(request: HttpRequest, channel_id: int) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=channel_id)
    channel.delete()
    messages.success(request, f"Channel {channel.name} deleted with its alerts and delivery log.")
    return redirect("alerts:index")


@require_POST
@require_role(OPERATOR)
def channel_send_test(request: SignedInRequest, channel_id: int) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=channel_id)
    delivery = send_test(channel, request.user)
    messages.success(request, f"Test delivery #{delivery.pk} queued; its result appears in the delivery log.")
    return redirect("alerts:channel", channel_id=channel.pk)


def _back(request: HttpRequest, alert: Alert | None = None) -> HttpResponse:
    if request.POST.get("next") == "channel" and alert is not None:
        return redirect("alerts:channel", channel_id=alert.channel_id)
    return redirect("alerts:index")


@require_POST
@require_role(OPERATOR)
def alert_acknowledge(request: HttpRequest, alert_id: int) -> HttpResponse:
    alert = get_object_or_404(Alert, pk=alert_id)
    acknowledge_from_post(request, PROBLEM_ACK_KIND, alert.fingerprint, alert.fingerprint)
    return _back(request, alert)


@require_POST
@require_role(OPERATOR)
def acknowledgement_withdraw(request: HttpRequest, ack_id: int) -> HttpResponse:
    ack = get_object_or_404(Acknowledgement, pk=ack_id, kind=PROBLEM_ACK_KIND)
    withdraw_from_post(request, ack, ack.key)
    return redirect("alerts:index")
