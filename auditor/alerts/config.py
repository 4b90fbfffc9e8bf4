"""The ``webhooks:`` section of the declarative config file.

    webhooks:
      ops-slack:
        url: ${OPS_SLACK_WEBHOOK_URL}      # http(s) URL or a ${ENV} reference
        secret: ${OPS_WEBHOOK_SECRET}      # required, always a ${ENV} reference
        format: slack                      # generic (default) | slack
        enabled: true
        bindings: [tickets]                # default: every binding
        events:
          finding_kinds: [missing, duplicate]   # or: all
          stuck_verdicts: all
          lint_severity: error             # error | warning | info (that and worse)
          canary_loss: 1                   # records lost per check, at or above
          canary_latency: 5s               # p99 latency, at or above (ms or a duration)
          reports: true

``parse_webhooks_section`` validates (reporting through the caller's problem
callback, like the rest of auditor/pipelines/config.py); ``apply_webhooks`` writes,
inside the caller's transaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

from auditor.alerts.destinations import DestinationRefused, parse_webhook_url
from auditor.alerts.events import parse_event_filter
from auditor.alerts.models import Channel
from auditor.lib.secrets import ENV_REF, MissingEnvError, env_refs, resolve_env
from auditor.pipelines.models import Binding

WEBHOOK_FIELDS = ("url", "secret", "format", "enabled", "bindings", "events")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
FORMAT_VALUES = [value for value, _ in Channel.FORMATS]

Problem = Callable[[str, str], None]


def check_url(url: str, path: str, problem: Problem) -> None:
    """Report a webhook URL that cannot work: bad form, or a ${ENV} reference that is not set."""
    missing = False
    for name in env_refs(url):
        try:
            resolve_env("${" + name + "}")
        except MissingEnvError as exc:
            problem(path, str(exc))
            missing = True
    if missing:
        return
    try:
        parse_webhook_url(resolve_env(url))
    except DestinationRefused as exc:
        # The message may include the resolved URL's parts; never echo a resolved secret URL.
        problem(path, exc.message if not env_refs(url) else "the URL from the environment is not a valid http(s) URL")


def check_secret(secret: Any, path: str, problem: Problem) -> None:
    if not isinstance(secret, str) or not ENV_REF.fullmatch(secret):
        problem(path, "must be a ${ENV} reference to the signing secret, e.g. ${OPS_WEBHOOK_SECRET}")
        return
    try:
        if not resolve_env(secret):
            problem(path, f"environment variable {env_refs(secret)[0]} is empty")
    except MissingEnvError as exc:
        problem(path, str(exc))


def parse_webhooks_section(data: Any, problem: Problem, known_bindings: Collection[str]) -> dict[str, dict[str, Any]]:
    """Validate ``webhooks:``; returns {channel name: values for apply_webhooks}.

    ``problem(path, message)`` is called for each error, with paths such as
    ``webhooks.ops-slack.events.lint_severity``; ``known_bindings`` are the binding
    names of the file and of the database. Callers write nothing if any problem was reported.
    """
    parsed: dict[str, dict[str, Any]] = {}
    if data is None:
        return parsed
    if not isinstance(data, dict):
        problem("webhooks", f"must be a mapping of channel name to settings, got {type(data).__name__}")
        return parsed
    for name, item in data.items():
        path = f"webhooks.{name}"
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            problem(path, f"name {name!r} must be letters, digits, '-' or '_'")
            continue
        if not isinstance(item, dict):
            problem(path, f"must be a mapping, got {type(item).__name__}")
            continue
        for key in item:
            if key not in WEBHOOK_FIELDS:
                problem(f"{path}.{key}", f"unknown field (expected one of: {', '.join(WEBHOOK_FIELDS)})")
        url = item.get("url")
        if not isinstance(url, str) or not url:
            problem(path, "missing required field 'url'")
        else:
            check_url(url, f"{path}.url", problem)
        if "secret" not in item:
            problem(path, "missing required field 'secret'")
        else:
            check_secret(item["secret"], f"{path}.secret", problem)
        fmt = item.get("format", Channel.GENERIC)
        if fmt not in FORMAT_VALUES:
            problem(f"{path}.format", f"must be one of {', '.join(FORMAT_VALUES)}, got {fmt!r}")
        enabled = item.get("enabled", True)
        if not isinstance(enabled, bool):
            problem(f"{path}.enabled", f"must be true or false, got {enabled!r}")
        bindings = item.get("bindings") or []
        if not isinstance(bindings, list) or not all(isinstance(b, str) for b in bindings):
            problem(f"{path}.bindings", "must be a list of binding names")
            bindings = []
        for binding in bindings:
            if binding not in known_bindings:
                problem(f"{path}.bindings", f"unknown binding '{binding}'")
        events = parse_event_filter(item.get("events"), f"{path}.events", problem)
        parsed[name] = {
            "url": url,
            "secret": item.get("secret"),
            "format": fmt,
            "enabled": enabled,
            "bindings": list(bindings),
            "events": events.as_json(),
        }
    return parsed


def apply_webhooks(parsed: dict[str, dict[str, Any]], config_file: str = "") -> list[tuple[str, bool]]:
    """Create or update each channel by name (call inside the config's transaction), recording
    the file that declares it when given; returns (name, created) pairs."""
    results = []
    for name, values in parsed.items():
        defaults = {k: v for k, v in values.items() if k != "bindings"}
        if config_file:
            defaults["config_file"] = config_file
        channel, created = Channel.objects.update_or_create(name=name, defaults=defaults)
        channel.bindings.set(Binding.objects.filter(name__in=values["bindings"]))
        results.append((name, created))
    return results
