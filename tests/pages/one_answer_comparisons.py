"""The comparisons of ``tests/pages/test_one_answer.py``: each figure that appears in two places,
and the places it appears.

A comparison is a function decorated with ``@compares("what")`` that takes the ``Reads`` (pages
and APIs, each read once and cached) and returns, per subject (a team, the fleet), the
``(where, value)`` pairs that must all be equal. Add one by writing a function: the figure, the
places it appears, read from what the reader sees (the page's context, its cards, its chart
JSON, the API's JSON); then name, in the test module's ``PERTURBED``, what ONE of its places
calls, so its meta-test can show it fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.urls import reverse

from tests.pages.one_answer_reads import (
    Reads,
    by_team,
    cards,
    chart_bars,
    number,
    one,
)

Pairs = list[tuple[str, Any]]  # numbers, or sentences that must be equal
Compared = dict[str, Pairs]  # subject → the places it appears, with their values
COMPARISONS: dict[str, Callable[[Reads], Compared]] = {}


def compares(what: str) -> Callable[[Callable[[Reads], Compared]], Callable[[Reads], Compared]]:
    def register(function: Callable[[Reads], Compared]) -> Callable[[Reads], Compared]:
        COMPARISONS[what] = function
        return function

    return register


@compares("busy but not working now (GPUs)")
def busy_now(reads: Reads) -> Compared:
    busy = reads.busy
    return {
        "fleet": [
            ("overview FleetNow.busy", reads.overview.context["now"].busy),
            ("busy page card", number(cards(busy)["busy-now"]["value"])),
            ("busy page GPU table", sum(row["gpus"] for row in busy.context["gpus_now"])),
        ]
    }


@compares("busy but not working over the range (GPU-h)")
def busy_hours(reads: Reads) -> Compared:
    busy = reads.busy
    return {
        "fleet": [
            ("busy page card", number(cards(busy)["busy-hours"]["value"])),
            (
                "busy page teams",
                sum(team.figures.busy_not_working_gpu_hours for team in busy.context["teams"]),
            ),
        ]
    }


@compares("allocated GPU-h over the range, fleet")
def allocated_fleet(reads: Reads) -> Compared:
    return {
        "fleet": [
            (
                "overview flavors",
                sum(f.figures.allocated_gpu_hours for f in reads.overview.context["flavors"]),
            ),
            ("chargeback by flavor", reads.chargeback("flavor")["totals"]["allocated_gpu_hours"]),
            ("chargeback by team", reads.chargeback("team")["totals"]["allocated_gpu_hours"]),
            ("chargeback by cluster", reads.chargeback("cluster")["totals"]["allocated_gpu_hours"]),
            ("busy page share's denominator", number(cards(reads.busy)["busy-share"]["note"])),
        ]
    }


@compares("idle GPU-h over the range, per team")
def idle_per_team(reads: Reads) -> Compared:
    rows = {row["group"]: row for row in reads.chargeback("team")["rows"]}
    compared: Compared = {}
    for team in reads.overview.context["teams"]:
        if team.key in rows:
            compared[team.key] = [
                ("overview team table", team.figures.idle_gpu_hours),
                ("chargeback", rows[team.key]["idle_gpu_hours"]),
            ]
    assert compared, "no team in both"
    return compared


@compares("GPU-hours and cost per workload over the range")
def workload_charges(reads: Reads) -> Compared:
    listed = reads.page("dashboard:workload-list", sort="gpu_hours").context["rows"]
    rows = {row["group"]: row for row in reads.chargeback("workload")["rows"]}
    compared: Compared = {}
    for row in listed[:10]:
        workload = row["workload"]
        charged = rows.get(f"{workload.namespace}/{workload.name}")
        if charged is None or not charged["allocated_gpu_hours"]:
            continue
        compared[f"{workload.name} GPU-h"] = [
            ("workload list", number(row["gpu_hours"])),
            ("chargeback", round(charged["allocated_gpu_hours"], 1)),
        ]
        compared[f"{workload.name} cost"] = [
            ("workload list", number(row["cost"])),
            ("chargeback", charged["cost"]["total"]),
        ]
    assert compared, "no workload in both"
    return compared


@compares("pending GPUs now, by flavor, on the overview")
def pending_now(reads: Reads) -> Compared:
    now = reads.overview.context["now"]
    waits = reads.overview.context["waits"]
    requesting = sum(gpus for gpus, _count in now.pending_by_queue.values())
    return {
        "fleet": [
            ("pending-while-free per flavor, summed", sum(wait.pending for wait in waits)),
            ("pending workloads that request GPUs", requesting),
        ]
    }


# --- Teams, My teams, queues and cohorts ----------------------------------------------------------


def team_figure(figure: str, card: str, chart: str | None) -> Callable[[Reads], Compared]:
    """Per team, one range figure: overview, Teams list, team page, My teams, chargeback,
    the OpenCost allocation API, the cohort page's members and (where one draws it) a chart."""

    def compare(reads: Reads) -> Compared:
        charged = by_team(reads.chargeback("team")["rows"])
        allocation = reads.allocation("team")
        listed = {row["team"].name: row for row in reads.teams.context["rows"]}
        mine = {card_["team"].name: card_ for card_ in reads.my_teams.context["cards"]}
        members = reads.cohort_members
        drawn = chart_bars(reads.page(chart).json()) if chart else {}
        compared: Compared = {}
        for team in reads.overview.context["teams"]:
            pairs: Pairs = [
                ("overview team table", getattr(team.figures, f"{figure}_gpu_hours")),
                ("chargeback", charged[team.key][f"{figure}_gpu_hours"]),
                ("Teams list", number(listed[team.key][card])),
                (
                    "team page",
                    getattr(reads.team(team.key).context["figures"], f"{figure}_gpu_hours"),
                ),
            ]
            if figure in ("allocated", "active", "idle"):
                pairs.append(
                    ("allocation API", allocation[team.key]["gpuLedger"][f"{figure}_gpu_hours"])
                )
            if figure in ("allocated", "idle"):
                pairs.append(("My teams", number(mine[team.key][f"{figure}_hours"])))
            if figure in ("allocated", "active", "idle") and team.key in members:
                pairs.append(("cohort page members", number(members[team.key][f"{figure}_hours"])))
            if chart:
                pairs.append((f"{chart} JSON", drawn.get(team.key, 0.0)))
            compared[team.key] = pairs
        assert compared, "no team"
        return compared

    return compare


