"""Links from a lint result to the reconciliation findings its setting explains.

A result names what was linted in its subject (as the scan writes it: ``topic orders``,
``consumer app@host session (group billing)``, ``producer app@host session``,
``brokers``) and its cluster. The findings page filters by binding, kind and cause, so
the subject is turned into the bindings it concerns:

- a topic: the bindings of that topic on the cluster;
- a consumer with a group: the bindings that declare that group;
- anything else on a cluster (producers, brokers, streams apps, or a group no binding
  declares): every binding of the cluster, since any of them may be affected;
- a pasted config (no cluster): no binding, only the kind and cause.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from django.urls import reverse

from auditor.lint.engine.evidence import describe, explains
from auditor.pipelines.models import Binding

_TOPIC_SUBJECT = re.compile(r"^topic (?P<topic>\S+)$")
_GROUP_SUBJECT = re.compile(r"\(group (?P<group>[^()]+)\)$")


@dataclass(frozen=True)
class FindingLink:
    label: str
    url: str
    binding: str | None

    def as_dict(self) -> dict[str, str | None]:
        return {"label": self.label, "url": self.url, "binding": self.binding}


class BindingIndex:
    """Every binding by cluster name, read once per page."""

    def __init__(self, bindings: Iterable[Binding]) -> None:
        self.by_cluster: dict[str, list[Binding]] = defaultdict(list)
        for binding in bindings:
            self.by_cluster[binding.cluster.name].append(binding)

    @classmethod
    def load(cls) -> BindingIndex:
        return cls(Binding.objects.select_related("cluster").order_by("name"))

    def bindings_for(self, cluster: str, target_kind: str, subject: str) -> list[Binding]:
        """The bindings a result on ``subject`` of ``cluster`` concerns (empty: unknown)."""
        on_cluster = self.by_cluster.get(cluster, []) if cluster else []
        topic = _TOPIC_SUBJECT.match(subject) if target_kind == "topic" else None
        if topic is not None:
            return [b for b in on_cluster if b.topic == topic.group("topic")]
        group = _GROUP_SUBJECT.search(subject) if target_kind == "consumer" else None
        if group is not None:
            declaring = [b for b in on_cluster if group.group("group") in (b.consumer_groups or [])]
            if declaring:
                return declaring
        return list(on_cluster)


def findings_url(binding: str | None, kind: str, cause: str | None) -> str:
    query = {"binding": binding or "", "kind": kind, "cause": cause or ""}
    return f"{reverse('reconcile:findings')}?{urlencode({k: v for k, v in query.items() if v})}"


def finding_links(rule: str, cluster: str, target_kind: str, subject: str, index: BindingIndex) -> list[FindingLink]:
    """One link per explained (kind, cause) and concerned binding; the binding is named
    in the label only when there are several, so a single-binding page stays terse."""
    pairs = explains(rule)
    bindings: Sequence[str | None] = [b.name for b in index.bindings_for(cluster, target_kind, subject)] or [None]
    links = []
    for binding in bindings:
        for pair in pairs:
            label = describe((pair,))[0]
            if len(bindings) > 1:
                label = f"{label} in {binding}"
            links.append(FindingLink(label, findings_url(binding, *pair), binding))
    return links
