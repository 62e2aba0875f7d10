"""quotas.kueue against a loopback API server, through the real kubernetes client."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from fleet.models import Cluster
from quotas.kueue import KubeError, KueueClient, ResourceExpired, requests_gpus
from tests.kueue_fixtures import fixture_items


def make_client(cluster: Cluster | None = None, **kwargs: Any) -> KueueClient:
    return KueueClient.for_cluster(cluster or Cluster(name="test"), **kwargs)


def cpu_pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "web", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": "cpu-node-1",
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


# --- configuration ---------------------------------------------------------------------------


def test_it_uses_the_clusters_context_from_the_kubeconfig(make_kube_api, tmp_path: Path) -> None:
    first = make_kube_api()
    second = make_kube_api(load=False)
    second.load("ClusterQueue", [fixture_items("ClusterQueue")[0]])
    config = json.loads(Path(first.kubeconfig).read_text())
    other = json.loads(Path(second.kubeconfig).read_text())
    for section in ("clusters", "users", "contexts"):
        for entry in other[section]:
            entry["name"] = entry["name"].replace("fake", "other")
            if section == "contexts":
                entry["context"] = {"cluster": "other", "user": "other-user"}
        config[section] += other[section]
    path = tmp_path / "two-contexts"
    path.write_text(json.dumps(config))

    default = make_client(kubeconfig=str(path))
    by_cluster = make_client(Cluster(name="b", kube_context="other"), kubeconfig=str(path))

    assert len(default.list_objects("ClusterQueue").items) == 5
    assert len(by_cluster.list_objects("ClusterQueue").items) == 1


def test_it_falls_back_to_the_context_setting(make_kube_api, tmp_path: Path, settings) -> None:
    api = make_kube_api()
    config = json.loads(Path(api.kubeconfig).read_text())
    config["contexts"].append({"name": "broken", "context": {"cluster": "x", "user": "y"}})
    config["current-context"] = "broken"
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    settings.KUBECONFIG = str(path)
    settings.GPULEDGER_KUBE_CONTEXT = "fake"

    assert len(make_client().list_objects("ResourceFlavor").items) == 2


def test_each_cluster_gets_its_own_configuration(make_kube_api) -> None:
    make_kube_api()
    before = k8s.Configuration.get_default_copy().host

    client = make_client()

    assert client.api_client.configuration.host.startswith("http://127.0.0.1:")
    assert k8s.Configuration.get_default_copy().host == before


def test_a_missing_context_is_a_permanent_error(make_kube_api) -> None:
    make_kube_api()
    with pytest.raises(KubeError) as caught:
        make_client(Cluster(name="x", kube_context="nowhere"))
    assert caught.value.permanent


def test_in_cluster_outside_a_pod_is_a_permanent_error(monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeError) as caught:
        make_client(Cluster(name="x", kube_in_cluster=True))
    assert caught.value.permanent


# --- discovery -------------------------------------------------------------------------------


def test_discovery_prefers_v1beta2_when_both_versions_are_served(make_kube_api) -> None:
    api = make_kube_api(kueue_versions=("v1beta1", "v1beta2"))

    client = make_client()
    discovery = client.discover()
    client.list_objects("Workload")

    assert discovery.kueue_version == "v1beta2"
    assert any("/kueue.x-k8s.io/v1beta2/workloads" in path for _, path, _ in api.requests)
    assert not any("/kueue.x-k8s.io/v1beta1/workloads" in path for _, path, _ in api.requests)


def test_discovery_falls_back_to_v1beta1(make_kube_api) -> None:
    make_kube_api("v1beta1")

    discovery = make_client().discover()

    assert discovery.kueue_version == "v1beta1"
    assert discovery.visibility_version is None


def test_discovery_finds_the_visibility_api(make_kube_api) -> None:
    make_kube_api(visibility_versions=("v1beta1",))

    assert make_client().discover().visibility_version == "v1beta1"


def test_a_kind_missing_from_discovery_is_not_served(make_kube_api) -> None:
    make_kube_api(served_kinds=["ClusterQueue", "LocalQueue", "Workload", "Pod", "Node"])

    with pytest.raises(KubeError) as caught:
        make_client().list_objects("Cohort")

    assert caught.value.status == 404
    assert caught.value.permanent


# --- LIST ------------------------------------------------------------------------------------


def test_list_follows_continue_tokens_and_returns_the_list_resource_version(
    make_kube_api,
) -> None:
    api = make_kube_api()

    result = make_client(page_size=3).list_objects("Workload")

    assert len(result.items) == 16
    assert result.pages == 6
    assert result.resource_version == str(api.resource_version)
    continued = [
        q for _, path, q in api.requests if path.endswith("/workloads") and "continue" in q
    ]
    assert len(continued) == 5
    assert len({item["metadata"]["name"] for item in result.items}) == 16


def test_list_pages_are_a_consistent_snapshot(make_kube_api) -> None:
    api = make_kube_api()
    client = make_client(page_size=4)
    original = client.custom.list_custom_object_for_all_namespaces
    calls = []

    def list_then_change(*args: Any, **kwargs: Any) -> Any:
        response = original(*args, **kwargs)
        if not calls:
            api.add(
                "Workload",
                {
                    **fixture_items("Workload")[0],
                    "metadata": {"name": "aaa-created-while-listing", "namespace": "team-a"},
                },
            )
        calls.append(kwargs.get("_continue"))
        return response

    client.custom.list_custom_object_for_all_namespaces = list_then_change  # type: ignore[method-assign]

    result = client.list_objects("Workload")

    assert len(result.items) == 16
    assert "aaa-created-while-listing" not in {i["metadata"]["name"] for i in result.items}


def test_list_keeps_only_pods_that_request_gpus(make_kube_api) -> None:
    api = make_kube_api()
    api.load("Pod", [cpu_pod("web-1"), cpu_pod("web-2")])

    result = make_client().list_objects("Pod")

    assert len(result.items) == 21
    assert result.filtered == 2


def test_list_gives_core_items_their_api_version_and_kind(make_kube_api) -> None:
    make_kube_api()

    pod = make_client().list_objects("Pod").items[0]

    assert pod["apiVersion"] == "v1"
    assert pod["kind"] == "Pod"


def test_list_drops_managed_fields_and_last_applied_configuration(make_kube_api) -> None:
    api = make_kube_api(load=False)
    flavor = fixture_items("ResourceFlavor")[0]
    flavor["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    flavor["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
        "keep": "me",
    }
    api.load("ResourceFlavor", [flavor])

    item = make_client().list_objects("ResourceFlavor").items[0]

    assert "managedFields" not in item["metadata"]
    assert item["metadata"]["annotations"] == {"keep": "me"}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"limits": {"nvidia.com/gpu": "1"}}, True),
        ({"requests": {"nvidia.com/mig-1g.10gb": "1"}}, True),
        ({"requests": {"cpu": "2", "memory": "1Gi"}}, False),
        ({}, False),
    ],
)
def test_requests_gpus_reads_requests_and_limits(resources: dict, expected: bool) -> None:
    pod = {"spec": {"containers": [{"name": "c", "resources": resources}]}}
    assert requests_gpus(pod) is expected


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "permanent"),
    [(400, True), (403, True), (404, True), (422, True), (429, False), (500, False), (503, False)],
)
def test_http_errors_map_to_permanent_or_transient(make_kube_api, status, permanent) -> None:
    api = make_kube_api()
    api.fail("/clusterqueues", status, message="nope from the server")

    with pytest.raises(KubeError) as caught:
        make_client().list_objects("ClusterQueue")

    assert caught.value.status == status
    assert caught.value.permanent is permanent
    assert "nope from the server" in caught.value.message


def test_bad_credentials_are_a_permanent_401(make_kube_api) -> None:
    api = make_kube_api()
    api.token = "rotated"

    with pytest.raises(KubeError) as caught:
        make_client().list_objects("ClusterQueue")

    assert caught.value.status == 401
    assert caught.value.permanent
    assert caught.value.reason == "Unauthorized"


def test_a_failure_on_a_later_page_fails_the_whole_list(make_kube_api) -> None:
    api = make_kube_api()
    api.fail("/workloads", 500, after=1)

    with pytest.raises(KubeError) as caught:
        make_client(page_size=5).list_objects("Workload")

    assert not caught.value.permanent
    assert "page 2" in caught.value.message


def test_an_expired_continue_token_is_resource_expired(make_kube_api) -> None:
    api = make_kube_api()
    api.fail("/workloads", 410, after=1, reason="Expired", message="continue too old")

    with pytest.raises(ResourceExpired):
        make_client(page_size=5).list_objects("Workload")


def test_a_refused_connection_is_transient(settings, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    from tests.kube_api_server import write_kubeconfig

    settings.KUBECONFIG = str(write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}", "t"))
    settings.GPULEDGER_KUBE_CONTEXT = ""
    client = make_client()
    client.api_client.configuration.retries = 0

    with pytest.raises(KubeError) as caught:
        client.discover()

    assert not caught.value.permanent
    assert caught.value.status is None


def test_a_dropped_connection_is_transient(make_kube_api) -> None:
    api = make_kube_api()
    api.fail("/clusterqueues", 0, times=10)
    client = make_client()
    client.api_client.configuration.retries = 0

    with pytest.raises(KubeError) as caught:
        client.list_objects("ClusterQueue")

    assert not caught.value.permanent


# --- WATCH -----------------------------------------------------------------------------------


def test_watch_streams_changes_after_the_resource_version(make_kube_api) -> None:
    api = make_kube_api()
    client = make_client()
    listed = client.list_objects("Workload")
    api.modify(
        "Workload",
        "job-llama-eval-70b-755d0",
        lambda o: o["metadata"].setdefault("labels", {}).update(changed="yes"),
        namespace="team-a",
    )
    api.delete("Workload", "job-vit-ablation-3-73ebc", namespace="team-b")

    events = list(client.watch("Workload", listed.resource_version, 1))

    kinds = [(e.type, e.object["metadata"].get("name")) for e in events]
    assert kinds[:2] == [
        ("MODIFIED", "job-llama-eval-70b-755d0"),
        ("DELETED", "job-vit-ablation-3-73ebc"),
    ]
    assert events[0].object["metadata"]["labels"]["changed"] == "yes"
    assert events[-1].type == "BOOKMARK"
    assert int(events[-1].resource_version) == api.resource_version


def test_watch_ends_when_the_server_timeout_passes(make_kube_api) -> None:
    api = make_kube_api()
    started = time.monotonic()

    events = list(make_client().watch("ClusterQueue", str(api.resource_version), 1))

    assert 0.9 <= time.monotonic() - started < 5
    assert [e.type for e in events] == ["BOOKMARK"]


def test_watch_from_a_compacted_version_raises_resource_expired(make_kube_api) -> None:
    api = make_kube_api()
    client = make_client()
    old = client.list_objects("Workload").resource_version
    api.modify("Workload", "job-llama-eval-70b-755d0", lambda o: None, namespace="team-a")
    api.compact()

    with pytest.raises(ResourceExpired):
        list(client.watch("Workload", old, 2))


def test_watch_drops_pods_without_gpus_but_keeps_their_resource_version(make_kube_api) -> None:
    api = make_kube_api()
    client = make_client()
    since = str(api.resource_version)
    api.add("Pod", cpu_pod("web-3"))

    events = list(client.watch("Pod", since, 1))

    assert events[0].type == "BOOKMARK"
    assert int(events[0].resource_version) == api.resource_version


# --- visibility ------------------------------------------------------------------------------


def test_pending_workloads_come_in_queue_order(make_kube_api) -> None:
    make_kube_api(visibility_versions=("v1beta2", "v1beta1"))

    items = make_client().pending_workloads("team-a")

    # A3 (research-default, 500) waits ahead of A5 (research-low, 100): README "Workloads".
    assert [(i["metadata"]["name"], i["positionInClusterQueue"]) for i in items] == [
        ("job-llama-eval-70b-755d0", 0),
        ("job-lr-sweep-17-62ba9", 1),
    ]


def test_pending_workloads_when_the_visibility_api_is_not_served(make_kube_api) -> None:
    make_kube_api()

    with pytest.raises(KubeError) as caught:
        make_client().pending_workloads("team-a")

    assert caught.value.permanent
    assert caught.value.reason == "NotServed"


def test_the_fake_server_merge_patches_cluster_queues(make_kube_api) -> None:
    """The quota write-back will PATCH ClusterQueues; the test server must store the patch."""
    api = make_kube_api()
    client = make_client()
    before = api.resource_version
    patch = {"spec": {"resourceGroups": None, "stopPolicy": "Hold"}}

    response = client.custom.patch_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        "team-b",
        patch,
        _content_type="application/merge-patch+json",
    )

    stored = api.get("ClusterQueue", "team-b")
    assert response["spec"]["stopPolicy"] == "Hold"
    assert stored["spec"]["stopPolicy"] == "Hold"
    assert "resourceGroups" not in stored["spec"]
    assert int(stored["metadata"]["resourceVersion"]) > before


def test_a_kubeconfig_that_is_not_yaml_is_a_permanent_error_naming_the_file(tmp_path: Path):
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nclusters: [\n  - name: a\n    cluster: {server: x\n")

    with pytest.raises(KubeError) as failure:
        make_client(kubeconfig=str(path))

    assert failure.value.permanent
    assert str(path) in failure.value.message
    assert "is not valid YAML (line" in failure.value.message


@pytest.mark.django_db
def test_sync_cluster_reports_a_broken_kubeconfig_without_a_traceback(tmp_path: Path):
    from django.core.management import CommandError, call_command

    path = tmp_path / "kubeconfig"
    path.write_text("clusters: [unclosed\n")
    Cluster.objects.create(name="broken")

    with pytest.raises(CommandError) as failure:
        call_command("sync_cluster", "--cluster", "broken", "--kubeconfig", str(path))

    assert "sync of broken failed (permanent)" in str(failure.value)
    assert f"kubeconfig {path} is not valid YAML" in str(failure.value)
