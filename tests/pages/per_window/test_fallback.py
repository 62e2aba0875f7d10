"""Pages that draw per-window rows, on a world whose older day was pruned by the real retention
code: per-window lines only where the rows are, the hourly rollups before, and a note that says
so. Expected values come from the world's own formulas (``pruned_world``), not from the rollups.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.urls import reverse

from ledger.window_detail import window_detail
from tests.pages.pruned_world import (
    END,
    START,
    PrunedWorld,
    hourly_mean,
    since,
    tensor,
)

RANGE = f"?start={START:%Y-%m-%dT%H:%M}&end={END:%Y-%m-%dT%H:%M}"
HALF_HOUR = timedelta(minutes=30)


def figure(response) -> dict:
    assert response.status_code == 200, response.content[:300]
    return json.loads(response.content)


def trace(fig: dict, name: str) -> dict:
    found = [t for t in fig["data"] if t["name"] == name]
    assert len(found) == 1, [t["name"] for t in fig["data"]]
    return found[0]


def moments(values: list[str]) -> list[datetime]:
    return [datetime.fromisoformat(value) for value in values]


def drawn(line: dict) -> list[datetime]:
    """The moments of a line that have a value."""
    return [m for m, v in zip(moments(line["x"]), line["y"], strict=True) if v is not None]


def older_hours(first: datetime) -> list[datetime]:
    """The hours from ``first`` up to where per-window rows start."""
    hours = []
    hour = first
    while hour < since():
        hours.append(hour)
        hour += timedelta(hours=1)
    return hours


def note(text: str) -> None:
    assert f"Before {since():%Y-%m-%d %H:%M} UTC" in text, text
    assert "per-minute detail is kept 1 day." in text, text


def test_window_detail_starts_where_the_prune_left_rows(world: PrunedWorld):
    detail = window_detail(world.cluster.pk, START, END)
    assert detail.since == since()
    assert detail.pruned and not detail.whole
    assert detail.hourly_span().starts() == older_hours(START)
    later = window_detail(world.cluster.pk, since() + timedelta(hours=1), END)
    assert later.whole and later.note() == ""
    assert later.hourly_span().count == 0


def test_gpu_chart_draws_the_nodes_hourly_means_before_its_windows(staff_client, world):
    url = reverse("dashboard:chart-gpu-activity", args=[world.gpus[0].pk]) + RANGE
    fig = figure(staff_client.get(url))

    hours = older_hours(START)
    sm = trace(fig, "SM_ACTIVE, node mean (hourly)")
    assert moments(sm["x"]) == [hour + HALF_HOUR for hour in hours]
    assert sm["y"] == pytest.approx([hourly_mean(hour) * 100 for hour in hours], abs=1e-3)
    assert sm["line"]["dash"] == "dot"
    tensor_line = trace(fig, "Tensor pipe active, node mean (hourly)")
    assert tensor_line["y"] == pytest.approx(
        [hourly_mean(hour, tensor) * 100 for hour in hours], abs=1e-3
    )
    assert trace(fig, "GPU_UTIL, node mean (hourly)")["y"] == pytest.approx([80.0] * len(hours))
    assert not [t for t in fig["data"] if t["name"].startswith("DRAM active, node")]
    # Per-window lines only where per-window rows are: never drawn over the hourly part.
    per_window = trace(fig, "SM_ACTIVE")
    assert drawn(per_window) and min(drawn(per_window)) >= since()
    note(fig["meta"]["notice"])
    assert "no per-GPU figures" in fig["meta"]["notice"]
    assert "DRAM active not kept hourly" in fig["meta"]["notice"]


def test_gpu_memory_chart_says_framebuffer_is_not_kept_hourly(staff_client, world):
    url = reverse("dashboard:chart-gpu-memory", args=[world.gpus[0].pk]) + RANGE
    fig = figure(staff_client.get(url))

    assert [t["name"] for t in fig["data"]] == ["Framebuffer used"]  # no hourly line of zeros
    assert min(moments(fig["data"][0]["x"])) >= since()
    note(fig["meta"]["notice"])
    assert "Framebuffer used is not kept in hourly figures" in fig["meta"]["notice"]


def test_a_range_with_every_window_stored_has_no_note(staff_client, world):
    later = since() + timedelta(hours=2)
    url = reverse("dashboard:chart-gpu-activity", args=[world.gpus[0].pk])
    fig = figure(staff_client.get(f"{url}?start={later:%Y-%m-%dT%H:%M}&end={END:%Y-%m-%dT%H:%M}"))

    assert fig["meta"]["notice"] == ""
    assert not [t for t in fig["data"] if "hourly" in t["name"]]
    page = staff_client.get(
        reverse("dashboard:gpu", args=[world.gpus[0].pk])
        + f"?start={later:%Y-%m-%dT%H:%M}&end={END:%Y-%m-%dT%H:%M}"
    )
    assert b'data-testid="per-window-note"' not in page.content


def test_gpu_and_node_pages_say_what_the_older_part_shows(staff_client, world):
    for name, pk in (("dashboard:gpu", world.gpus[0].pk), ("dashboard:node", world.node.pk)):
        page = staff_client.get(reverse(name, args=[pk]) + RANGE)
        assert page.status_code == 200
        text = page.content.decode()
        assert 'data-testid="per-window-note"' in text
        note(text)
        assert "no holders listed" in text
        # The holders table counts only the stored windows: the held GPU-hours after the cut.
        assert page.context["history"], name
        first = min(entry["since"] for entry in page.context["history"])
        assert first >= since()  # the first stored window starts where per-window rows do


def test_node_chart_draws_the_nodes_hourly_mean_before_its_windows(staff_client, world):
    url = reverse("dashboard:chart-node", args=[world.node.pk]) + RANGE
    fig = figure(staff_client.get(url))

    hours = older_hours(START)
    hourly = trace(fig, "Node mean (hourly)")
    assert moments(hourly["x"]) == [hour + HALF_HOUR for hour in hours]
    assert hourly["y"] == pytest.approx([hourly_mean(hour) * 100 for hour in hours], abs=1e-3)
    per_gpu = [t for t in fig["data"] if t["name"] != "Node mean (hourly)"]
    assert len(per_gpu) == 2
    for line in per_gpu:
        assert drawn(line) and min(drawn(line)) >= since()
    note(fig["meta"]["notice"])


def test_workload_chart_and_page_fall_back_to_its_hourly_mean(staff_client, world):
    url = reverse("dashboard:workload-chart-activity", args=[world.workload.pk])
    fig = figure(staff_client.get(url + RANGE + "&metric=sm_active"))

    hours = older_hours(START)
    hourly = trace(fig, "Workload mean (hourly rollup)")
    assert moments(hourly["x"]) == [hour + HALF_HOUR for hour in hours]
    assert hourly["y"] == pytest.approx([hourly_mean(hour) * 100 for hour in hours], abs=0.06)
    assert fig["meta"]["rollup_hours"] == len(hours)
    assert datetime.fromisoformat(fig["meta"]["per_window_since"]) == since()
    per_gpu = [t for t in fig["data"] if t["name"] != "Workload mean (hourly rollup)"]
    assert len(per_gpu) == 2
    for line in per_gpu:
        assert min(moments(line["x"])) >= since()
    note(fig["meta"]["notice"])

    page = staff_client.get(reverse("dashboard:workload-detail", args=[world.workload.pk]) + RANGE)
    assert 'data-testid="per-window-note"' in page.content.decode()
    note(page.content.decode())


def test_episode_evidence_falls_back_to_the_workloads_hourly_mean(staff_client, world):
    episode = world.episode
    fig = figure(staff_client.get(reverse("dashboard:episode-chart-evidence", args=[episode.pk])))

    first = (episode.started_at - timedelta(minutes=30)).replace(minute=0)
    hours = older_hours(first)
    assert hours, "the episode must straddle the cut"
    hourly = trace(fig, "Workload mean (hourly)")
    assert moments(hourly["x"]) == [hour + HALF_HOUR for hour in hours]
    assert hourly["y"] == pytest.approx([hourly_mean(hour) for hour in hours], abs=1e-3)
    per_gpu = [t for t in fig["data"] if t["name"] != "Workload mean (hourly)"]
    assert len(per_gpu) == 2
    for line in per_gpu:
        assert drawn(line) and min(drawn(line)) >= since()
    note(fig["meta"]["notice"])

    page = staff_client.get(reverse("dashboard:episode-detail", args=[episode.pk]))
    note(page.content.decode())
