"""The canary dashboard: per-partition and per-broker charts, the latest minute, live updates.

One canary at a time: a topic on one cluster (canaries on several clusters default to the
same topic; their points are never drawn or added together)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Max
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from auditor.canary.models import CanaryPoint
from auditor.canary.runner import DEFAULT_TOPIC
from auditor.canary.scope import cluster_scope

DEFAULT_WINDOW_MINUTES = 60
MAX_WINDOW_MINUTES = 24 * 60


def _window_minutes(request: HttpRequest) -> int:
    try:
        minutes = int(request.GET.get("minutes", DEFAULT_WINDOW_MINUTES))
    except ValueError:
        return DEFAULT_WINDOW_MINUTES
    return max(5, min(minutes, MAX_WINDOW_MINUTES))


def _recent_canaries() -> list[tuple[str, str]]:
    """(topic, cluster scope) of the canaries that stored points, the most recent first."""
    rows = (
        CanaryPoint.objects.values("topic", "cluster", "bootstrap_servers")
        .annotate(last=Max("minute"))
        .order_by("-last")[:100]
    )
    canaries: list[tuple[str, str]] = []
    for row in rows:
        canary = (row["topic"], cluster_scope(row["cluster"], row["bootstrap_servers"]))
        if canary not in canaries:
            canaries.append(canary)
    return canaries


def _chosen(request: HttpRequest, canaries: list[tuple[str, str]]) -> tuple[str, str]:
    """The requested topic (default: the default topic when it has points, else the most
    recent) and cluster (default: the default cluster when it ran on the topic, else the
    most recent)."""
    topics = list(dict.fromkeys(topic for topic, _ in canaries))
    topic = request.GET.get("topic", "").strip()
    if not topic:
        topic = DEFAULT_TOPIC if DEFAULT_TOPIC in topics or not topics else topics[0]
    requested = request.GET.get("cluster")
    if requested is not None:
        return topic, requested.strip()
    scopes = [scope for t, scope in canaries if t == topic]
    return topic, "" if "" in scopes or not scopes else scopes[0]


def _points(topic: str, scope: str, minutes: int) -> list[dict[str, object]]:
    since = timezone.now() - timedelta(minutes=minutes)
    points = CanaryPoint.objects.filter(topic=topic, minute__gte=since).order_by("minute", "partition")
    # A named cluster is stored as such; the others are told apart by their servers.
    named = bool(scope) and not scope.startswith("servers=")
    points = points.filter(cluster=scope) if named else points.filter(cluster="")
    return [point.as_event() for point in points if point.scope == scope]


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    canaries = _recent_canaries()
    topic, scope = _chosen(request, canaries)
    minutes = _window_minutes(request)
    topics = list(dict.fromkeys(t for t, _ in canaries))
    if topic not in topics:
        topics.insert(0, topic)
    clusters = list(dict.fromkeys(s for t, s in canaries if t == topic))
    if scope not in clusters:
        clusters.insert(0, scope)
    return render(
        request,
        "canary/index.html",
        {
            "topic": topic,
            "topics": topics,
            "cluster": scope,
            "clusters": clusters,
            "minutes": minutes,
            "window_choices": [15, 60, 360, 1440],
            "canary_data": {
                "topic": topic,
                "cluster": scope,
                "minutes": minutes,
                "points": _points(topic, scope, minutes),
            },
        },
    )


@require_GET
def points_json(request: HttpRequest) -> JsonResponse:
    topic, scope = _chosen(request, _recent_canaries())
    minutes = _window_minutes(request)
    return JsonResponse(
        {"topic": topic, "cluster": scope, "minutes": minutes, "points": _points(topic, scope, minutes)}
    )
