"""Per-minute canary measurements, one row per (session, topic, minute, partition)."""

from __future__ import annotations

from django.db import models

from auditor.canary.scope import cluster_scope


class CanaryPoint(models.Model):
    """What one canary session observed on one partition during one minute.

    Counts are of events observed in that minute (a loss, or an unacknowledged record,
    counts in the minute its SLA ran out). A minute in which the canary restarted has one
    row per session.
    """

    session = models.CharField(max_length=32)
    cluster = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text="the configured cluster it ran against (audit canary --cluster); empty: bootstrap servers only",
    )
    bootstrap_servers = models.CharField(
        max_length=1000,
        blank=True,
        default="",
        help_text="the bootstrap servers it ran against; empty on rows stored before they were recorded",
    )
    topic = models.CharField(max_length=249)
    minute = models.DateTimeField(help_text="start of the minute (UTC)")
    partition = models.PositiveIntegerField()
    leader = models.IntegerField(null=True, blank=True, help_text="leader broker id when the minute closed")
    sent = models.PositiveIntegerField(default=0)
    received = models.PositiveIntegerField(default=0)
    lost = models.PositiveIntegerField(
        default=0, help_text="acknowledged by the broker and not received within the SLA"
    )
    lost_leaders = models.JSONField(
        default=dict,
        blank=True,
        help_text="lost records per leader broker id they were sent to (as the canary knew the leader then)",
    )
    duplicated = models.PositiveIntegerField(default=0)
    out_of_order = models.PositiveIntegerField(default=0)
    late = models.PositiveIntegerField(default=0, help_text="received after the SLA (already counted lost)")
    produce_errors = models.PositiveIntegerField(
        default=0, help_text="delivery failed: the broker never took the record (never counted lost)"
    )
    unacked = models.PositiveIntegerField(
        default=0, help_text="no delivery report yet when the SLA ran out (not a loss; counted once)"
    )
    truncated = models.PositiveIntegerField(
        default=0,
        help_text="read, then cut from the log: another record was read later at its offset (an unclean "
        "election, an acks=1 failover)",
    )
    p50_ms = models.FloatField(null=True, blank=True)
    p99_ms = models.FloatField(null=True, blank=True)
    max_ms = models.FloatField(null=True, blank=True)
    partial = models.BooleanField(default=False, help_text="the session ended before the minute did")

    class Meta:
        ordering = ["minute", "partition"]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "topic", "minute", "partition"], name="canary_point_unique_per_session"
            )
        ]
        indexes = [
            models.Index(fields=["topic", "minute"], name="canary_point_topic_minute"),
            # the pages', alerts' and /metrics' windows over every topic (minute >= now - window)
            models.Index(fields=["minute"], name="canary_point_minute"),
            # /metrics' newest minute per cluster and topic, over every point (an index-only scan)
            models.Index(fields=["cluster", "bootstrap_servers", "topic", "minute"], name="canary_point_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition} @ {self.minute:%Y-%m-%d %H:%M}"

    @property
    def scope(self) -> str:
        """Its cluster as the alerts, metrics and page tell clusters apart (scope.cluster_scope)."""
        return cluster_scope(self.cluster, self.bootstrap_servers)

    def as_event(self) -> dict[str, object]:
        """The JSON shape pushed to browsers and embedded in the dashboard."""
        return {
            "session": self.session,
            "cluster": self.cluster,
            "bootstrap_servers": self.bootstrap_servers,
            "scope": self.scope,
            "minute": self.minute.isoformat(),
            "partition": self.partition,
            "leader": self.leader,
            "sent": self.sent,
            "received": self.received,
            "lost": self.lost,
            "lost_leaders": self.lost_leaders,
            "duplicated": self.duplicated,
            "out_of_order": self.out_of_order,
            "late": self.late,
            "produce_errors": self.produce_errors,
            "unacked": self.unacked,
            "truncated": self.truncated,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
            "partial": self.partial,
        }
