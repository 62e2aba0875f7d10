"""FakeKubeAPI serves the Volcano, KAI and ResourceQuota fixtures to the real ``kubernetes``
client: discovery lists their groups only when the server is built to serve them, and LIST,
WATCH and merge PATCH (with resourceVersion checks) work as for Kueue's kinds."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config, dynamic
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError, ResourceNotFoundError

from tests.kube_api_server import FakeKubeAPI
from tests.scheduler_fixtures import (
    KAI_GROUP,
    VOLCANO_GROUP,
    load_scheduler_fixtures,
    scheduler_items,
)

MERGE = "application/merge-patch+json"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., tuple[FakeKubeAPI, k8s.ApiClient]]]:
    servers: list[FakeKubeAPI] = []

    def start(source: str | None = None, **kwargs: Any) -> tuple[FakeKubeAPI, k8s.ApiClient]:
        api = FakeKubeAPI(**kwargs).start()
        servers.append(api)
        if source:
            load_scheduler_fixtures(api, source)
        kubeconfig = api.write_kubeconfig(tmp_path / f"kubeconfig-{len(servers)}")
        return api, config.new_client_from_config(config_file=str(kubeconfig))

    yield start
    for api in servers:
        api.stop()


def raw_get(api: FakeKubeAPI, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        api.url + path, headers={"Authorization": f"Bearer {api.token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def names(items: list[Any]) -> list[str]:
    return sorted(i["metadata"]["name"] if isinstance(i, dict) else i.metadata.name for i in items)


def test_by_default_the_server_offers_only_what_it_offered_before(serve) -> None:
    api, _ = serve()
    _, groups = raw_get(api, "/apis")
    assert [g["name"] for g in groups["groups"]] == ["kueue.x-k8s.io"]
    _, core = raw_get(api, "/api/v1")
    assert [r["name"] for r in core["resources"]] == ["pods", "nodes"]
    for path in (
        "/apis/scheduling.volcano.sh/v1beta1/queues",
        "/apis/scheduling.run.ai/v2/queues",
        "/api/v1/resourcequotas",
        "/apis/scheduling.volcano.sh",
    ):
        assert raw_get(api, path)[0] == 404, path


def test_the_dynamic_client_discovers_and_lists_volcano_kinds(serve) -> None:
    _, api_client = serve("volcano", volcano_versions=("v1beta1",))
    dyn = dynamic.DynamicClient(api_client)
    queues = dyn.resources.get(api_version=f"{VOLCANO_GROUP}/v1beta1", kind="Queue")
    groups = dyn.resources.get(api_version=f"{VOLCANO_GROUP}/v1beta1", kind="PodGroup")
    assert (queues.namespaced, groups.namespaced) == (False, True)
    expected = scheduler_items("volcano", f"Queue.{VOLCANO_GROUP}")
    listed = queues.get()
    assert listed.kind == "QueueList" and names(listed.to_dict()["items"]) == names(expected)
    team_v2 = groups.get(namespace="team-v2").to_dict()["items"]
    assert {g["spec"]["queue"] for g in team_v2} == {"team-v2"} and len(team_v2) == 3
    assert len(groups.get().items) == len(scheduler_items("volcano", f"PodGroup.{VOLCANO_GROUP}"))
    with pytest.raises(ResourceNotFoundError):
        dyn.resources.get(api_version=f"{KAI_GROUP}/v2", kind="Queue")


def test_kai_kinds_are_served_each_at_its_own_version(serve) -> None:
    api, api_client = serve("kai", kai_versions=("v2", "v2alpha2"))
    _, group = raw_get(api, f"/apis/{KAI_GROUP}")
    assert [v["version"] for v in group["versions"]] == ["v2", "v2alpha2"]
    _, v2 = raw_get(api, f"/apis/{KAI_GROUP}/v2")
    assert [r["name"] for r in v2["resources"]] == ["queues", "queues/status"]
    assert raw_get(api, f"/apis/{KAI_GROUP}/v2/namespaces/kai-team-a/podgroups")[0] == 404
    custom = k8s.CustomObjectsApi(api_client)
    queues: Any = custom.list_cluster_custom_object(KAI_GROUP, "v2", "queues")
    assert names(queues["items"]) == names(scheduler_items("kai", f"Queue.{KAI_GROUP}"))
    groups: Any = custom.list_namespaced_custom_object(
        KAI_GROUP, "v2alpha2", "kai-team-a", "podgroups"
    )
    assert len(groups["items"]) == 3
    pods = api_client.sanitize_for_serialization(
        k8s.CoreV1Api(api_client).list_pod_for_all_namespaces()
    )
    assert {p["metadata"]["labels"]["kai.scheduler/queue"] for p in pods["items"]} == {
        "kai-team-a",
        "kai-team-b",
        "kai-serving",
    }


def test_resource_quotas_are_served_when_asked(serve) -> None:
    api, api_client = serve("resourcequota", serve_resource_quotas=True)
    _, core = raw_get(api, "/api/v1")
    assert [r["name"] for r in core["resources"]] == ["pods", "nodes", "resourcequotas"]
    core_api = k8s.CoreV1Api(api_client)
    quotas = core_api.list_resource_quota_for_all_namespaces()
    assert len(quotas.items) == 4
    vision = api_client.sanitize_for_serialization(
        core_api.list_namespaced_resource_quota("vision")
    )
    gpu = [q["status"] for q in vision["items"] if "requests.nvidia.com/gpu" in q["spec"]["hard"]]
    assert [(s["hard"], s["used"]) for s in gpu] == [
        ({"requests.nvidia.com/gpu": "16"}, {"requests.nvidia.com/gpu": "16"})
    ]
    pod = core_api.read_namespaced_pod("bert-distill-0-m3p9s", "nlp")
    conditions = api_client.sanitize_for_serialization(pod)["status"]["conditions"]
    assert [c["reason"] for c in conditions if c["type"] == "DisruptionTarget"] == [
        "PreemptionByScheduler"
    ]


def test_a_watch_from_the_list_version_sees_later_changes(serve) -> None:
    api, api_client = serve("volcano", volcano_versions=("v1beta1",))
    dyn = dynamic.DynamicClient(api_client)
    groups = dyn.resources.get(api_version=f"{VOLCANO_GROUP}/v1beta1", kind="PodGroup")
    listed = groups.get(namespace="team-v2")
    name = next(g.metadata.name for g in listed.items if g.status.phase == "Pending")

    def admit(group: dict[str, Any]) -> None:
        group["status"]["phase"] = "Inqueue"

    api.modify(f"PodGroup.{VOLCANO_GROUP}", name, admit, namespace="team-v2")
    api.delete(f"PodGroup.{VOLCANO_GROUP}", name, namespace="team-v2")
    seen = [
        (event["type"], event["object"].metadata.name, event["object"].status.phase)
        for event in groups.watch(
            namespace="team-v2", resource_version=listed.metadata.resourceVersion, timeout=1
        )
    ]
    assert seen == [("MODIFIED", name, "Inqueue"), ("DELETED", name, "Inqueue")]
    assert api.watch_count(f"PodGroup.{VOLCANO_GROUP}") == 1
    assert api.list_count(f"PodGroup.{VOLCANO_GROUP}") == 1
    assert api.list_count(f"PodGroup.{KAI_GROUP}") == 0


@pytest.mark.parametrize(
    ("source", "kwargs", "api_version", "name", "patch", "read"),
    [
        (
            "volcano",
            {"volcano_versions": ("v1beta1",)},
            f"{VOLCANO_GROUP}/v1beta1",
            "team-v2",
            {"spec": {"deserved": {"nvidia.com/gpu": "20"}}},
            lambda q: (q["spec"]["deserved"]["nvidia.com/gpu"], q["spec"]["capability"]),
        ),
        (
            "kai",
            {"kai_versions": ("v2", "v2alpha2")},
            f"{KAI_GROUP}/v2",
            "kai-team-a",
            {"spec": {"resources": {"gpu": {"quota": 24}}}},
            lambda q: (
                q["spec"]["resources"]["gpu"]["quota"],
                q["spec"]["resources"]["gpu"]["limit"],
            ),
        ),
    ],
)
def test_a_merge_patch_of_a_queue_quota_round_trips(
    serve, source, kwargs, api_version, name, patch, read
) -> None:
    api, api_client = serve(source, **kwargs)
    queues = dynamic.DynamicClient(api_client).resources.get(api_version=api_version, kind="Queue")
    before = queues.get(name=name).to_dict()
    stale = before["metadata"]["resourceVersion"]
    body = {**patch, "metadata": {"resourceVersion": stale}}
    after = queues.patch(name=name, body=body, content_type=MERGE).to_dict()
    assert int(after["metadata"]["resourceVersion"]) > int(stale)
    assert read(after) == read(queues.get(name=name).to_dict()) != read(before)
    # The rest of the quota is kept: a merge patch replaces only the named fields.
    assert read(after)[1] == read(before)[1]
    with pytest.raises(ConflictError):
        queues.patch(name=name, body=body, content_type=MERGE)
    assert queues.get(name=name).to_dict() == after
    with pytest.raises(NotFoundError):
        queues.patch(name="no-such-queue", body=patch, content_type=MERGE)
    sent = [(w.headers.get("Content-Type"), w.json.get("metadata")) for w in api.writes("queues")]
    assert sent == [(MERGE, {"resourceVersion": stale})] * 2 + [(MERGE, None)]
