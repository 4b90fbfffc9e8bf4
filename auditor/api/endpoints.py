"""The core API endpoints: who am I, the configured bindings, and the API's own description."""

from __future__ import annotations

from typing import Any

from auditor.accounts.roles import ROLES, has_role, highest_role
from auditor.api.registry import ApiCall, Param, build_openapi, endpoint, paginate, registry
from auditor.pipelines.ledgers import ledger_topics
from auditor.pipelines.models import Binding
from auditor.vocabulary import GUARANTEES

ME_SCHEMA = {
    "type": "object",
    "properties": {
        "username": {"type": "string"},
        "role": {"type": ["string", "null"], "enum": [*ROLES, None]},
        "roles": {"type": "array", "items": {"type": "string"}},
        "auth": {"type": "string", "enum": ["token", "session"]},
        "token": {"type": ["object", "null"]},
    },
}
BINDING_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "cluster": {"type": "string"},
        "topic": {"type": "string"},
        "source": {"type": "string"},
        "table": {"type": "string"},
        "key_column": {"type": "string"},
        "record_key": {"type": "string"},
        "created_column": {"type": "string"},
        "timestamp_zone": {"type": "string", "description": "the zone of its timestamp columns without one"},
        "grace_seconds": {"type": "integer"},
        "guarantee": {"type": "string", "enum": list(GUARANTEES)},
        "consumer_groups": {"type": "array", "items": {"type": "string"}},
        "schedule_seconds": {"type": "integer"},
        "producer_ledger_topic": {"type": "string", "description": "the probes' producer ledger"},
        "consumer_ledger_topic": {"type": "string", "description": "the probes' consumer ledger"},
        "updated_at": {"type": "string", "format": "date-time"},
    },
}


@endpoint("me/", name="me", summary="The calling user, their role and the token in use", tag="accounts", item=ME_SCHEMA)
def me(call: ApiCall) -> dict[str, Any]:
    return {
        "username": call.user.get_username(),
        "role": highest_role(call.user),
        "roles": [role for role in ROLES if has_role(call.user, role)],
        "auth": "token" if call.token else "session",
        "token": call.token.as_dict() if call.token else None,
    }


def serialize_binding(binding: Binding) -> dict[str, Any]:
    return {
        "name": binding.name,
        "cluster": binding.cluster.name,
        "topic": binding.topic,
        "source": binding.source.name,
        "table": binding.table,
        "key_column": binding.key_column,
        "record_key": binding.record_key,
        "created_column": binding.created_column,
        "timestamp_zone": binding.timestamp_zone,
        "grace_seconds": binding.grace_seconds,
        "guarantee": binding.guarantee,
        "consumer_groups": binding.consumer_groups,
        "schedule_seconds": binding.schedule_seconds,
        **dict(zip(("producer_ledger_topic", "consumer_ledger_topic"), ledger_topics(binding), strict=True)),
        "updated_at": binding.updated_at.isoformat(),
    }


@endpoint(
    "pipelines/bindings/",
    name="bindings-list",
    summary="Bindings (topic <-> source table), by name",
    tag="pipelines",
    query=[Param("cluster", description="only bindings on this cluster (its name)", max_length=100)],
    item=BINDING_SCHEMA,
    paginated=True,
)
def list_bindings(call: ApiCall) -> dict[str, Any]:
    bindings = Binding.objects.select_related("cluster", "source").order_by("name")
    if call.query["cluster"]:
        bindings = bindings.filter(cluster__name=call.query["cluster"])
    return paginate(call, bindings, serialize_binding)


@endpoint("openapi.json", name="openapi", summary="This API's OpenAPI 3.1 description", tag="meta")
def openapi(call: ApiCall) -> dict[str, Any]:
    return build_openapi(registry.all(), title="Kafka delivery auditor API", version="1")
