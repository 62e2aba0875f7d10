"""deploy/kubernetes: each overlay renders with ``kubectl kustomize``, every object validates
against its Kubernetes schema, and the RBAC is exactly what each overlay should grant."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from django.urls import resolve

from core import views
from tests.deploy.rendering import (
    APP_CONTAINERS,
    KUSTOMIZE,
    OVERLAYS,
    ROOT,
    Access,
    containers,
    grants,
    of_kind,
    one,
    pod_spec,
    render,
    render_dir,
    rules_of,
    with_components,
    workloads,
)

# The oldest Kubernetes minor these manifests promise to fit, and the newest schema bundled.
SCHEMA_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
KUEUE = "kueue.x-k8s.io"
READ = {"get", "list", "watch"}


def reads(group: str, *resources: str) -> set[Access]:
    return {Access(group, r, verb) for r in resources for verb in READ}


# Worked out from the code, not from the manifests: the kinds quotas/kueue/payloads.py lists and
# watches, the visibility API quotas/kueue/client.py GETs, and the GET + PATCH of
# quotas/writeback/service.py (ClusterQueues and Cohorts).
READ_ONLY_GRANTS = (
    reads(
        KUEUE,
        "resourceflavors",
        "cohorts",
        "clusterqueues",
        "localqueues",
        "workloads",
        "workloadpriorityclasses",
    )
    | reads("", "pods", "nodes")
    | {Access("visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads", "get")}
)
QUOTA_WRITE_GRANTS = READ_ONLY_GRANTS | {
    Access(KUEUE, "clusterqueues", "patch"),
    Access(KUEUE, "cohorts", "patch"),
}
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_the_whole_deployment(overlay: str) -> None:
    objects = render(overlay)

    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {
        ("Namespace", "gpu-ledger"),
        ("ServiceAccount", "gpu-ledger"),
        ("Deployment", "gpu-ledger-web"),
        ("Deployment", "gpu-ledger-worker"),
        ("Deployment", "gpu-ledger-beat"),
        ("Job", "gpu-ledger-migrate"),
        ("Service", "gpu-ledger-web"),
        ("Ingress", "gpu-ledger-web"),
        ("ClusterRole", "gpu-ledger-reader"),
        ("ClusterRoleBinding", "gpu-ledger-reader"),
    } <= names
    assert [o for o in objects if o["kind"] == "Secret"] == [], "secrets are never shipped"
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/name") == "gpu-ledger", obj["metadata"]["name"]
        if obj["kind"] not in {"Namespace"} and not obj["kind"].startswith("Cluster"):
            assert obj["metadata"]["namespace"] == "gpu-ledger", obj["metadata"]["name"]


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_its_schema(overlay: str, version: str) -> None:
    for obj in render(overlay):
        # strict: a field the schema does not know (a typo, a wrong level) fails too.
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_the_components_validate_too(tmp_path: Path, version: str) -> None:
    every = (
        "rbac-visibility",
        "remediation",
        "volcano",
        "volcano-write",
        "kai",
        "kai-write",
        "resourcequota",
    )
    for obj in with_components(tmp_path / version, "quota-write", *every):
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_validator_refuses_a_broken_object() -> None:
    # The schema check can fail: a Deployment with a misspelt field and a string for replicas.
    web = json.loads(json.dumps(one(render("read-only"), "Deployment", "gpu-ledger-web")))
    web["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, SCHEMA_VERSIONS[0], strict=True)
    web["spec"]["replicas"] = 2
    pod_spec(web)["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, SCHEMA_VERSIONS[0], strict=True)


# --- RBAC ------------------------------------------------------------------------------------


def test_read_only_grants_exactly_the_reads_and_can_write_nothing() -> None:
    objects = render("read-only")
    granted = grants(rules_of(objects))

    assert granted == READ_ONLY_GRANTS
    assert {a.verb for a in granted} & WRITE_VERBS == set()
    # Every role in the overlay is bound to the service account (none lies unused or elsewhere).
    assert {r["metadata"]["name"] for r in of_kind(objects, "ClusterRole")} == {"gpu-ledger-reader"}
    assert of_kind(objects, "Role") == [] and of_kind(objects, "RoleBinding") == []


def test_quota_write_adds_only_the_patch_of_clusterqueues_and_cohorts() -> None:
    objects = render("quota-write")
    granted = grants(rules_of(objects))

    assert granted == QUOTA_WRITE_GRANTS
    assert {a for a in granted if a.verb in WRITE_VERBS} == {
        Access(KUEUE, "clusterqueues", "patch"),
        Access(KUEUE, "cohorts", "patch"),
    }
    assert {r["metadata"]["name"] for r in of_kind(objects, "ClusterRole")} == {
        "gpu-ledger-reader",
        "gpu-ledger-quota-write",
    }


def test_rbac_visibility_adds_only_subjectaccessreview_create(tmp_path: Path) -> None:
    for overlay, base in (("read-only", READ_ONLY_GRANTS), ("quota-write", QUOTA_WRITE_GRANTS)):
        objects = with_components(tmp_path, overlay, "rbac-visibility")

        assert grants(rules_of(objects)) == base | {
            Access("authorization.k8s.io", "subjectaccessreviews", "create")
        }


def test_rbac_visibility_switches_the_setting_on_and_nothing_else(tmp_path: Path) -> None:
    def settings_of(objects: list[dict[str, Any]]) -> dict[str, str]:
        # The generated ConfigMap's name carries a hash of its content.
        (found,) = [
            o
            for o in of_kind(objects, "ConfigMap")
            if o["metadata"]["name"].startswith("gpu-ledger-settings")
        ]
        return found["data"]

    plain = settings_of(render("read-only"))
    settings = settings_of(with_components(tmp_path, "read-only", "rbac-visibility"))

    assert plain.get("GPULEDGER_RBAC_VISIBILITY") in (None, "false")
    assert settings == {**plain, "GPULEDGER_RBAC_VISIBILITY": "true"}


def test_remediation_adds_only_the_patch_of_workloads(tmp_path: Path) -> None:
    objects = with_components(tmp_path, "quota-write", "remediation")

    assert grants(rules_of(objects)) == QUOTA_WRITE_GRANTS | {Access(KUEUE, "workloads", "patch")}


def test_only_web_and_worker_mount_the_service_account_token() -> None:
    objects = render("quota-write")
    assert one(objects, "ServiceAccount", "gpu-ledger")["automountServiceAccountToken"] is False

    mounted = {
        o["metadata"]["name"]: (
            pod_spec(o).get("serviceAccountName"),
            pod_spec(o).get("automountServiceAccountToken"),
        )
        for o in workloads(objects)
    }

    assert mounted == {
        "gpu-ledger-web": ("gpu-ledger", True),
        "gpu-ledger-worker": ("gpu-ledger", True),
        "gpu-ledger-beat": (None, False),
        "gpu-ledger-migrate": (None, False),
    }


# --- the workloads -----------------------------------------------------------------------------


def dockerfile_cmd() -> list[str]:
    match = re.search(r"^CMD (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert match, "the Dockerfile has no exec-form CMD"
    return json.loads(match.group(1))


def test_one_image_for_every_container_set_by_each_overlays_images() -> None:
    base = render_dir(str(KUSTOMIZE / "base"))
    # The base names one image, gpu-ledger; only an overlay's `images` entry says which it is,
    # so `kustomize edit set image gpu-ledger=...` in an overlay reaches every container.
    assert {c["image"] for o in workloads(base) for c in containers(o)} == {"gpu-ledger"}
    for overlay in OVERLAYS:
        objects = render(overlay)
        images = {c["image"] for o in workloads(objects) for c in containers(o)}
        assert images == {"registry.example.com/gpu-ledger:1.0.0"}


def test_web_runs_gunicorn_as_the_dockerfile_does() -> None:
    web = one(render("read-only"), "Deployment", "gpu-ledger-web")
    command = pod_spec(web)["containers"][0]["command"]
    requirements = (ROOT / "requirements.txt").read_text()

    assert re.search(r"^gunicorn==", requirements, re.MULTILINE)
    cmd = dockerfile_cmd()
    assert command[: len(cmd)] == cmd
    port = int(cmd[cmd.index("--bind") + 1].rsplit(":", 1)[1])
    assert pod_spec(web)["containers"][0]["ports"] == [{"name": "http", "containerPort": port}]


def test_the_worker_serves_celerys_default_queue_and_beat_runs_alone() -> None:
    from config.celery import app

    objects = render("read-only")
    worker = one(objects, "Deployment", "gpu-ledger-worker")
    beat = one(objects, "Deployment", "gpu-ledger-beat")
    command = pod_spec(worker)["containers"][0]["command"]

    assert command[:4] == ["celery", "-A", "config", "worker"]
    # Per-cluster queues (fleet/routing.py) are served by further workers; this one the default.
    assert command[command.index("-Q") + 1] == app.conf.task_default_queue
    assert pod_spec(beat)["containers"][0]["command"][:4] == ["celery", "-A", "config", "beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}


def test_migrations_run_in_a_job_and_the_app_waits_for_them() -> None:
    objects = render("read-only")
    job = one(objects, "Job", "gpu-ledger-migrate")

    assert pod_spec(job)["containers"][0]["command"] == [
        "python",
        "manage.py",
        "migrate",
        "--no-input",
    ]
    for name in APP_CONTAINERS:
        deployment = one(objects, "Deployment", f"gpu-ledger-{name}")
        init = pod_spec(deployment)["initContainers"]
        assert [c["command"] for c in init] == [["python", "manage.py", "migrate", "--check"]]


def test_components_labels_select_their_own_pods() -> None:
    objects = render("read-only")
    for obj in workloads(objects):
        component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        assert obj["metadata"]["name"] == f"gpu-ledger-{component}"
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert labels == {
            "app.kubernetes.io/name": "gpu-ledger",
            "app.kubernetes.io/component": component,
        }
        if obj["kind"] == "Deployment":
            assert obj["spec"]["selector"]["matchLabels"] == labels


def test_the_web_service_is_what_the_servicemonitor_selects() -> None:
    # components/monitoring selects name=gpu-ledger, component=web and port "http" on the Service.
    objects = render("read-only")
    service = one(objects, "Service", "gpu-ledger-web")
    web = one(objects, "Deployment", "gpu-ledger-web")

    assert service["metadata"]["labels"] == {
        "app.kubernetes.io/name": "gpu-ledger",
        "app.kubernetes.io/component": "web",
    }
    assert service["spec"]["selector"] == web["spec"]["template"]["metadata"]["labels"]
    assert [(p["name"], p["targetPort"]) for p in service["spec"]["ports"]] == [("http", "http")]
    backend = one(objects, "Ingress", "gpu-ledger-web")["spec"]["rules"][0]["http"]["paths"][0]
    assert backend["backend"]["service"] == {"name": "gpu-ledger-web", "port": {"name": "http"}}


def test_probes_name_the_apps_own_health_views() -> None:
    web = one(render("read-only"), "Deployment", "gpu-ledger-web")
    container = pod_spec(web)["containers"][0]

    liveness = container["livenessProbe"]["httpGet"]
    readiness = container["readinessProbe"]["httpGet"]
    assert resolve(liveness["path"]).func is views.healthz
    assert resolve(readiness["path"]).func is views.readyz
    assert liveness["port"] == readiness["port"] == "http"


def test_containers_run_unprivileged_as_the_images_user() -> None:
    user = re.search(r"useradd .*--uid (\d+)", (ROOT / "Dockerfile").read_text())
    assert user, "the Dockerfile creates no user with a fixed uid"
    uid = int(user.group(1))
    for obj in workloads(render("read-only")):
        pod = pod_spec(obj)["securityContext"]
        assert (pod["runAsNonRoot"], pod["runAsUser"]) == (True, uid), obj["metadata"]["name"]
        for container in containers(obj):
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["readOnlyRootFilesystem"] is True
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert "memory" in container["resources"]["limits"]


def test_the_overlays_leave_the_monitoring_component_one_uncomment_away() -> None:
    for overlay in OVERLAYS:
        text = (KUSTOMIZE / "overlays" / overlay / "kustomization.yaml").read_text()
        assert "# components: [../../components/monitoring]" in text.splitlines()


def test_the_monitoring_component_renders_with_each_overlay(tmp_path: Path) -> None:
    if not (KUSTOMIZE / "components" / "monitoring" / "kustomization.yaml").exists():
        pytest.skip("components/monitoring is not in this tree (it ships with /metrics)")
    for overlay in OVERLAYS:
        objects = with_components(tmp_path / overlay, overlay, "monitoring")
        monitors = of_kind(objects, "ServiceMonitor")
        assert monitors, "the monitoring component has no ServiceMonitor"
        service = one(objects, "Service", "gpu-ledger-web")
        for monitor in monitors:
            assert monitor["metadata"]["namespace"] == "gpu-ledger"
            wanted: dict[str, Any] = monitor["spec"]["selector"]["matchLabels"]
            assert wanted.items() <= service["metadata"]["labels"].items()
            ports = {p["name"] for p in service["spec"]["ports"]}
            assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