for _figure, _card, _chart in (
    ("allocated", "allocated", None),
    ("active", "active", "dashboard:chart-team-active"),
    ("idle", "idle", "dashboard:chart-team-idle"),
    ("borrowed", "borrowed", None),
    ("nominal", "nominal", None),
):
    compares(f"{_figure} GPU-h over the range, per team, on every team page and API")(
        team_figure(_figure, _card, _chart)
    )


@compares("borrowed and lent GPU-h over the range: cohort lender→borrower table vs chargeback")
def cohort_flows(reads: Reads) -> Compared:
    charged = by_team(reads.chargeback("team")["rows"])
    compared: Compared = {}
    for cohort in reads.cohorts:
        flows = reads.cohort(cohort).context["flows"]
        assert not any(row["pool"] for row in flows["rows"]), "a cohort without quota lends"
        for name, total in zip(flows["borrowers"], flows["totals"], strict=True):
            compared[f"{name} borrowed"] = [
                ("cohort table, borrower column", total),
                ("chargeback borrowed", charged[name]["borrowed_gpu_hours"]),
            ]
        for row in flows["rows"]:
            compared[f"{row['name']} lent"] = [
                ("cohort table, lender row", row["total"]),
                ("chargeback lent", charged[row["name"]]["lent_gpu_hours"]),
            ]
        compared[f"{cohort} balance"] = [
            ("cohort table, borrowed", sum(flows["totals"])),
            ("cohort table, lent", flows["total"]),
        ]
    assert len(compared) > 2, "no borrowing in a cohort"
    return compared


