"""Reading ``/metrics`` in tests: the exposition parsed with prometheus_client's own parser."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Series:
    """Every sample of an exposition, by (name, labels)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(series: Series, name: str, **labels: str) -> float:
    return series[(name, frozenset(labels.items()))]


def labelled(series: Series, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: found for (metric, labels), found in series.items() if metric == name}


def names(series: Series) -> set[str]:
    return {name for name, _ in series}


@pytest.fixture
def scrape(client: Client):
    """GET /metrics from loopback (the test client's address) and parse it; 200 or fail."""

    def read(headers: Mapping[str, str] | None = None) -> Series:
        response = client.get("/metrics", headers=dict(headers or {}))
        assert response.status_code == 200, response.content
        assert response["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(response.content.decode())

    return read
