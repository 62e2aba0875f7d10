"""One access policy, checked on every URL the project serves, from both sides.

``POLICY`` declares, for every URL pattern name (``django.urls.get_resolver()``: pages, chart
JSON, the REST API with its format suffixes, chargeback, OpenCost, the schema, the admin), how
its access is checked:

- ``TEAM_SCOPED``: the URL names one team's object. Under ``private`` aspen's lead gets 200 on
  aspen's object and 404 on birch's (and birch's lead 404 on aspen's); under ``public``
  200 on both. Staff and finance get 200 on both either way.
- ``AGGREGATE``: every signed-in user gets 200. Under ``private`` nothing of birch (its name,
  queue, namespace, workloads, figures: ``birch_markers``) is in aspen's lead's body, nor
  "aspen" in birch's lead's; under ``public`` (and for staff and finance) the entry's
  ``shows`` markers are.
- ``STAFF_ONLY``: the Django admin; a lead is sent to the admin login under either setting.
- ``PUBLIC``: anonymous users get an answer (no login redirect) that shows no team.
- ``VENDOR``: a file of a package served by a view (ReDoc's bundle): anyone gets 200 and the
  same bytes whoever asks, so it cannot carry data (its megabyte of minified code would match
  the figure markers by chance).
- ``CALCULATION``: an API calculation POSTed with ``body`` that reads no team's data (the
  capacity planner): every signed-in user gets 200 and no team in it.

Every other kind refuses anonymous users. A URL pattern with no entry fails
``test_every_url_pattern_has_an_access_policy``: a new URL needs its policy here first.

Every object-bearing URL (``TEAM_SCOPED`` and ``ACTION``) is also asked, under ``private``, by
the lead who may not see the object and, for the same URL naming an object that does not exist
(``missing``): both answers must be the same 404 with the same body once the address itself is
taken out, naming neither the object nor its team (docs/architecture.md "Refusals").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import quote, urlsplit

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse

from tests.access.conftest import World, birch_markers

TEAM_SCOPED = "team-scoped"
AGGREGATE = "aggregate"
STAFF_ONLY = "staff-only"
PUBLIC = "public"
VENDOR = "vendor"
# The product's own /metrics: a scrape from loopback needs nothing, from elsewhere a signed-in
# admin or the bearer token (README "Metrics"); a lead from elsewhere is refused.
SCRAPE = "scrape"
# A form or action on one team's object (quota change requests, alert acknowledgements): the
# other team's lead is refused under either setting; anonymous users are refused.
ACTION = "action"
CALCULATION = "calculation"

Urls = Callable[[World], list[str]]


def nothing(world: World) -> list[str]:
    return []


@dataclass(frozen=True)
class Policy:
    kind: str
    # The URLs aspen's lead opens (aspen's object for TEAM_SCOPED; the URL for the others).
    own: Urls = nothing
    # TEAM_SCOPED: the same URLs naming birch's object.
    other: Urls = nothing
    # Markers of birch that appear in ``own`` bodies (together) when birch is visible.
    shows: tuple[str, ...] = field(default=())
    # ACTION: the HTTP method the action takes.
    method: str = "get"
    # CALCULATION: the JSON body posted.
    body: dict[str, object] | None = None


def url(name: str, *args: object, **query: str) -> str:
    path = reverse(name, args=list(args))
    if query:
        path += "?" + "&".join(f"{key}={value}" for key, value in query.items())
    return path


def api(name: str, *args: object) -> list[str]:
    """A REST route and its format-suffix twin (``/api/v1/teams.json``)."""
    kwargs = {"pk": args[0]} if args else {}
    return [reverse(name, kwargs=kwargs), reverse(name, kwargs={**kwargs, "format": "json"})]


def team(name: str) -> tuple[Urls, Urls]:
    return (lambda w: [url(name, "aspen")], lambda w: [url(name, "birch")])


def queue(name: str) -> tuple[Urls, Urls]:
    return (
        lambda w: [url(name, w.cluster.name, "cq-aspen")],
        lambda w: [url(name, w.cluster.name, "cq-birch")],
    )


def workload(name: str, *own: str) -> tuple[Urls, Urls]:
    return (
        lambda w: [url(name, w.workloads[key].pk) for key in own],
        lambda w: [url(name, w.workloads["birch-main"].pk)],
    )


def serving(name: str) -> tuple[Urls, Urls]:
    return (
        lambda w: [url(name, w.serving["aspen"].pk)],
        lambda w: [url(name, w.serving["birch"].pk)],
    )


def api_object(name: str, pick: Callable[[World, str], int]) -> tuple[Urls, Urls]:
    return (lambda w: api(name, pick(w, "aspen")), lambda w: api(name, pick(w, "birch")))


def window(world: World) -> str:
    return f"start={world.start:%Y-%m-%dT%H:%M:%SZ}&end={world.end:%Y-%m-%dT%H:%M:%SZ}"


LEVEL_GROUPS = ("cluster_queue", "local_queue", "cohort", "team", "priority_class")
GROUPS = ("team", "cluster_queue", "local_queue", "namespace", "workload", "cohort", "cluster")
AGGREGATE_KEYS = ("team", "clusterqueue", "localqueue", "namespace", "pod", "workload", "cohort")


def chargeback(world: World) -> list[str]:
    base = reverse("api-chargeback")
    urls = [f"{base}?{window(world)}&group_by={group}" for group in GROUPS]
    return [*urls, f"{base}?{window(world)}&group_by=team&format=csv&step=hour"]


def allocation(world: World) -> list[str]:
    base = reverse("api-allocation")
    span = f"{world.start:%Y-%m-%dT%H:%M:%SZ},{world.end:%Y-%m-%dT%H:%M:%SZ}"
    keys = [*AGGREGATE_KEYS, "team,namespace", "label:app"]
    return [f"{base}?window={span}&aggregate={key}&accumulate=true" for key in keys]


def admissions(world: World) -> list[str]:
    base = reverse("api-admissions")
    return [f"{base}?{window_around(world)}", f"{base}?{window_around(world)}&format=csv"]


def queue_levels(world: World) -> list[str]:
    base = reverse("api-queue-levels")
    urls = [
        f"{base}?{window_around(world)}&group_by={group}&step={step}"
        for group in ("cluster_queue", "local_queue", "cohort", "team", "priority_class")
        for step in ("none", "hour")
    ]
    return [*urls, f"{base}?{window_around(world)}&group_by=cluster_queue&format=csv"]


def window_around(world: World) -> str:
    """A range holding the admission records (admitted up to six hours before now)."""
    start = world.now - timedelta(hours=8)
    return f"start={start:%Y-%m-%dT%H:%M:%SZ}&end={world.now:%Y-%m-%dT%H:%M:%SZ}"


def scoped(pair: tuple[Urls, Urls], shows: tuple[str, ...] = ()) -> Policy:
    return Policy(TEAM_SCOPED, own=pair[0], other=pair[1], shows=shows)


def aggregate(own: Urls, *shows: str) -> Policy:
    return Policy(AGGREGATE, own=own, shows=shows)


def episode_of(team_name: str) -> int:
    from alerts.models import Episode

    return Episode.objects.get(team__name=team_name).pk


def change_of(team_name: str) -> int:
    from quotas.models import QuotaChange

    return QuotaChange.objects.get(cluster_queue__team__name=team_name).pk


def action(own: Urls, method: str = "get") -> Policy:
    return Policy(ACTION, own=own, method=method)


def alert_api(name: str) -> list[str]:
    pk = episode_of("aspen")
    return [reverse(name, kwargs={"pk": pk}), reverse(name, kwargs={"pk": pk, "format": "json"})]


POLICY: dict[str, Policy] = {
    # --- Open to everyone, no team data.
    "login": Policy(PUBLIC, own=lambda w: [url("login")]),
    "logout": Policy(PUBLIC, own=lambda w: [url("logout")]),
    # Sign-in with the identity provider (accounts/oidc.py): 404 while it is off.
    "oidc_authentication_init": Policy(PUBLIC, own=lambda w: [url("oidc_authentication_init")]),
    "oidc_authentication_callback": Policy(
        PUBLIC, own=lambda w: [url("oidc_authentication_callback")]
    ),
    "oidc_logout": Policy(PUBLIC, own=lambda w: [url("oidc_logout")]),
    "healthz": Policy(PUBLIC, own=lambda w: [url("healthz")]),
    "readyz": Policy(PUBLIC, own=lambda w: [url("readyz")]),
    "observability:metrics": Policy(SCRAPE, own=lambda w: [url("observability:metrics")]),
    "favicon": Policy(PUBLIC, own=lambda w: [url("favicon")]),
    # --- The Django admin: staff only, whatever GPULEDGER_TEAM_VISIBILITY says.
    "admin:*": Policy(
        STAFF_ONLY,
        own=lambda w: [
            url("admin:index"),
            url("admin:quotas_team_changelist"),
            url("admin:quotas_team_change", w.teams["birch"].pk),
            reverse("admin:app_list", kwargs={"app_label": "quotas"}),
            f"/admin/quotas/team/{w.teams['birch'].pk}/",
        ],
    ),
    # --- Pages.
    "dashboard:overview": aggregate(lambda w: [url("dashboard:overview")], "birch team", "40.1"),
    "dashboard:map": aggregate(lambda w: [url("dashboard:map")], "birch team"),
    "dashboard:node": aggregate(lambda w: [url("dashboard:node", w.node.pk)], "ns-birch"),
    "dashboard:gpu": aggregate(lambda w: [url("dashboard:gpu", w.gpus[1].pk)], "ns-birch"),
    "dashboard:busy": aggregate(lambda w: [url("dashboard:busy")], "birch team"),
    "dashboard:team-list": aggregate(lambda w: [url("dashboard:team-list")], "birch team", "40.1"),
    "dashboard:team-detail": scoped(team("dashboard:team-detail")),
    "dashboard:cohort-list": aggregate(lambda w: [url("dashboard:cohort-list")]),
    "dashboard:cohort-detail": aggregate(
        lambda w: [url("dashboard:cohort-detail", w.cluster.name, "grove")], "cq-birch", "40.1"
    ),
    "dashboard:cluster-queue-list": aggregate(
        lambda w: [
            url("dashboard:cluster-queue-list"),
            url("dashboard:cluster-queue-list", q="cq"),
        ],
        "cq-birch",
    ),
    "dashboard:cluster-queue-detail": scoped(queue("dashboard:cluster-queue-detail")),
    # aspen-train preempted birch-victim; birch-serve preempted aspen-victim (its message and
    # preemptor path name cq-birch).
    "dashboard:workload-detail": scoped(
        workload("dashboard:workload-detail", "aspen-main", "aspen-victim"),
        shows=("ns-birch/birch-victim", "ns-birch/birch-serve", "/grove/cq-birch"),
    ),
    # --- Chart JSON.
    "dashboard:chart-capacity": aggregate(lambda w: [url("dashboard:chart-capacity")]),
    "dashboard:chart-team-idle": aggregate(
        lambda w: [url("dashboard:chart-team-idle")], "birch team"
    ),
    "dashboard:chart-team-active": aggregate(
        lambda w: [url("dashboard:chart-team-active")], "birch team"
    ),
    "dashboard:chart-map": aggregate(lambda w: [url("dashboard:chart-map")], "ns-birch"),
    "dashboard:chart-node": aggregate(lambda w: [url("dashboard:chart-node", w.node.pk)]),
    "dashboard:chart-gpu-activity": aggregate(
        lambda w: [url("dashboard:chart-gpu-activity", w.gpus[1].pk)]
    ),
    "dashboard:chart-gpu-memory": aggregate(
        lambda w: [url("dashboard:chart-gpu-memory", w.gpus[1].pk)]
    ),
    "dashboard:chart-busy-teams": aggregate(
        lambda w: [url("dashboard:chart-busy-teams")], "birch team"
    ),
    "dashboard:chart-busy-time": aggregate(lambda w: [url("dashboard:chart-busy-time")]),
    # Queue service levels: aspen's lead sees aspen's records only (cq-birch's preemption of
    # aspen-victim is counted under an anonymous column).
    "dashboard:queue-levels": aggregate(
        lambda w: [
            url("dashboard:queue-levels"),
            *[url("dashboard:queue-levels", group_by=g) for g in LEVEL_GROUPS],
        ],
        "cq-birch",
    ),
    "dashboard:queue-levels-chart-waits": aggregate(
        lambda w: [url("dashboard:queue-levels-chart-waits", group_by=g) for g in LEVEL_GROUPS],
        "cq-birch",
    ),
    "dashboard:queue-levels-chart-evictions": aggregate(
        lambda w: [url("dashboard:queue-levels-chart-evictions")]
    ),
    "dashboard:queue-levels-chart-preemptions": aggregate(
        lambda w: [url("dashboard:queue-levels-chart-preemptions")]
    ),
    "dashboard:team-chart-waits": scoped(team("dashboard:team-chart-waits")),
    "dashboard:cluster-queue-chart-waits": scoped(queue("dashboard:cluster-queue-chart-waits")),
    "dashboard:team-chart-allocation": scoped(team("dashboard:team-chart-allocation")),
    "dashboard:team-chart-queues": scoped(team("dashboard:team-chart-queues")),
    "dashboard:cohort-chart-usage": aggregate(
        lambda w: [url("dashboard:cohort-chart-usage", w.cluster.name, "grove")],
        "cq-birch",
        "13.375",
    ),
    "dashboard:cohort-chart-borrowing": aggregate(
        lambda w: [url("dashboard:cohort-chart-borrowing", w.cluster.name, "grove")], "cq-birch"
    ),
    "dashboard:cluster-queue-chart-usage": scoped(queue("dashboard:cluster-queue-chart-usage")),
    "dashboard:cluster-queue-chart-evictions": scoped(
        queue("dashboard:cluster-queue-chart-evictions")
    ),
    "dashboard:workload-chart-timeline": scoped(
        workload("dashboard:workload-chart-timeline", "aspen-victim"), shows=("/grove/cq-birch",)
    ),
    "dashboard:workload-chart-activity": scoped(
        workload("dashboard:workload-chart-activity", "aspen-main")
    ),
    # --- REST API: fleet inventory (no team data).
    "cluster-list": aggregate(lambda w: api("cluster-list")),
    "cluster-detail": aggregate(lambda w: api("cluster-detail", w.cluster.pk)),
    "node-list": aggregate(lambda w: api("node-list")),
    "node-detail": aggregate(lambda w: api("node-detail", w.node.pk)),
    "gpu-list": aggregate(lambda w: api("gpu-list")),
    "gpu-detail": aggregate(lambda w: api("gpu-detail", w.gpus[1].pk)),
    "ingestrun-list": aggregate(lambda w: api("ingestrun-list")),
    "ingestrun-detail": aggregate(
        lambda w: api("ingestrun-detail", w.cluster.ingest_runs.get().pk)
    ),
    # --- REST API: teams and Kueue objects.
    "team-list": aggregate(lambda w: api("team-list"), "birch team"),
    "team-detail": scoped(api_object("team-detail", lambda w, name: w.teams[name].pk)),
    "cohort-list": aggregate(lambda w: api("cohort-list"), "cq-birch"),
    "cohort-detail": aggregate(lambda w: api("cohort-detail", w.cohort.pk), "cq-birch"),
    "clusterqueue-list": aggregate(lambda w: api("clusterqueue-list"), "cq-birch"),
    "clusterqueue-detail": scoped(
        api_object("clusterqueue-detail", lambda w, name: w.queues[name].pk)
    ),
    "localqueue-list": aggregate(lambda w: api("localqueue-list"), "lq-birch"),
    "localqueue-detail": scoped(
        api_object("localqueue-detail", lambda w, name: w.local_queues[name].pk)
    ),
    "workload-list": aggregate(lambda w: api("workload-list"), "birch-serve", "/grove/cq-birch"),
    "workload-detail": Policy(
        TEAM_SCOPED,
        own=lambda w: api("workload-detail", w.workloads["aspen-victim"].pk),
        other=lambda w: api("workload-detail", w.workloads["birch-main"].pk),
        shows=("/grove/cq-birch",),
    ),
    # --- Chargeback and OpenCost: every grouping.
    "api-chargeback": aggregate(chargeback, "birch", "40.125", "ns-birch", "birch-serve"),
    "api-allocation": aggregate(allocation, "birch", "40.125", "ns-birch", "birch-serve"),
    # --- Queue service levels: every grouping and step; the preemptor is the other team.
    "api-admissions": aggregate(admissions, "birch-serve", "cq-birch"),
    "api-queue-levels": aggregate(queue_levels, "cq-birch", "birch"),
    # --- The API's schema and docs: signed in, no team data.
    "api-schema": aggregate(lambda w: [url("api-schema")]),
    "api-docs": aggregate(lambda w: [url("api-docs")]),
    "api-redoc": aggregate(lambda w: [url("api-redoc")]),
    "api-redoc-bundle": Policy(VENDOR, own=lambda w: [url("api-redoc-bundle")]),
    # --- Pages added with alerts, quota changes and the lead's pages.
    "dashboard:definitions": aggregate(lambda w: [url("dashboard:definitions")]),
    "dashboard:my-teams": aggregate(lambda w: [url("dashboard:my-teams")]),
    "dashboard:search": aggregate(
        lambda w: [url("dashboard:search", q="cq"), url("dashboard:search", q="ns-")], "cq-birch"
    ),
    "dashboard:workload-list": aggregate(lambda w: [url("dashboard:workload-list")]),
    "dashboard:chargeback": aggregate(
        lambda w: [url("dashboard:chargeback"), f"{url('dashboard:chargeback')}?{window(w)}"]
    ),
    "dashboard:quota-change-list": aggregate(lambda w: [url("dashboard:quota-change-list")]),
    # --- Serving: deployments in a team's namespaces.
    "dashboard:serving-list": aggregate(
        lambda w: [url("dashboard:serving-list"), f"{url('dashboard:serving-list')}?{window(w)}"],
        "birch-model",
    ),
    **{
        name: scoped(serving(name))
        for name in (
            "dashboard:serving-detail",
            "dashboard:serving-chart-throughput",
            "dashboard:serving-chart-activity",
            "dashboard:serving-chart-latency",
            "dashboard:serving-chart-saturation",
        )
    },
    # --- The capacity planner: arithmetic and rate-card prices, no team data.
    "dashboard:planner": aggregate(lambda w: [url("dashboard:planner")]),
    "dashboard:planner-chart": aggregate(lambda w: [url("dashboard:planner-chart")]),
    "api-capacity-plan": Policy(
        CALCULATION,
        own=lambda w: [url("api-capacity-plan")],
        body={
            "request_rate": 0.5,
            "input_tokens": 1500,
            "output_tokens": 400,
            "replica_throughput_tokens_per_second": 138,
            "replica_max_concurrency": 4,
            "kv_cache_tokens": 57000,
            "headroom": 0.3,
            "spare_replicas": 1,
            "tensor_parallel": 1,
        },
    ),
    "dashboard:quota-change-new": action(
        lambda w: [url("dashboard:quota-change-new", w.cluster.name, "cq-aspen")]
    ),
    "dashboard:quota-change-detail": action(
        lambda w: [url("dashboard:quota-change-detail", change_of("aspen"))]
    ),
    "dashboard:quota-change-patch": action(
        lambda w: [url("dashboard:quota-change-patch", change_of("aspen"))]
    ),
    "dashboard:quota-change-apply": action(
        lambda w: [url("dashboard:quota-change-apply", change_of("aspen"))], method="post"
    ),
    "dashboard:alert-list": aggregate(lambda w: [url("dashboard:alert-list")], "birch-serve"),
    "dashboard:episode-detail": scoped(
        (
            lambda w: [url("dashboard:episode-detail", episode_of("aspen"))],
            lambda w: [url("dashboard:episode-detail", episode_of("birch"))],
        )
    ),
    "dashboard:episode-chart-evidence": scoped(
        (
            lambda w: [url("dashboard:episode-chart-evidence", episode_of("aspen"))],
            lambda w: [url("dashboard:episode-chart-evidence", episode_of("birch"))],
        )
    ),
    "dashboard:episode-acknowledge": action(
        lambda w: [url("dashboard:episode-acknowledge", episode_of("aspen"))], method="post"
    ),
    "dashboard:episode-silence": action(
        lambda w: [url("dashboard:episode-silence", episode_of("aspen"))], method="post"
    ),
    "dashboard:episode-exempt": action(
        lambda w: [url("dashboard:episode-exempt", episode_of("aspen"))], method="post"
    ),
    "alert-list": aggregate(lambda w: api("alert-list"), "birch-serve"),
    "alert-detail": scoped(
        (
            lambda w: api("alert-detail", episode_of("aspen")),
            lambda w: api("alert-detail", episode_of("birch")),
        )
    ),
    "alert-acknowledge": action(lambda w: alert_api("alert-acknowledge"), method="post"),
    "quotachange-list": aggregate(lambda w: api("quotachange-list")),
    "quotachange-detail": action(lambda w: api("quotachange-detail", change_of("aspen"))),
    "quotachange-apply": action(
        lambda w: api("quotachange-apply", change_of("aspen")), method="post"
    ),
}


# --- The URL list drives the policy ------------------------------------------------------------


def url_patterns(
    resolver: URLResolver | None = None, prefix: str = "", namespace: str = ""
) -> Iterator[tuple[str, str]]:
    """(policy key, route) of every URL pattern: ``namespace:name``, or ``namespace:*`` for
    a namespace's unnamed patterns (the admin's redirects), or the bare route."""
    resolver = resolver or get_resolver()
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            inner = namespace
            if pattern.namespace:
                inner = f"{namespace}:{pattern.namespace}" if namespace else pattern.namespace
            yield from url_patterns(pattern, prefix + str(pattern.pattern), inner)
            continue
        assert isinstance(pattern, URLPattern)
        route = prefix + str(pattern.pattern)
        if pattern.name:
            yield (f"{namespace}:{pattern.name}" if namespace else pattern.name), route
        else:
            yield (f"{namespace}:*" if namespace else route), route


def policy_for(key: str) -> Policy | None:
    if key in POLICY:
        return POLICY[key]
    namespace = key.rsplit(":", 1)[0] if ":" in key else ""
    return POLICY.get(f"{namespace}:*") if namespace else None


def test_every_url_pattern_has_an_access_policy():
    patterns = list(url_patterns())

    missing = sorted({f"{key} ({route})" for key, route in patterns if policy_for(key) is None})
    covered = {key for key, _ in patterns} | {
        f"{key.rsplit(':', 1)[0]}:*" for key, _ in patterns if ":" in key
    }
    stale = sorted(set(POLICY) - covered)

    assert not missing, f"URL patterns without an access policy in {__name__}.POLICY: {missing}"
    assert not stale, f"policy entries that match no URL pattern: {stale}"
    # The walk sees the API with its format suffixes and the chart JSON views.
    routes = [route for _, route in patterns]
    assert any("teams\\.(?P<format>" in route for route in routes)
    assert any(route.endswith("charts/usage.json") for route in routes)


# --- Checking one entry ------------------------------------------------------------------------


def body(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


def fetch(client: Client, path: str, status: tuple[int, ...] = (200,)) -> str:
    response = client.get(path)
    assert response.status_code in status, f"{path}: {response.status_code}"
    return body(response).lower()


def _shows(text: str, marker: str) -> bool:
    """Whether the marker is in the text; a figure only as a whole number (not the digits of a
    timestamp such as ``12:34:40.125931`` or of a larger figure)."""
    if re.fullmatch(r"[\d.]+", marker):
        return re.search(rf"(?<![\d.]){re.escape(marker)}(?!\d)", text) is not None
    return marker.lower() in text


def assert_hidden(text: str, markers: list[str], path: str) -> None:
    found = [marker for marker in markers if _shows(text, marker)]
    assert not found, f"{path} shows {found}"


def assert_shown(texts: list[str], markers: tuple[str, ...], entry: str) -> None:
    joined = "\n".join(texts)
    absent = [marker for marker in markers if marker.lower() not in joined]
    assert not absent, f"{entry}: {absent} not shown"


KEYS = sorted(POLICY)
SIGNED_IN = [key for key in KEYS if POLICY[key].kind in (TEAM_SCOPED, AGGREGATE)]
ACTIONS = [key for key in KEYS if POLICY[key].kind == ACTION]


@pytest.mark.parametrize(
    "key", [key for key in KEYS if POLICY[key].kind not in (PUBLIC, VENDOR, SCRAPE)]
)
def test_anonymous_users_are_refused(key, world):
    policy = POLICY[key]
    for path in [*policy.own(world), *policy.other(world)]:
        response = Client().get(path)
        assert response.status_code in (302, 401, 403), f"{path}: {response.status_code}"
        if response.status_code == 302:
            assert "login" in response["Location"], path


@pytest.mark.parametrize("key", [key for key in KEYS if POLICY[key].kind == PUBLIC])
def test_public_urls_answer_anyone_and_show_no_team(key, world):
    for path in POLICY[key].own(world):
        response = Client().get(path)
        assert response.status_code < 500, path
        assert response.status_code != 302 or "next=" not in response.get("Location", ""), path
        assert_hidden(body(response).lower(), [*birch_markers(), "aspen"], path)


@pytest.mark.parametrize("key", [key for key in KEYS if POLICY[key].kind == SCRAPE])
def test_the_metrics_scrape_answers_loopback_admins_and_no_one_else(key, world, client_of):
    far = {"REMOTE_ADDR": "203.0.113.9"}
    for path in POLICY[key].own(world):
        assert Client().get(path, **far).status_code in (401, 403), path
        assert client_of("lead_a").get(path, **far).status_code in (401, 403), path
        assert client_of("finance").get(path, **far).status_code in (401, 403), path
        assert client_of("staff").get(path, **far).status_code == 200, path
        # The Prometheus beside it on the same host: no configuration.
        assert Client().get(path).status_code == 200, path


@pytest.mark.parametrize("key", [key for key in KEYS if POLICY[key].kind == CALCULATION])
def test_calculations_answer_every_signed_in_user_and_show_no_team(key, world, client_of):
    policy = POLICY[key]
    for path in policy.own(world):
        assert Client().post(path, policy.body, content_type="application/json").status_code in (
            401,
            403,
        ), path
        for user in ("lead_a", "lead_b", "staff", "finance"):
            response = client_of(user).post(path, policy.body, content_type="application/json")
            assert response.status_code == 200, f"{user} {path}: {response.status_code}"
            assert_hidden(body(response).lower(), [*birch_markers(), "aspen"], path)


@pytest.mark.parametrize("key", [key for key in KEYS if POLICY[key].kind == VENDOR])
def test_vendor_files_are_the_same_bytes_for_anyone(key, world):
    for path in POLICY[key].own(world):
        answers = [Client().get(path)]
        for user in ("lead_a", "staff"):
            client = Client()
            client.force_login(world.users[user])
            answers.append(client.get(path))
        assert [answer.status_code for answer in answers] == [200, 200, 200], path
        assert len({body(answer) for answer in answers}) == 1, path


@pytest.mark.parametrize("visibility", ["private", "public"])
def test_the_admin_is_staff_only_under_either_setting(visibility, world, client_of):
    policy = POLICY["admin:*"]
    with override_settings(GPULEDGER_TEAM_VISIBILITY=visibility):
        for path in policy.own(world):
            response = client_of("lead_a").get(path)
            assert response.status_code == 302, path
            assert response["Location"].startswith(reverse("admin:login")), path
        assert client_of("superuser").get(reverse("admin:index")).status_code == 200


@pytest.mark.parametrize("key", SIGNED_IN)
def test_private_a_lead_sees_nothing_of_another_team(key, world, client_of):
    policy = POLICY[key]
    lead = client_of("lead_a")
    with override_settings(GPULEDGER_TEAM_VISIBILITY="private"):
        for path in policy.own(world):
            assert_hidden(fetch(lead, path), birch_markers(), path)
        for path in policy.other(world):
            fetch(lead, path, status=(404,))


@pytest.mark.parametrize("key", SIGNED_IN)
def test_private_the_other_lead_sees_nothing_of_the_first(key, world, client_of):
    policy = POLICY[key]
    lead = client_of("lead_b")
    with override_settings(GPULEDGER_TEAM_VISIBILITY="private"):
        for path in policy.own(world):
            if policy.kind == TEAM_SCOPED:
                fetch(lead, path, status=(404,))
            else:
                assert_hidden(fetch(lead, path), ["aspen"], path)


@pytest.mark.parametrize("key", SIGNED_IN)
def test_public_a_lead_sees_every_team(key, world, client_of):
    policy = POLICY[key]
    lead = client_of("lead_a")
    with override_settings(GPULEDGER_TEAM_VISIBILITY="public"):
        texts = [fetch(lead, path) for path in policy.own(world)]
        for path in policy.other(world):
            fetch(lead, path)
    assert_shown(texts, policy.shows, key)


@pytest.mark.parametrize("user", ["staff", "finance"])
@pytest.mark.parametrize("key", SIGNED_IN)
def test_private_staff_and_finance_see_every_team(key, user, world, client_of):
    policy = POLICY[key]
    client = client_of(user)
    assert settings.GPULEDGER_TEAM_VISIBILITY == "private"
    if key == "dashboard:my-teams" and user == "finance":
        # Finance leads no team: My teams sends them to the chargeback over the same range.
        response = client.get(url("dashboard:my-teams"))
        assert response.status_code == 302
        assert response["Location"].startswith(url("dashboard:chargeback"))
        return
    texts = [fetch(client, path) for path in policy.own(world)]
    for path in policy.other(world):
        fetch(client, path)
    assert_shown(texts, policy.shows, key)


@pytest.fixture(autouse=True)
def alerts_and_quota_changes(world):
    """One open alert episode and one quota-change request per team with a lead."""
    from alerts.models import Episode
    from quotas.models import QuotaChange

    for name in ("aspen", "birch"):
        queue = world.queues[name]
        workload = world.workloads[f"{name}-main"]
        started = world.start
        Episode.objects.create(
            rule="idle_workload",
            severity="critical",
            cluster=world.cluster,
            team=world.teams[name],
            cluster_queue=queue,
            namespace=workload.namespace,
            workload=workload,
            gpus=2,
            subject_key=f"workload:{workload.pk}",
            started_at=started,
            fired_at=started + timedelta(hours=1),
            evaluated_until=world.end,
            idle_gpu_hours=3.0,
            held_gpu_hours=3.0,
            summary=f"Workload {workload.namespace}/{workload.name} idles",
        )
        QuotaChange.objects.create(
            cluster=world.cluster,
            target_name=queue.name,
            cluster_queue=queue,
            status="requested",
            reason=f"more for {name}",
            requested_by=world.users[f"lead_{'a' if name == 'aspen' else 'b'}"],
            # A request made from GPU Ledger carries the patch its page offers for download.
            preview={"yaml": f"metadata:\n  name: {queue.name}\n", "kubectl": ""},
        )


@pytest.mark.parametrize("visibility", ["private", "public"])
@pytest.mark.parametrize("key", ACTIONS)
def test_another_teams_lead_may_not_act_on_a_teams_object(key, visibility, world, client_of):
    policy = POLICY[key]
    lead = client_of("lead_b")
    with override_settings(GPULEDGER_TEAM_VISIBILITY=visibility):
        for path in policy.own(world):
            response = getattr(lead, policy.method)(path)
            assert response.status_code in (403, 404), f"{path}: {response.status_code}"


@pytest.mark.parametrize("key", [key for key in ACTIONS if POLICY[key].method == "get"])
def test_the_owning_lead_may_open_the_team_s_forms(key, world, client_of):
    lead = client_of("lead_a")
    with override_settings(GPULEDGER_TEAM_VISIBILITY="private"):
        for path in POLICY[key].own(world):
            assert lead.get(path).status_code == 200, path


# --- Refusals name nobody ----------------------------------------------------------------------
OBJECT_BEARING = [key for key in KEYS if POLICY[key].kind in (TEAM_SCOPED, ACTION)]
NO_SUCH_ID = "987654321"


def missing(path: str) -> str:
    """``path`` naming an object that does not exist: every id or name in it (the cluster and
    the format suffix stay) replaced."""
    parts = urlsplit(path)
    match = resolve(parts.path)
    kwargs = {
        name: value
        if name in ("cluster", "format")
        else (NO_SUCH_ID if str(value).isdigit() else f"no-such-{value}")
        for name, value in match.kwargs.items()
    }
    built = reverse(match.view_name, kwargs=kwargs)
    assert built != parts.path, path
    return built + (f"?{parts.query}" if parts.query else "")


def shape(response, path: str) -> tuple[int, str, str]:
    """Status, content type and body, with the address asked for and per-request tokens out."""
    text = body(response)
    for spelling in sorted({path, quote(path), quote(path, safe="")}, key=len, reverse=True):
        text = text.replace(spelling, "{path}")
    text = re.sub(r'(csrfmiddlewaretoken" value=|csrf-token" content=)"[^"]*"', r"\1", text)
    return response.status_code, response.get("Content-Type", ""), text


@pytest.mark.parametrize("key", OBJECT_BEARING)
def test_private_another_teams_object_is_refused_as_one_that_does_not_exist(key, world, client_of):
    policy = POLICY[key]
    # A scoped page: aspen's lead asks for birch's object. An action: birch's lead acts on
    # aspen's object (a change request, an alert).
    if policy.kind == TEAM_SCOPED:
        lead, paths, secret = client_of("lead_a"), policy.other(world), birch_markers()
    else:
        lead, paths, secret = client_of("lead_b"), policy.own(world), ["aspen"]
    with override_settings(GPULEDGER_TEAM_VISIBILITY="private"):
        for path in paths:
            hidden = getattr(lead, policy.method)(path)
            absent = getattr(lead, policy.method)(missing(path))
            assert hidden.status_code == 404, f"{path}: {hidden.status_code}"
            assert shape(hidden, path) == shape(absent, missing(path)), path
            assert_hidden(shape(hidden, path)[2].lower(), secret, path)
