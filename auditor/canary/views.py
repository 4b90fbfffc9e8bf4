"""The canary dashboard: per-partition and per-broker charts, the latest minute, live updates."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Max
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from auditor.canary.models import CanaryPoint
from auditor.canary.runner import DEFAULT_TOPIC

DEFAULT_WINDOW_MINUTES = 60
MAX_WINDOW_MINUTES = 24 * 60


def _window_minutes(request: HttpRequest) -> int:
    try:
        minutes = int(request.GET.get("minutes", DEFAULT_WINDOW_MINUTES))
    except ValueError:
        return DEFAULT_WINDOW_MINUTES
    return max(5, min(minutes, MAX_WINDOW_MINUTES))


def _recent_topics() -> list[str]:
    rows = CanaryPoint.objects.values("topic").annotate(last=Max("minute")).order_by("-last")[:20]
    return [row["topic"] for row in rows]


def _chosen_topic(request: HttpRequest, topics: list[str]) -> str:
    requested = request.GET.get("topic", "").strip()
    if requested:
        return requested
    if DEFAULT_TOPIC in topics or not topics:
        return DEFAULT_TOPIC
    return topics[0]


def _points(topic: str, minutes: int) -> list[dict[str, object]]:
    since = timezone.now() - timedelta(minutes=minutes)
    points = CanaryPoint.objects.filter(topic=topic, minute__gte=since).order_by("minute", "partition")
    return [point.as_event() for point in points]


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    topics = _recent_topics()
    topic = _chosen_topic(request, topics)
    minutes = _window_minutes(request)
    if topic not in topics:
        topics.insert(0, topic)
    return render(
        request,
        "canary/index.html",
        {
            "topic": topic,
            "topics": topics,
            "minutes": minutes,
            "window_choices": [15, 60, 360, 1440],
            "canary_data": {"topic": topic, "minutes": minutes, "points": _points(topic, minutes)},
        },
    )


@require_GET
def points_json(request: HttpRequest) -> JsonResponse:
    topic = _chosen_topic(request, _recent_topics())
    minutes = _window_minutes(request)
    return JsonResponse({"topic": topic, "minutes": minutes, "points": _points(topic, minutes)})