@compares("quota used over the range, per team and flavor (My teams)")
def quota_used(reads: Reads) -> Compared:
    charged = by_team(reads.chargeback("team")["rows"])
    per_flavor: dict[str, float] = {}
    compared: Compared = {}
    for card in reads.my_teams.context["cards"]:
        team = card["team"].name
        for row in card["quota_used"]:
            per_flavor[row["flavor"]] = per_flavor.get(row["flavor"], 0.0) + number(
                row["allocated"]
            )
            if not number(row["nominal"]):
                continue  # no nominal quota of that flavor: "—"
            compared[f"{team} {row['flavor']} used %"] = [
                ("My teams", number(row["used"])),
                ("allocated ÷ nominal", 100 * number(row["allocated"]) / number(row["nominal"])),
            ]
        compared[f"{team} allocated"] = [
            ("My teams, flavors summed", sum(number(r["allocated"]) for r in card["quota_used"])),
            ("chargeback", charged[team]["allocated_gpu_hours"]),
        ]
        compared[f"{team} nominal"] = [
            ("My teams, flavors summed", sum(number(r["nominal"]) for r in card["quota_used"])),
            ("chargeback", charged[team]["nominal_gpu_hours"]),
        ]
    flavors = by_team(reads.chargeback("flavor")["rows"])
    for flavor, allocated in per_flavor.items():
        compared[f"fleet {flavor}"] = [
            ("My teams, teams summed", allocated),
            ("chargeback by flavor", flavors[flavor]["allocated_gpu_hours"]),
        ]
    return compared


@compares("admitted, nominal and pending GPUs now, per queue")
def queue_now(reads: Reads) -> Compared:
    listed = {
        row["queue"].name: row for row in reads.page("dashboard:cluster-queue-list").context["rows"]
    }
    mine = {card["team"].name: card for card in reads.my_teams.context["cards"]}
    teams = {row["team"].name: row for row in reads.teams.context["rows"]}
    members = reads.cohort_members
    compared: Compared = {}
    for name, row in listed.items():
        queue = row["queue"]
        stats = cards(reads.queue(name), "stats")
        team = reads.team(queue.team.name)
        (on_team,) = [r for r in team.context["queue_rows"] if r["queue"].name == name]
        team_stats = cards(team, "stats")
        compared[f"{name} admitted"] = [
            ("queue list", number(row["usage"])),
            ("queue page", number(stats["stat-usage"]["value"])),
            ("team page queue table", on_team["usage"]),
            ("team page card", number(team_stats["stat-allocated-now"]["value"])),
            ("Teams list", number(teams[queue.team.name]["now"])),
            ("My teams", number(mine[queue.team.name]["admitted"])),
        ] + ([("cohort page", number(members[name]["usage"]))] if name in members else [])
        compared[f"{name} nominal"] = [
            ("queue list", number(row["nominal"])),
            ("queue page", number(stats["stat-nominal"]["value"])),
            ("team page queue table", on_team["nominal"]),
        ] + ([("cohort page", number(members[name]["nominal"]))] if name in members else [])
        compared[f"{name} pending"] = [
            ("queue page", number(stats["stat-pending"]["value"])),
            ("team page", number(team_stats["stat-pending"]["value"])),
            ("My teams", mine[queue.team.name]["pending"]["gpus"]),
        ]
        compared[f"{name} held by running pods"] = [
            ("team page", number(team_stats["stat-held-now"]["value"])),
            ("Teams list", number(teams[queue.team.name]["held"])),
            ("My teams", number(mine[queue.team.name]["held"])),
        ]
    return compared


@compares("nominal and admitted GPUs now, per cohort")
def cohort_now(reads: Reads) -> Compared:
    listed = {
        row["cohort"].name: row for row in reads.page("dashboard:cohort-list").context["rows"]
    }
    compared: Compared = {}
    for name in reads.cohorts:
        page = reads.cohort(name)
        stats = cards(page, "stats")
        rows = page.context["member_rows"]
        for figure, testid in (("nominal", "stat-nominal"), ("usage", "stat-usage")):
            compared[f"{name} {figure}"] = [
                ("cohort list", number(listed[name][figure])),
                ("cohort page card", number(stats[testid]["value"])),
                ("cohort page members, summed", sum(number(r[figure]) for r in rows)),
            ]
    return compared


