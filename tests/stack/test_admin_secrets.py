"""The Django admin's change forms of clusters and source databases never show a literal secret,
and saving one unchanged keeps what is stored; `audit apply` warns of a literal secret by name."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from auditor.pipelines.models import Cluster, SourceDatabase

pytestmark = pytest.mark.django_db

CLUSTER_CONFIG = {
    "security.protocol": "SASL_SSL",
    "sasl.username": "app",
    "sasl.password": "hunter2-cluster",
    "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required password="jaaspw";',
    "ssl.ca.location": "${AUDITOR_TEST_CA}",
}
SOURCE_URL = "postgresql://app:hunter2-db@127.0.0.1:5432/tickets?sslmode=disable"


def test_the_cluster_change_form_masks_secrets_and_an_unchanged_save_keeps_them(admin_client: Client) -> None:
    cluster = Cluster.objects.create(name="secured", bootstrap_servers="127.0.0.1:9092", config=CLUSTER_CONFIG)
    page = admin_client.get(f"/admin/pipelines/cluster/{cluster.pk}/change/")
    assert page.status_code == 200
    content = page.content.decode()
    assert "hunter2-cluster" not in content and "jaaspw" not in content
    assert "****" in content and "${AUDITOR_TEST_CA}" in content and "SASL_SSL" in content
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in ("name", "bootstrap_servers", "config", "send_outcome_ms")}
    data = {name: "" if value is None else value for name, value in data.items()}
    response = admin_client.post(f"/admin/pipelines/cluster/{cluster.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[-2000:]
    cluster.refresh_from_db()
    assert cluster.config == CLUSTER_CONFIG


def test_the_source_change_form_masks_the_password_and_an_unchanged_save_keeps_it(admin_client: Client) -> None:
    source = SourceDatabase.objects.create(name="tickets", url=SOURCE_URL)
    page = admin_client.get(f"/admin/pipelines/sourcedatabase/{source.pk}/change/")
    assert page.status_code == 200
    content = page.content.decode()
    assert "hunter2-db" not in content
    assert "postgresql://app:****@127.0.0.1:5432/tickets" in content
    response = admin_client.post(
        f"/admin/pipelines/sourcedatabase/{source.pk}/change/",
        {"name": "tickets", "url": page.context["adminform"].form["url"].value()},
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    source.refresh_from_db()
    assert source.url == SOURCE_URL


def test_a_new_source_password_typed_into_the_form_is_stored(admin_client: Client) -> None:
    source = SourceDatabase.objects.create(name="tickets", url=SOURCE_URL)
    changed = SOURCE_URL.replace("hunter2-db", "${AUDITOR_TEST_DB_PASSWORD}")
    response = admin_client.post(
        f"/admin/pipelines/sourcedatabase/{source.pk}/change/", {"name": "tickets", "url": changed}
    )
    assert response.status_code == 302
    source.refresh_from_db()
    assert source.url == changed


def test_a_source_url_edited_around_its_masked_password_is_refused_and_the_stored_url_kept(
    admin_client: Client,
) -> None:
    source = SourceDatabase.objects.create(name="tickets", url=SOURCE_URL)
    shown = admin_client.get(f"/admin/pipelines/sourcedatabase/{source.pk}/change/").context["adminform"].form
    edited = shown["url"].value().replace("127.0.0.1", "db2")
    assert "app:****@db2" in edited
    response = admin_client.post(
        f"/admin/pipelines/sourcedatabase/{source.pk}/change/", {"name": "tickets", "url": edited}
    )
    assert response.status_code == 200
    assert "retype the secret: the value shown was masked" in response.content.decode()
    source.refresh_from_db()
    assert source.url == SOURCE_URL


def test_a_cluster_config_keeps_a_secret_posted_as_its_mask_beside_other_changes_and_refuses_a_new_masked_key(
    admin_client: Client,
) -> None:
    cluster = Cluster.objects.create(name="secured", bootstrap_servers="127.0.0.1:9092", config=CLUSTER_CONFIG)
    url = f"/admin/pipelines/cluster/{cluster.pk}/change/"
    form = admin_client.get(url).context["adminform"].form
    shown = json.loads(form["config"].value())
    assert shown["sasl.password"] == "****"
    data = {"name": "secured", "bootstrap_servers": "127.0.0.1:9092", "send_outcome_ms": ""}
    changed = {**shown, "sasl.username": "app2"}
    response = admin_client.post(url, {**data, "config": json.dumps(changed)})
    assert response.status_code == 302, response.content.decode()[-2000:]
    cluster.refresh_from_db()
    assert cluster.config == {**CLUSTER_CONFIG, "sasl.username": "app2"}

    response = admin_client.post(url, {**data, "config": json.dumps({**changed, "ssl.key.password": "****"})})
    assert response.status_code == 200
    assert "ssl.key.password: **** is how a hidden secret is shown, not a value" in response.content.decode()
    cluster.refresh_from_db()
    assert cluster.config == {**CLUSTER_CONFIG, "sasl.username": "app2"}


LITERAL = """\
clusters:
  local:
    bootstrap_servers: 127.0.0.1:9092
    config:
      sasl.password: hunter2-cluster
      sasl.username: app
      ssl.key.location: /etc/kafka/client.key
sources:
  tickets_db:
    url: postgresql://app:hunter2-db@127.0.0.1:5432/tickets
"""


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_apply_warns_of_a_literal_secret_by_name_and_never_prints_it(tmp_path: Path, as_json: bool) -> None:
    """README and tests use ${ENV} references, but a literal ssl.key.location (a file, a secret
    key by name) is documented: apply takes literal secrets and names each in a warning."""
    path = tmp_path / "literal.yaml"
    path.write_text(LITERAL)
    out = StringIO()
    call_command("audit", "apply", str(path), *(["--json"] if as_json else []), stdout=out)
    output = out.getvalue()
    assert "hunter2" not in output
    assert Cluster.objects.get(name="local").config["sasl.password"] == "hunter2-cluster"
    if as_json:
        warnings = json.loads(output)["warnings"]
        assert [(w["field"], w["line"]) for w in warnings] == [
            ("clusters.local.config.sasl.password", 5),
            ("sources.tickets_db.url", 10),
        ]
    else:
        lines = [line for line in output.splitlines() if line.startswith("warning:")]
        assert len(lines) == 2, output
        assert "clusters.local.config.sasl.password: a secret written in the file" in lines[0]
        assert "sources.tickets_db.url: a password written in the file" in lines[1]
