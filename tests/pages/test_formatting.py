"""The dashboard's number formatting (dashboard/templatetags/formatting.py), as functions and as
template filters: the same text either way, and "—" for no data, never 0."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.template import Context, Template

from dashboard.templatetags.formatting import (
    duration,
    figure,
    gpu_label,
    gpus,
    percent,
    quantity,
)


def render(source: str, **context: object) -> str:
    return Template("{% load formatting %}" + source).render(Context(context))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "—"),
        (0, "0"),
        (12.0, "12"),
        (1234.0, "1,234"),
        (1234.56, "1,234.6"),
        (2.96, "3.0"),
        (Decimal("16"), "16"),
        (Decimal("0.5"), "0.5"),
    ],
)
def test_figure_writes_whole_numbers_plain_and_rounds_the_rest(value, expected):
    assert figure(value) == expected
    assert render("{{ value|figure }}", value=value) == expected


def test_figure_takes_the_number_of_digits():
    assert figure(2.0004, digits=3) == "2.000"
    assert render("{{ value|figure:3 }}", value=1.23456) == "1.235"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(8.0, "8"), (2.96, "3"), (2.5, "2.5"), (1234.04, "1,234"), (None, "—")],
)
def test_gpus_never_end_in_point_zero(value, expected):
    assert gpus(value) == expected
    assert render("{{ value|gpus }}", value=value) == expected


@pytest.mark.parametrize(
    ("ratio", "expected"), [(None, "—"), (0.0, "0.0"), (0.4567, "45.7"), (1.0, "100.0")]
)
def test_percent_writes_a_ratio_as_a_percentage_without_the_sign(ratio, expected):
    assert percent(ratio) == expected
    assert render("{{ ratio|percent }}", ratio=ratio) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (None, "—"),
        (-5, "0 s"),
        (45, "45 s"),
        (89, "89 s"),
        (90, "2 min"),
        (60 * 89, "89 min"),
        (3 * 3600 + 12 * 60, "3 h 12 min"),
        (28 * 3600, "1 d 4 h"),
        (5 * 3600, "5 h"),
        (5 * 3600 + 59, "5 h"),
        (48 * 3600, "2 d"),
        (48 * 3600 + 1800, "2 d"),
    ],
)
def test_duration_picks_the_unit_that_reads_best(seconds, expected):
    assert duration(seconds) == expected
    assert render("{{ seconds|duration }}", seconds=seconds) == expected


@pytest.mark.parametrize(
    ("value", "resource", "expected"),
    [
        (None, "nvidia.com/gpu", "unlimited"),
        (Decimal("0"), "nvidia.com/gpu", "0"),
        (Decimal("16"), "nvidia.com/gpu", "16"),
        (Decimal("0.125"), "cpu", "0.125"),
        (Decimal(4096 * 2**30), "memory", "4,096 GiB"),
        (Decimal(2**29), "example.com/memory", "0.5 GiB"),
    ],
)
def test_quantity_writes_a_quota_in_its_resource_unit(value, resource, expected):
    assert quantity(value, resource) == expected
    assert render("{{ value|quantity:resource }}", value=value, resource=resource) == expected


def test_gpu_label_names_the_gpu_and_its_mig_instance():
    whole = SimpleNamespace(index=3, gi_id="", mig_profile="")
    mig = SimpleNamespace(index=3, gi_id="7", mig_profile="1g.10gb")
    unknown = SimpleNamespace(index=0, gi_id="2", mig_profile="")

    assert gpu_label(whole) == "GPU 3"
    assert gpu_label(mig) == "GPU 3 · MIG 1g.10gb (GI 7)"
    assert gpu_label(unknown) == "GPU 0 · MIG ? (GI 2)"
    assert render("{{ gpu|gpu_label }}", gpu=mig) == "GPU 3 · MIG 1g.10gb (GI 7)"