# --- Fleet map, nodes and GPUs --------------------------------------------------------------------


@compares("GPUs and GPUs held now, per node: fleet map vs node page")
def nodes(reads: Reads) -> Compared:
    compared: Compared = {}
    for row in reads.map_rows:
        node = row["node"]
        if node.name not in reads.special_nodes.values():
            continue
        page = cards(reads.page("dashboard:node", node.pk))
        compared[f"{node.name} GPUs"] = [
            ("fleet map table", number(row["cells"]["gpus"])),
            ("node page card", number(page["node-gpus"]["value"])),
        ]
        compared[f"{node.name} devices"] = [
            ("fleet map table", number(row["cells"]["devices"])),
            ("node page card", number(page["node-gpus"]["note"])),
        ]
        compared[f"{node.name} devices held"] = [
            ("fleet map node story", row["story"].held_devices),
            ("node page card", number(page["node-held"]["value"])),
        ]
    # By hand from the scenario: the MIG node's 23 devices are instances whose compute slices add
    # up to 7.1 GPUs (slices/7), and its time-sliced node has 8 physical GPUs, each counted once
    # however many pods share it.
    compared["MIG node GPUs, by hand"] = [
        ("scenario", 7.1),
        *compared[f"{reads.special_nodes['mig']} GPUs"][:2],
    ]
    compared["time-sliced node GPUs, by hand"] = [
        ("scenario", 8.0),
        *compared[f"{reads.special_nodes['shared']} GPUs"][:2],
    ]
    return compared


@compares("capacity and GPUs held now: overview vs fleet map")
def fleet_capacity(reads: Reads) -> Compared:
    overview = cards(reads.overview)
    return {
        "fleet GPUs": [
            ("overview capacity card", number(overview["capacity"]["value"])),
            (
                "fleet map table, nodes summed",
                sum(number(row["cells"]["gpus"]) for row in reads.map_rows),
            ),
        ],
        "fleet held": [
            ("overview allocated card", number(overview["allocated"]["value"])),
            ("fleet map, nodes summed", sum(row["story"].held for row in reads.map_rows)),
        ],
    }


@compares("SM_ACTIVE now, per GPU: node page vs GPU page")
def gpus(reads: Reads) -> Compared:
    compared: Compared = {}
    for row in reads.map_rows:
        if row["node"].name not in reads.special_nodes.values():
            continue
        node = reads.page("dashboard:node", row["node"].pk)
        for gpu_row in node.context["gpu_rows"]:
            if gpu_row["activity_pct"] is None:
                continue
            gpu = gpu_row["gpu"]
            shown = reads.page("dashboard:gpu", gpu.pk)
            compared[str(gpu)] = [
                ("node page GPU table", round(gpu_row["activity_pct"], 1)),
                ("GPU page card", round(shown.context["activity"], 1)),
            ]
    assert compared, "no GPU with telemetry"
    return compared


# --- Workloads and the pending explanation --------------------------------------------------------


