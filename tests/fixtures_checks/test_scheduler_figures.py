"""The expected figures in the Volcano, KAI and ResourceQuota fixture READMEs follow from the
fixture objects: each table is re-derived here from the Queues, PodGroups, ResourceQuotas and Pods
by a small computation of its own, and so are the exporters' samples in the ``*.prom`` files."""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from tests.scheduler_fixtures import FIXTURES, KAI_GROUP, VOLCANO_GROUP, scheduler_items

NOW = datetime(2026, 8, 22, 12, tzinfo=UTC)
GPU = "nvidia.com/gpu"
UUID_SUFFIX = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def readme_table(source: str, first_header: str) -> dict[str, dict[str, str]]:
    """The README table whose first column is headed ``first_header``, keyed by that column."""
    lines = (FIXTURES / source / "README.md").read_text().splitlines()
    for at, line in enumerate(lines):
        cells = _cells(line)
        if cells and cells[0] == first_header:
            rows = {}
            for row in lines[at + 2 :]:
                if not row.startswith("|"):
                    break
                values = _cells(row)
                rows[values[0]] = dict(zip(cells, values, strict=True))
            return rows
    raise AssertionError(f"no table headed {first_header!r} in {source}/README.md")


def _cells(line: str) -> list[str]:
    if not line.startswith("|"):
        return []
    return [c.strip().strip("*`") for c in line.strip().strip("|").split("|")]


def gpus(resources: dict[str, Any] | None, name: str = GPU) -> Decimal:
    return Decimal(str((resources or {}).get(name, 0)))


def pod_gpus(pod: dict[str, Any]) -> Decimal:
    return sum((gpus(c["resources"].get("requests")) for c in pod["spec"]["containers"]), Decimal())


def bound_running(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and pod["status"]["phase"] == "Running"


def unbound_pending(pod: dict[str, Any]) -> bool:
    return not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"


def rolled_up(own: dict[str, Decimal], parent_of: dict[str, str | None]) -> dict[str, Decimal]:
    """Each queue's own figure plus every descendant's."""
    total: dict[str, Decimal] = defaultdict(Decimal)
    for queue, value in own.items():
        node: str | None = queue
        while node is not None:
            total[node] += value
            node = parent_of[node]
    return {q: total[q] for q in parent_of}


def number(cell: str) -> Decimal | None:
    return None if cell in ("unlimited", "none") else Decimal(cell)


def samples(path: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], Decimal]:
    """``{(metric, sorted labels): value}`` from a Prometheus exposition file."""
    found = {}
    for line in (FIXTURES / path).read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        assert match, line
        labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', match[2])))
        found[(match[1], labels)] = Decimal(match[3])
    return found


