"""Clusters, source-of-truth databases, bindings (topic <-> table) and stuck rules.

Values that may hold secrets are stored as written, with their ${ENV} references
unresolved: the secret itself never reaches the database.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from auditor.lib.secrets import mask_mapping, mask_url, resolve_env
from auditor.vocabulary import GUARANTEES
from spark_jobs.binding import BindingError, check_zone
from spark_jobs.kafka_security import connection_settings


def validate_zone(value: str) -> None:
    """An IANA time zone name this machine knows, or "" (the database's own)."""
    if value:
        try:
            check_zone(value, "binding")
        except BindingError as exc:
            raise ValidationError(str(exc).split(": ", 1)[1]) from None


GUARANTEE_CHOICES = [(g, g) for g in GUARANTEES]


class Cluster(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    bootstrap_servers = models.CharField(max_length=1000)
    config = models.JSONField(default=dict, blank=True, help_text="extra librdkafka settings")
    config_file = models.CharField(
        max_length=1000, blank=True, help_text="the YAML file that declares it (audit apply); empty: made here"
    )
    updated_at = models.DateTimeField(auto_now=True)
    # The longest a send's outcome stayed open for any probed producer of the cluster, as
    # they reported it (auditor.pipelines.producers; 0: one retries without limit). Kept
    # because the clients topic's retention forgets a long-running producer's report; clear
    # it to start again from what the producers report now.
    send_outcome_ms = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="the longest send outcome its producers reported, in ms (0: no limit)"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def client_config(self) -> dict[str, Any]:
        """The librdkafka settings of every client the auditor makes of this cluster, with ${ENV}
        references resolved (for clients, never for display): the bootstrap servers and the
        config's settings of how to reach the cluster (connection_settings). Others (a
        producer's acks, a consumer's group.id) are each client's own, and not taken here."""
        resolved = {k: resolve_env(v) if isinstance(v, str) else v for k, v in connection_settings(self.config).items()}
        return {"bootstrap.servers": resolve_env(self.bootstrap_servers), **resolved}

    def masked_config(self) -> dict[str, Any]:
        return mask_mapping(self.config)


class SourceDatabase(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    url = models.CharField(max_length=2000, help_text="postgresql:// URL; use ${ENV} for the password")
    config_file = models.CharField(
        max_length=1000, blank=True, help_text="the YAML file that declares it (audit apply); empty: made here"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def resolved_url(self) -> str:
        return resolve_env(self.url)

    def masked_url(self) -> str:
        return mask_url(self.url)


class Binding(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="bindings")
    topic = models.CharField(max_length=249)
    source = models.ForeignKey(SourceDatabase, on_delete=models.PROTECT, related_name="bindings")
    table = models.CharField(max_length=200)
    key_column = models.CharField(max_length=100)
    record_key = models.CharField(max_length=300, default="key")
    created_column = models.CharField(max_length=100, blank=True)
    # The IANA time zone the table's timestamp-without-time-zone columns hold (its created
    # column, its stuck rules' age column): their wall-clock values are read in it. Empty:
    # the source database's own TimeZone setting.
    timestamp_zone = models.CharField(max_length=64, blank=True, default="", validators=[validate_zone])
    grace_seconds = models.PositiveIntegerField(default=120)
    guarantee = models.CharField(max_length=20, choices=GUARANTEE_CHOICES, default="at-least-once")
    consumer_groups = models.JSONField(default=list, blank=True)
    schedule_seconds = models.PositiveIntegerField(default=300)
    # The ledger topics this pipeline's probes write (AuditedProducer/AuditedConsumer's
    # ledger_topic=); empty: the deployment's (auditor.pipelines.ledgers.ledger_topics).
    producer_ledger_topic = models.CharField(max_length=249, blank=True, default="")
    consumer_ledger_topic = models.CharField(max_length=249, blank=True, default="")
    config_file = models.CharField(
        max_length=1000, blank=True, help_text="the YAML file that declares it (audit apply); empty: made here"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class StuckRule(models.Model):
    name = models.SlugField(max_length=100, unique=True)
    binding = models.ForeignKey(Binding, on_delete=models.CASCADE, related_name="stuck_rules")
    status_column = models.CharField(max_length=100)
    stuck_values = models.JSONField(default=list)
    age_column = models.CharField(max_length=100)
    older_than_seconds = models.PositiveIntegerField(default=600)
    schedule_seconds = models.PositiveIntegerField(default=300)
    config_file = models.CharField(
        max_length=1000, blank=True, help_text="the YAML file that declares it (audit apply); empty: made here"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TopicIncarnation(models.Model):
    """A topic id the auditor saw a cluster's topic under, and when.

    Kafka gives a topic a new id when it is deleted and created again under the same name;
    its records (and the groups' committed offsets) went with the old id, and its offsets
    start again at 0. The broker keeps no trace of the old topic, so the auditor keeps one:
    every diagnosis and reconciliation run records the id it saw (observe_topic_id). A topic
    seen under two ids was re-created in between, and no partition of it holds records
    produced before the new id was first seen (recreation()).
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="topic_incarnations")
    topic = models.CharField(max_length=249)
    topic_id = models.CharField(max_length=64)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "topic", "topic_id"], name="topic_incarnation_unique"),
        ]
        ordering = ["cluster", "topic", "first_seen"]

    def __str__(self) -> str:
        return f"{self.topic} ({self.topic_id})"