@compares(
    "GPU-hours, cost and GPUs held, per workload: workload page vs list, team page, chargeback"
)
def workload_pages(reads: Reads) -> Compared:
    listed = reads.page("dashboard:workload-list", sort="gpu_hours").context["rows"]
    charged = {row["group"]: row for row in reads.chargeback("workload")["rows"]}
    compared: Compared = {}
    for row in listed[:6]:
        workload = row["workload"]
        stats = cards(reads.page("dashboard:workload-detail", workload.pk), "stats")
        on_team = {
            r["workload"].pk: r for r in reads.team(row["team"].name).context["workload_rows"]
        }
        charge = charged[f"{workload.namespace}/{workload.name}"]
        compared[f"{workload.name} GPU-h"] = [
            ("workload page", number(stats["stat-gpu-hours"]["value"])),
            ("workload list", number(row["gpu_hours"])),
            ("chargeback", round(charge["allocated_gpu_hours"], 1)),
        ] + (
            [("team page", number(on_team[workload.pk]["gpu_hours"]))]
            if workload.pk in on_team
            else []
        )
        compared[f"{workload.name} cost"] = [
            ("workload page", number(stats["stat-cost"]["value"])),
            ("workload list", number(row["cost"])),
            ("chargeback", charge["cost"]["total"]),
        ] + (
            [("team page", number(on_team[workload.pk]["cost"]))] if workload.pk in on_team else []
        )
        if stats["stat-gpus"]["label"] != "GPUs held":
            continue  # a finished workload shows the most its pods held at once
        compared[f"{workload.name} held"] = [
            ("workload page", number(stats["stat-gpus"]["value"])),
            ("running pods' GPUs", reads.held_by_pods(workload)),
        ]
    return compared


@compares("why a workload is pending: one sentence on every page and the quota preview")
def pending_reasons(reads: Reads) -> Compared:
    from quotas.models import Workload

    mine = {
        row["workload"].pk: row["short_reason"]
        for card in reads.my_teams.context["cards"]
        for row in card["pending_rows"]
    }
    compared: Compared = {}
    for workload in Workload.objects.pending().select_related("cluster_queue__team")[:8]:
        queue = workload.cluster_queue
        assert queue is not None and queue.team is not None, workload
        team = reads.team(queue.team.name).context["workload_rows"]
        said = [
            (
                "workload page",
                reads.page("dashboard:workload-detail", workload.pk).context["short_reason"],
            ),
            ("queue page", one(reads.queue(queue.name).context["pending_rows"], workload)),
            ("team page", one(team, workload)),
            ("quota preview", reads.preview_reason(queue, workload)),
        ]
        if workload.pk in mine:
            said.append(("My teams", mine[workload.pk]))
        compared[workload.name] = said
    assert compared, "no pending workload"
    return compared


@compares("busy but not working GPU-h per team: busy page vs its chart JSON")
def busy_chart(reads: Reads) -> Compared:
    drawn = chart_bars(reads.page("dashboard:chart-busy-teams").json())
    compared: Compared = {}
    for team in reads.busy.context["teams"]:
        if team.figures.busy_not_working_gpu_hours:
            compared[team.key] = [
                ("busy page table", team.figures.busy_not_working_gpu_hours),
                ("busy chart JSON", drawn.get(team.key, 0.0)),
            ]
    assert compared, "nobody busy but not working"
    return compared


# --- REST APIs and the chargeback page ------------------------------------------------------------


@compares("admitted, pending and nominal GPUs now, per queue: queue page vs cluster-queues API")
def queue_api(reads: Reads) -> Compared:
    compared: Compared = {}
    for queue in reads.api_list("cluster-queues"):
        stats = cards(reads.queue(queue["name"]), "stats")
        now = queue["gpus_now"]
        compared[f"{queue['name']} admitted"] = [
            ("queue page", number(stats["stat-usage"]["value"])),
            ("cluster-queues API gpus_now.total", now.get("total")),
        ]
        compared[f"{queue['name']} pending"] = [
            ("queue page", number(stats["stat-pending"]["value"])),
            ("cluster-queues API gpus_now.pending", now.get("pending")),
        ]
        compared[f"{queue['name']} nominal"] = [
            ("queue page", number(stats["stat-nominal"]["value"])),
            ("cluster-queues API gpus_now.nominal", round(now["nominal"], 1)),
        ]
    assert compared, "no queue in the API"
    return compared


@compares("GPUs admitted (quota) per workload: workload page vs workloads API")
def workload_api(reads: Reads) -> Compared:
    compared: Compared = {}
    for workload in reads.api_list("workloads"):
        if workload["state"] != "admitted":
            continue
        stats = cards(reads.page("dashboard:workload-detail", workload["id"]), "stats")
        note = stats["stat-gpus"]["note"]
        compared[workload["name"]] = [
            ("workload page card", number(note.split("admitted (quota)")[1])),
            ("workloads API admitted_gpus", workload["admitted_gpus"]),
        ]
        if len(compared) >= 6:
            break
    assert compared, "no admitted workload in the API"
    return compared