# --- Volcano ------------------------------------------------------------------------------------
def volcano() -> dict[str, Any]:
    queues = {
        q["metadata"]["name"]: q for q in scheduler_items("volcano", f"Queue.{VOLCANO_GROUP}")
    }
    groups = scheduler_items("volcano", f"PodGroup.{VOLCANO_GROUP}")
    pods = scheduler_items("volcano", "Pod")
    parent_of = {name: q["spec"].get("parent") for name, q in queues.items()}
    group_of = {g["metadata"]["name"]: g for g in groups}
    held: dict[str, Decimal] = defaultdict(Decimal)
    running: dict[str, int] = defaultdict(int)
    for pod in pods:
        group = group_of[pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"]]
        assert pod["spec"]["schedulerName"] == "volcano"
        if bound_running(pod):
            held[group["metadata"]["name"]] += pod_gpus(pod)
            running[group["metadata"]["name"]] += 1
    own_alloc: dict[str, Decimal] = defaultdict(Decimal)
    own_pending: dict[str, Decimal] = defaultdict(Decimal)
    own_in_use: dict[str, Decimal] = defaultdict(Decimal)
    workloads = {}
    for name, group in group_of.items():
        queue = group["spec"]["queue"]
        phase = group["status"]["phase"]
        waiting = gpus(group["spec"]["minResources"]) if phase == "Pending" else 0
        reserved = gpus(group["spec"]["minResources"]) if phase in ("Inqueue", "Running") else 0
        own_alloc[queue] += held[name]
        own_pending[queue] += waiting
        own_in_use[queue] += held[name] + (reserved if phase == "Inqueue" else 0)
        key = f"{group['metadata']['namespace']}/{UUID_SUFFIX.sub('', name)}"
        workloads[key] = {
            "queue": queue,
            "minMember": str(group["spec"]["minMember"]),
            "phase": phase,
            "GPUs held": held[name],
            "GPUs reserved": Decimal(reserved),
            "GPUs pending": Decimal(waiting),
            "running pods": Decimal(running[name]),
        }
    allocated = rolled_up(own_alloc, parent_of)
    in_use = rolled_up(own_in_use, parent_of)
    pending = rolled_up(own_pending, parent_of)
    figures = {}
    for name, q in queues.items():
        spec = q["spec"]
        nominal = gpus(spec.get("deserved"))
        capability = spec.get("capability")
        guarantee = gpus((spec.get("guarantee") or {}).get("resource"))
        lendable = max(Decimal(0), nominal - max(in_use[name], guarantee))
        figures[name] = {
            "parent": parent_of[name] or "–",
            "nominal": nominal,
            "borrowing limit": None if capability is None else gpus(capability) - nominal,
            "guarantee": guarantee,
            "allocated": allocated[name],
            "in use": in_use[name],
            "borrowed": max(Decimal(0), in_use[name] - nominal),
            "lendable": lendable if spec.get("reclaimable", True) else Decimal(0),
            "pending": pending[name],
        }
        assert gpus(q["status"].get("allocated")) == allocated[name], name
    return {"queues": figures, "workloads": workloads, "raw": queues}


def test_volcano_queue_status_counts_match_the_podgroups() -> None:
    groups = scheduler_items("volcano", f"PodGroup.{VOLCANO_GROUP}")
    counted: dict[tuple[str, str], int] = defaultdict(int)
    for group in groups:
        counted[(group["spec"]["queue"], group["status"]["phase"].lower())] += 1
    for name, queue in volcano()["raw"].items():
        for phase in ("pending", "inqueue", "running", "completed", "unknown"):
            assert queue["status"].get(phase, 0) == counted[(name, phase)], (name, phase)


def test_volcano_exporter_samples_are_milli_gpus_of_the_figures() -> None:
    derived, raw = volcano()["queues"], volcano()["raw"]
    found = samples("volcano/metrics.sample.prom")

    def scalar(metric: str, queue: str) -> Decimal | None:
        return found.get((metric, (("queue_name", queue), ("resource", GPU))))

    for name, figures in derived.items():
        allocated = scalar("volcano_queue_allocated_scalar_resources", name)
        # An absent series is a queue that never held the resource in this scheduler's life.
        assert (allocated or 0) == figures["allocated"] * 1000, name
        capability = raw[name]["spec"].get("capability")
        assert scalar("volcano_queue_capacity_scalar_resources", name) == (
            None if capability is None else gpus(capability) * 1000
        )
        deserved = scalar("volcano_queue_deserved_scalar_resources", name)
        assert deserved is None or deserved == figures["nominal"] * 1000, name
        for phase in ("pending", "inqueue", "running", "completed", "unknown"):
            key = (f"volcano_queue_pod_group_{phase}_count", (("queue_name", name),))
            assert found[key] == raw[name]["status"].get(phase, 0), (name, phase)
    assert not any(metric.startswith("volcano_queue_capability") for metric, _ in found)


# --- KAI ----------------------------------------------------------------------------------------
def kai() -> dict[str, Any]:
    queues = {q["metadata"]["name"]: q for q in scheduler_items("kai", f"Queue.{KAI_GROUP}")}
    groups = {
        (g["metadata"]["namespace"], g["metadata"]["name"]): g
        for g in scheduler_items("kai", f"PodGroup.{KAI_GROUP}")
    }
    parent_of = {name: q["spec"].get("parentQueue") for name, q in queues.items()}
    own_alloc: dict[str, Decimal] = defaultdict(Decimal)
    own_pending: dict[str, Decimal] = defaultdict(Decimal)
    per_group: dict[tuple[str, str], list[Decimal]] = defaultdict(lambda: [Decimal()] * 3)
    for pod in scheduler_items("kai", "Pod"):
        queue = pod["metadata"]["labels"]["kai.scheduler/queue"]
        key = (pod["metadata"]["namespace"], pod["metadata"]["annotations"]["pod-group-name"])
        assert groups[key]["spec"]["queue"] == queue
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        held, waiting, count = per_group[key]
        if bound_running(pod):
            own_alloc[queue] += pod_gpus(pod)
            per_group[key] = [held + pod_gpus(pod), waiting, count + 1]
        elif unbound_pending(pod):
            own_pending[queue] += pod_gpus(pod)
            per_group[key] = [held, waiting + pod_gpus(pod), count]
    allocated = rolled_up(own_alloc, parent_of)
    pending = rolled_up(own_pending, parent_of)
    figures = {}
    for name, q in queues.items():
        gpu = q["spec"]["resources"]["gpu"]
        quota, limit = Decimal(str(gpu["quota"])), Decimal(str(gpu["limit"]))
        nominal = None if quota == -1 else quota
        figures[name] = {
            "parent": parent_of[name] or "–",
            "nominal": nominal,
            "borrowing limit": None if limit == -1 or nominal is None else limit - nominal,
            "over-quota weight": Decimal(str(gpu["overQuotaWeight"])),
            "allocated": allocated[name],
            "borrowed": max(Decimal(0), allocated[name] - (nominal or allocated[name])),
            "pending": pending[name],
        }
        assert gpus(q["status"].get("allocated")) == allocated[name], name
        requested = gpus(q["status"].get("requested"))
        assert requested == allocated[name] + pending[name], name
    workloads = {}
    for (namespace, name), group in groups.items():
        held, waiting, count = per_group[(namespace, name)]
        assert gpus(group["status"]["resourcesStatus"].get("allocated")) == held, name
        short = UUID_SUFFIX.sub("", name).removeprefix("pg-")
        workloads[f"{namespace}/{short}"] = {
            "queue": group["spec"]["queue"],
            "minMember": str(group["spec"]["minMember"]),
            "GPUs held": held,
            "GPUs pending": waiting,
            "running pods": Decimal(count),
        }
    return {"queues": figures, "workloads": workloads, "raw": queues}


def test_kai_exporter_samples_are_the_quota_and_the_allocated_gpus() -> None:
    raw, derived = kai()["raw"], kai()["queues"]
    found = samples("kai/metrics.sample.prom")
    for name, queue in raw.items():
        labels = (("queue_name", name),)
        gpu = queue["spec"]["resources"]["gpu"]
        assert found[("kai_queue_deserved_gpus", labels)] == Decimal(str(gpu["quota"]))
        assert found[("kai_queue_allocated_gpus", labels)] == derived[name]["allocated"]
        assert found[("kai_queue_info", labels)] == 1


def _derived(source: str) -> dict[str, Any]:
    return volcano() if source == "volcano" else kai()


@pytest.mark.parametrize("source", ["volcano", "kai"])
def test_queue_figures_follow_from_the_objects(source: str) -> None:
    derived = _derived(source)["queues"]
    table = readme_table(source, "queue")
    assert set(table) == set(derived)
    for name, row in table.items():
        for column, value in derived[name].items():
            cell = row[column]
            assert (cell if column == "parent" else number(cell)) == value, (name, column)


@pytest.mark.parametrize("source", ["volcano", "kai"])
def test_workload_figures_follow_from_the_objects(source: str) -> None:
    derived = _derived(source)["workloads"]
    table = readme_table(source, "workload")
    assert set(table) == set(derived)
    for name, row in table.items():
        for column, value in derived[name].items():
            expected = Decimal(row[column]) if isinstance(value, Decimal) else row[column]
            assert expected == value, (name, column)


# --- ResourceQuota -----------------------------------------------------------------------------
def charged(pod: dict[str, Any]) -> bool:
    """Whether quota still counts the pod: not terminal, and not past its deletion grace."""
    if pod["status"]["phase"] in ("Succeeded", "Failed"):
        return False
    meta = pod["metadata"]
    if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") is not None:
        deleted = datetime.fromisoformat(meta["deletionTimestamp"].replace("Z", "+00:00"))
        return NOW <= deleted + timedelta(seconds=meta["deletionGracePeriodSeconds"])
    return True


def resource_quota() -> dict[str, Any]:
    quotas = scheduler_items("resourcequota", "ResourceQuota")
    pods = scheduler_items("resourcequota", "Pod")
    figures = {}
    for quota in quotas:
        if "requests.nvidia.com/gpu" not in quota["spec"]["hard"]:
            continue
        namespace = quota["metadata"]["namespace"]
        mine = [p for p in pods if p["metadata"]["namespace"] == namespace and charged(p)]
        used = sum((pod_gpus(p) for p in mine), Decimal())
        assert gpus(quota["status"]["used"], "requests.nvidia.com/gpu") == used, namespace
        assert quota["status"]["hard"] == quota["spec"]["hard"]
        figures[namespace] = {
            "quota": quota["metadata"]["name"],
            "nominal": gpus(quota["spec"]["hard"], "requests.nvidia.com/gpu"),
            "used": used,
            "allocated": sum((pod_gpus(p) for p in mine if bound_running(p)), Decimal()),
            "borrowed": Decimal(0),
            "pending": sum((pod_gpus(p) for p in mine if unbound_pending(p)), Decimal()),
        }
    workloads: dict[str, dict[str, Any]] = {}
    for pod in pods:
        owner = pod["metadata"]["ownerReferences"][0]
        key = f"{pod['metadata']['namespace']}/{owner['kind']}/{owner['name']}"
        row = workloads.setdefault(
            key,
            {
                n: Decimal(0)
                for n in ("GPUs held", "GPUs pending", "running pods", "disrupted pods")
            },
        )
        if bound_running(pod):
            row["GPUs held"] += pod_gpus(pod)
            row["running pods"] += 1
        elif unbound_pending(pod):
            row["GPUs pending"] += pod_gpus(pod)
        conditions = pod["status"].get("conditions") or []
        if any(c["type"] == "DisruptionTarget" and c["status"] == "True" for c in conditions):
            row["disrupted pods"] += 1
    return {"quotas": figures, "workloads": workloads, "raw": quotas}


def test_resourcequota_figures_follow_from_the_objects() -> None:
    derived = resource_quota()["quotas"]
    table = readme_table("resourcequota", "namespace")
    assert set(table) == set(derived)
    for namespace, row in table.items():
        for column, value in derived[namespace].items():
            assert (row[column] if column == "quota" else Decimal(row[column])) == value


def test_resourcequota_workload_figures_follow_from_the_pods() -> None:
    derived = resource_quota()["workloads"]
    table = readme_table("resourcequota", "workload")
    assert set(table) == set(derived)
    for key, row in table.items():
        assert {c: Decimal(row[c]) for c in derived[key]} == derived[key], key


def test_the_preempted_pod_is_marked_by_the_scheduler() -> None:
    marked = [
        (p["metadata"]["name"], c["reason"])
        for p in scheduler_items("resourcequota", "Pod")
        for c in p["status"].get("conditions") or []
        if c["type"] == "DisruptionTarget"
    ]
    assert marked == [("bert-distill-0-m3p9s", "PreemptionByScheduler")]


def test_kube_state_metrics_samples_are_the_quota_status() -> None:
    from core.quantity import parse_quantity

    found = samples("resourcequota/kube-state-metrics.sample.prom")
    expected = {}
    for quota in resource_quota()["raw"]:
        meta = quota["metadata"]
        for kind in ("hard", "used"):
            for resource, value in quota["status"][kind].items():
                labels = (
                    ("namespace", meta["namespace"]),
                    ("resource", resource),
                    ("resourcequota", meta["name"]),
                    ("type", kind),
                )
                expected[labels] = Decimal(parse_quantity(value))
    sampled = {labels: v for (metric, labels), v in found.items() if metric == "kube_resourcequota"}
    assert sampled == expected


@pytest.mark.parametrize("source", ["volcano", "kai", "resourcequota"])
def test_the_readme_tables_are_not_empty(source: str) -> None:
    first = "namespace" if source == "resourcequota" else "queue"
    assert len(readme_table(source, first)) >= 3
    assert len(readme_table(source, "workload")) >= 5
