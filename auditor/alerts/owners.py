"""The problems of an owner that is gone: a binding, stuck rule or cluster deleted or renamed.

Fingerprints name the object that reports them (``finding:<binding>:…``, ``stuck:<rule>:…``;
lint and canary problems name their cluster). Once it is deleted or renamed, nothing reports
under the old name again and its open problems would stay open forever (a rename opening a
second one beside them). Each app therefore tells ``watch_owner`` which of its alerts an
object of a model owns; deleting the object (post_delete), or saving it under a new name,
resolves those problems through ``resolve_problem`` like any other resolve (the channels that
heard of the opening get the ``resolved`` webhook), with the reason in the alerts' details
(``details["resolved_because"]``). A renamed object's problems open again under its new
name at their next detection.

Deleting or renaming through ``QuerySet.update`` or raw SQL sends no signal: nothing is
resolved then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import models, transaction
from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save, pre_save

from auditor.alerts.models import Alert
from auditor.alerts.problems import resolve_problem

RESOLVED_BECAUSE = "resolved_because"
NAMES_BEFORE_SAVE = "_alerts_names_before_save"  # on the instance being saved, for post_save

# The alerts an owner (by its name) holds: open ones are resolved when it goes.
OwnedAlerts = Callable[[str], QuerySet[Alert]]


def named_problems(kind: str, owner_name: str) -> QuerySet[Alert]:
    """The alerts of `kind` ("finding", "stuck") whose fingerprints name the owner:
    ``<kind>:<owner_name>:…``."""
    return Alert.objects.filter(kind__startswith=f"{kind}:", fingerprint__startswith=f"{kind}:{owner_name}:")


def resolve_owned_problems(alerts: QuerySet[Alert], reason: str) -> list[str]:
    """Resolve every problem with an open alert among `alerts`, `reason` written in its alerts'
    details first (the resolved webhook carries it); returns their fingerprints."""
    with transaction.atomic():
        open_alerts = list(alerts.filter(state=Alert.OPEN).select_for_update().order_by("pk"))
        for alert in open_alerts:
            alert.details = {**alert.details, RESOLVED_BECAUSE: reason}
            alert.save(update_fields=["details"])
        fingerprints = sorted({alert.fingerprint for alert in open_alerts})
        for fingerprint in fingerprints:
            resolve_problem(fingerprint)
    return fingerprints


def watch_owner(model: type[models.Model], label: str, owned: OwnedAlerts) -> None:
    """Resolve the problems `owned` finds for an object of `model` (named by its ``name``)
    when it is deleted or renamed; `label` names the model in the reason ("binding")."""
    uid = f"alerts-owner-{label}-{owned.__module__}"

    def before_save(sender: Any, instance: Any, raw: bool = False, update_fields: Any = None, **kwargs: Any) -> None:
        stash = instance.__dict__.setdefault(NAMES_BEFORE_SAVE, {})
        stash.pop(uid, None)  # left by a save that failed
        if raw or instance.pk is None or (update_fields is not None and "name" not in update_fields):
            return
        before = model._default_manager.filter(pk=instance.pk).values_list("name", flat=True).first()
        stash[uid] = before  # one entry per watcher: a cluster has two (lint and canary)

    def saved(sender: Any, instance: Any, created: bool = False, raw: bool = False, **kwargs: Any) -> None:
        before = instance.__dict__.get(NAMES_BEFORE_SAVE, {}).pop(uid, None)
        if raw or created or before is None or before == instance.name:
            return
        resolve_owned_problems(owned(before), f"{label} {before} was renamed to {instance.name}")

    def deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
        resolve_owned_problems(owned(instance.name), f"{label} {instance.name} was deleted")

    pre_save.connect(before_save, sender=model, weak=False, dispatch_uid=f"{uid}-pre-save")
    post_save.connect(saved, sender=model, weak=False, dispatch_uid=f"{uid}-saved")
    post_delete.connect(deleted, sender=model, weak=False, dispatch_uid=f"{uid}-deleted")