@compares("chargeback per team: chargeback page vs chargeback API")
def chargeback_page(reads: Reads) -> Compared:
    page = reads.page("dashboard:chargeback", group_by="team")
    api = by_team(reads.chargeback("team")["rows"])
    compared: Compared = {}
    for row in page.context["rows"]:
        charged = api[row["group"]]
        for shown, field in (
            ("allocated", "allocated_gpu_hours"),
            ("active", "active_gpu_hours"),
            ("idle", "idle_gpu_hours"),
            ("borrowed", "borrowed_gpu_hours"),
            ("lent", "lent_gpu_hours"),
        ):
            compared[f"{row['group']} {shown}"] = [
                ("chargeback page", number(row[shown])),
                ("chargeback API", round(charged[field], 1)),
            ]
        compared[f"{row['group']} cost"] = [
            ("chargeback page", number(row["cost_total"])),
            ("chargeback API", charged["cost"]["total"]),
        ]
    assert compared, "no row on the chargeback page"
    return compared


@compares("nominal GPU-h over the range, MIG quota at slices/7")
def mig_nominal(reads: Reads) -> Compared:
    """The platform queue's quota is 8 whole A100s plus MIG instances (1g, 2g, 3g): its nominal
    GPU-hours are its spec's quota in GPUs (a MIG ``Ng`` instance N/7 of one) × the range's 24
    hours, worked out here from the stored quota, not from the rollups the pages read."""
    from core.mig import gpu_share
    from quotas.models import ClusterQueueQuota

    quotas = ClusterQueueQuota.objects.filter(cluster_queue__name="platform")
    kinds = set(quotas.values_list("resource", flat=True))
    assert "nvidia.com/gpu" in kinds and any(k.startswith("nvidia.com/mig-") for k in kinds)
    gpus = sum(float(q.nominal) * (gpu_share(q.resource) or 0.0) for q in quotas)
    teams = {row["group"]: row for row in reads.chargeback("team")["rows"]}
    queues = {row["group"]: row for row in reads.chargeback("cluster_queue")["rows"]}
    return {
        "platform": [
            ("spec quota in GPUs × 24 h", round(gpus * 24, 1)),
            ("chargeback by team", teams["platform"]["nominal_gpu_hours"]),
            ("chargeback by queue", queues["platform"]["nominal_gpu_hours"]),
        ]
    }


@compares("an idle workload's alert and its workload page: wasted GPU-h and cost")
def alert_vs_workload(reads: Reads) -> Compared:
    """The idle workload episode that wasted the most, on the episode page and in the alerts
    API, against its workload page over its life: the same ended hours, the same rate card
    (README "Which hours a range counts", docs/architecture.md "Hoarding alerts")."""
    from alerts.choices import Rule
    from alerts.models import Episode

    episode = (
        Episode.objects.filter(rule=Rule.IDLE_WORKLOAD, workload__isnull=False)
        .order_by("-idle_gpu_hours")
        .first()
    )
    assert episode is not None and episode.workload is not None, [
        (e.rule, e.subject_key) for e in Episode.objects.all()
    ]
    # The workload page over its whole life counts the hours the episode's GPUs were held; the
    # episode covers the idle part of them, all of it for a notebook idle since it started.
    alert = reads.client.get(reverse("dashboard:episode-detail", args=[episode.pk]))
    page = reads.client.get(reverse("dashboard:workload-detail", args=[episode.workload_id]))
    api = reads.client.get(reverse("alert-detail", args=[episode.pk])).json()
    alert_cards = {card["testid"]: card for card in alert.context["stats"]}
    page_cards = {card["testid"]: card for card in page.context["stats"]}
    return {
        f"{episode.workload.name} wasted GPU-h": [
            ("episode page", number(alert_cards["stat-idle"]["value"])),
            ("alerts API, through the last ended hour", round(api["ended_idle_gpu_hours"], 1)),
            ("workload page idle GPU-hours", number(page_cards["stat-idle"]["note"])),
        ],
        f"{episode.workload.name} cost": [
            ("episode page", number(alert_cards["stat-cost"]["value"])),
            ("alerts API", round(float(api["ended_cost"]), 2)),
            ("workload page", number(page_cards["stat-cost"]["value"])),
        ],
    }


