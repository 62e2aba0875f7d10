"""One answer to "why is this workload pending": My teams, the team page, the queue page, the
workload page and the quota-change preview say the same sentence for the same workload.

job-llama-eval (a3) needs 8 GPUs and Kueue says "insufficient unused quota for nvidia.com/gpu
in flavor h100, 8 more needed": 0 available on h100, 8 short. Its queue team-a has 8 a100 GPUs
of nominal quota too, and a3's pod sets name no node selector, so a model that tries every
flavor finds room on a100, and the preview used to say "quota allows it: waits for something
else". Kueue tried h100 only: it is 8 short now, and a change admits it only when it gives h100
at least 8 more GPUs of room.
"""

from __future__ import annotations

import copy
from decimal import Decimal

import pytest
from django.urls import reverse

from quotas.choices import QuotaChangeStatus
from quotas.models import QuotaChange
from quotas.writeback.edits import Cell
from quotas.writeback.state import synced_cells, whatif_inputs
from quotas.writeback.whatif import what_if
from tests.pages.built_once import build_once
from tests.pages.quota_pages.world import NOW, new_world

GPU = "nvidia.com/gpu"
# Worked out from the message: 8 needed, 8 short, so 0 available; 0 of it free in quota.
A3_REASON = (
    "needs 8 nvidia.com/gpu on h100: 0 available (0 free in quota, the cohort can lend 0), 8 short"
)


@pytest.fixture(scope="module")
def module_world(django_db_setup, django_db_blocker):
    yield from build_once(django_db_blocker, lambda: new_world(NOW), NOW)


@pytest.fixture
def world(module_world, db, time_machine):
    time_machine.move_to(NOW, tick=False)
    return copy.deepcopy(module_world)


@pytest.fixture
def lead_user(world):
    return world.lead  # the lead of team alpha, whose queue team-a is


def _preview(world, h100_more: int) -> dict:
    """The what-if of raising team-a's h100 nominal quota by ``h100_more`` GPUs."""
    before = synced_cells(world.cq_a)
    after = [
        Cell(
            c.flavor,
            c.resource,
            str(Decimal(c.nominal) + h100_more),
            c.borrowing_limit,
            c.lending_limit,
        )
        if (c.flavor, c.resource) == ("h100", GPU)
        else c
        for c in before
    ]
    return what_if(whatif_inputs(world.cq_a, before, after, NOW))


def _row(summary: dict, name: str) -> dict:
    (row,) = [row for row in summary["pending"] if row["name"].endswith("/" + name)]
    return row


@pytest.mark.django_db
def test_every_page_and_the_preview_give_one_reason(lead_client, staff_client, world):
    a3 = world.wl["a3"]
    said = {}

    said["workload"] = lead_client.get(reverse("dashboard:workload-detail", args=[a3.pk])).context[
        "short_reason"
    ]
    queue = staff_client.get(
        reverse("dashboard:cluster-queue-detail", args=["test", world.cq_a.name])
    )
    said["queue"] = {row["workload"].name: row for row in queue.context["pending_rows"]}[a3.name][
        "short_reason"
    ]
    team = lead_client.get(
        reverse("dashboard:team-detail", args=["alpha"]) + "?state=pending&range=7d"
    )
    said["team"] = {row["workload"].name: row for row in team.context["workload_rows"]}[a3.name][
        "short_reason"
    ]
    (card,) = lead_client.get(reverse("dashboard:my-teams")).context["cards"]
    said["my teams"] = {row["workload"].name: row for row in card["pending_rows"]}[a3.name][
        "short_reason"
    ]
    row = _row(_preview(world, 1), a3.name)
    said["preview"] = row["reason"]

    assert said == dict.fromkeys(said, A3_REASON)
    # Kueue says it is short now: the preview never says quota allows it.
    assert row["before"] == ""


@pytest.mark.django_db
def test_the_preview_admits_it_only_when_the_change_covers_kueues_shortfall(world):
    # One more h100 GPU of nominal quota adds at most 1 GPU of room: at least 7 still short.
    small = _row(_preview(world, 1), "job-llama-eval")
    assert small["after"] == ""
    assert small["still_short"] >= 7

    # 100 more: the queue's own guaranteed h100 quota alone covers the 8 it lacks.
    large = _row(_preview(world, 100), "job-llama-eval")
    assert large["after"] == "nominal"


@pytest.mark.django_db
def test_the_preview_page_shows_the_pages_sentence(staff_client, world):
    summary = _preview(world, 1)
    change = QuotaChange.objects.create(
        cluster=world.cq_a.cluster,
        target_name=world.cq_a.name,
        cluster_queue=world.cq_a,
        status=QuotaChangeStatus.PREVIEWED,
        reason="more h100 for evals",
        preview=summary,
    )

    body = staff_client.get(reverse("dashboard:quota-change-detail", args=[change.pk])).content
    text = body.decode()

    table = text.split('data-testid="pending-fit"')[1].split("</table>")[0]
    (a3_row,) = [row for row in table.split("<tr>") if "job-llama-eval" in row]
    assert A3_REASON in a3_row
    assert "quota allows it" not in a3_row
    after = a3_row.split('data-testid="pending-after">')[1].split("</td>")[0]
    assert after.endswith(" short") and float(after.split()[0]) >= 7  # 1 more GPU at most
