"""Scraping /metrics/ as Prometheus does."""

from __future__ import annotations

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

URL = "/metrics/"


def scrape(headers: dict[str, str]) -> list[str]:
    response = Client().get(URL, headers=headers)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = response.content.decode()
    list(text_string_to_metric_families(text))  # Prometheus' own parser accepts every line
    return text.splitlines()