@compares("nominal GPUs now, MIG quota at slices/7")
def mig_nominal_now(reads: Reads) -> Compared:
    """The platform queue's quota now (8 whole A100s plus MIG instances) in GPUs, each MIG
    ``Ng`` instance N/7 of one, worked out from the stored quota, against every page and API
    that shows a queue's nominal quota now."""
    from core.mig import gpu_share
    from quotas.models import ClusterQueueQuota

    quotas = ClusterQueueQuota.objects.filter(cluster_queue__name="platform")
    assert any(k.startswith("nvidia.com/mig-") for k in quotas.values_list("resource", flat=True))
    gpus = round(sum(float(q.nominal) * (gpu_share(q.resource) or 0.0) for q in quotas), 1)
    listed = {
        row["queue"].name: row for row in reads.page("dashboard:cluster-queue-list").context["rows"]
    }
    queue = listed["platform"]["queue"]
    team_queues = reads.team(queue.team.name).context["queue_rows"]
    (on_team,) = [r for r in team_queues if r["queue"].name == "platform"]
    (api,) = [q for q in reads.api_list("cluster-queues") if q["name"] == "platform"]
    (mine,) = [c for c in reads.my_teams.context["cards"] if c["team"].name == queue.team.name]
    pairs: Pairs = [
        ("spec quota in GPUs", gpus),
        ("queue list", number(listed["platform"]["nominal"])),
        ("queue page", number(cards(reads.queue("platform"), "stats")["stat-nominal"]["value"])),
        ("team page queue table", round(on_team["nominal"], 1)),
        ("cluster-queues API", round(api["gpus_now"]["nominal"], 1)),
    ]
    if len(team_queues) == 1:  # the team's flavors are the queue's
        mine_nominal = sum(number(f["nominal"]) for f in mine["flavors"])
        pairs.append(("My teams flavors, summed", mine_nominal))
    if "platform" in reads.cohort_members:
        pairs.append(("cohort page members", number(reads.cohort_members["platform"]["nominal"])))
    return {"platform": pairs}


@compares("GPU flavor of each holding workload, MIG ones too")
def holding_flavors(reads: Reads) -> Compared:
    """Each holding workload's flavor on the team page, the workload list and its workload page,
    against the flavor of its stored admission read here from the raw ``flavors`` (whole GPUs',
    else its MIG resource's: the MIG jobs of the platform queue run on a100-mig)."""
    from quotas.models import Workload

    listed = {
        row["workload"].pk: row["flavor"]
        for row in reads.page("dashboard:workload-list", state="holding").context["rows"]
    }
    compared: Compared = {}
    for workload in Workload.objects.holding().select_related("cluster_queue__team"):
        queue = workload.cluster_queue
        if queue is None or queue.team is None or not workload.flavors:
            continue
        admitted = workload.flavors.get("nvidia.com/gpu") or next(
            flavor for resource, flavor in sorted(workload.flavors.items()) if "/mig-" in resource
        )
        team_rows = reads.team(queue.team.name).context["workload_rows"]
        on_team = {r["workload"].pk: r for r in team_rows}
        page = reads.page("dashboard:workload-detail", workload.pk)
        pairs: Pairs = [("stored admission", admitted), ("workload page", page.context["flavor"])]
        if workload.pk in on_team:
            pairs.append(("team page workloads", on_team[workload.pk]["flavor"]))
        if workload.pk in listed:
            pairs.append(("workload list", listed[workload.pk]))
        compared[workload.name] = pairs
    assert any("a100-mig" in str(pairs) for pairs in compared.values()), "no MIG workload"
    return compared
