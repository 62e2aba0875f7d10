"""The PromQL of one serving hour, built from ``serving.constants`` (pure, no I/O).

Every query is an instant query at the hour's end over ``(end - 1 h, end]`` (``[3599999ms]``:
Prometheus 2.x range selectors include their left edge), and answers per pod
(``namespace``, ``pod``), labelled ``server``. Counters go through ``increase`` (counter resets
are handled by Prometheus), gauges through ``avg_over_time`` / ``max_over_time``, histograms
through ``increase`` of their buckets per ``le``; histograms are summed per pod controller in
Prometheus and per workload after (``serving.ingest``), where the quantiles are computed.
"""

from __future__ import annotations

from collections.abc import Callable

from serving import constants as c

HOUR_RANGE = "3599999ms"
BY_POD = f"{c.LABEL_NAMESPACE}, {c.LABEL_POD}"
BY_BUCKET = f"{BY_POD}, {c.LABEL_LE}"

PRESENCE = "presence"
KV_MEAN = "kv_mean"
KV_MAX = "kv_max"
GPUS = "gpus"
OWNERS = "owners"
REPLICASET_OWNERS = "replicaset_owners"
POD_LABELS = "pod_labels"


def _labelled(kind: str, expression: str) -> str:
    return f'label_replace({expression}, "{c.LABEL_SERVER}", "{kind}", "", "")'


def _newest_first(expressions: list[str], on: str = BY_POD) -> str:
    """``a or (b unless on (pod) a) or (c unless on (pod) (a or b))``: per pod, the first
    expression that has it, whole (a histogram's buckets never mix two names)."""
    combined = ""
    for expression in expressions:
        if not combined:
            combined = expression
        else:
            combined = f"{combined} or ({expression} unless on ({on}) ({combined}))"
    return combined


def _per_server(kind: str, expressions: list[str]) -> str:
    return _labelled(kind, f"({_newest_first(expressions)})")


def _across_servers(parts: list[str]) -> str:
    return " or ".join(parts)


def _series(selector: str) -> str:
    return f"{selector}[{HOUR_RANGE}]"


def presence_query() -> str:
    """Per pod and server: samples of its presence series in the hour (most of any series)."""
    parts = []
    for server in c.SERVERS:
        counts = " or ".join(
            f"count_over_time({_series(source.selector)})" for source in server.presence
        )
        parts.append(_labelled(server.kind, f"max by ({BY_POD}) ({counts})"))
    return _across_servers(parts)


def counter_query(figure: str) -> str:
    """Per pod and server: the counter's increase over the hour."""
    return _per_source(
        figure,
        lambda source: f"{source.combine} by ({BY_POD}) (increase({_series(source.selector)}))",
    )


def gauge_query(figure: str, over_time: str = "avg", combine: str | None = None) -> str:
    """Per pod and server: the gauge's mean (or max) over the hour's samples."""
    return _per_source(
        figure,
        lambda source: (
            f"{combine or source.combine} by ({BY_POD}) "
            f"({over_time}_over_time({_series(source.selector)}))"
        ),
    )


def _per_source(figure: str, expression: Callable[[c.Source], str]) -> str:
    """``expression`` of each source of ``figure``, per server that has one, across servers."""
    parts = [
        _per_server(server.kind, [expression(source) for source in sources])
        for server in c.SERVERS
        if (sources := getattr(server, figure))
    ]
    return _across_servers(parts)


def histogram_query(figure: str) -> str:
    """Per pod controller (``owner_kind``, ``owner_name``; a pod without one is its own, kind
    ``Pod``), server and ``le``: the increase of the histogram's buckets over the hour.

    Summed per controller in Prometheus: every pod of a controller serves one workload, and a
    workload's percentiles come from its summed buckets anyway, so the answer is one series per
    controller and bucket instead of one per pod and bucket (50x fewer for 50-replica
    Deployments). ``topk`` keeps one controller per pod, so the join never fails on a pod that
    two kube-state-metrics series name differently. ``serving.ingest.resolve_workloads`` maps
    both groupings (controller, or the pod itself) to the pod's workload."""
    parts = []
    for server in c.SERVERS:
        histograms = getattr(server, figure)
        if histograms:
            expressions = [
                f"sum by ({BY_BUCKET}) (increase({_series(h.name + '_bucket')}))"
                for h in histograms
            ]
            parts.append(_labelled(server.kind, f"({_newest_first(expressions)})"))
    # The controllers of the pods alive at the hour's end (an instant selector: one sample per
    # pod of the cluster, not the hour's); a pod gone before is grouped as its own.
    controllers = (
        f"topk by ({BY_POD}) (1, max by ({BY_POD}, owner_kind, owner_name) ("
        f'kube_pod_owner{{owner_is_controller="true"}})) '
        f"or on ({BY_POD}) "
        f'label_replace(label_replace({serving_pods()}, "owner_kind", "Pod", "", ""), '
        f'"owner_name", "$1", "{c.LABEL_POD}", "(.+)")'
    )
    return (
        f"sum by ({c.LABEL_NAMESPACE}, owner_kind, owner_name, {c.LABEL_SERVER}, {c.LABEL_LE}) "
        f"(({_across_servers(parts)}) * on ({BY_POD}) group_left (owner_kind, owner_name) "
        f"({controllers}))"
    )


def serving_pods() -> str:
    """One series per pod that exposed a server's metrics in the hour."""
    return f"group by ({BY_POD}) ({presence_query()})"


def gpus_query() -> str:
    """GPUs the serving pods requested (per resource; MIG instances by profile)."""
    return (
        f"sum by ({BY_POD}, resource) (max by ({BY_POD}, container, resource) ("
        f'max_over_time(kube_pod_container_resource_requests{{resource=~"{c.KSM_GPU_RESOURCE_REGEX}"}}'
        f"[{HOUR_RANGE}])) and on ({BY_POD}) {serving_pods()})"
    )


def owners_query() -> str:
    """The controller of each serving pod (ReplicaSet, StatefulSet, ...)."""
    return (
        f"max by ({BY_POD}, owner_kind, owner_name) ("
        f'max_over_time(kube_pod_owner{{owner_is_controller="true"}}[{HOUR_RANGE}]) '
        f"and on ({BY_POD}) {serving_pods()})"
    )


def replicaset_owners_query() -> str:
    """The Deployment of each ReplicaSet in the serving pods' namespaces."""
    return (
        "max by (namespace, replicaset, owner_kind, owner_name) ("
        f'max_over_time(kube_replicaset_owner{{owner_kind!="<none>"}}[{HOUR_RANGE}]) '
        f"and on (namespace) group by (namespace) ({serving_pods()}))"
    )


def pod_labels_query() -> str:
    """The LeaderWorkerSet / KServe InferenceService labels of the serving pods, if allowlisted."""
    return (
        f"max by ({BY_POD}, {c.KSM_LABEL_LWS}, {c.KSM_LABEL_KSERVE}) ("
        f'max_over_time(kube_pod_labels{{{c.KSM_LABEL_LWS}!=""}}[{HOUR_RANGE}]) or '
        f'max_over_time(kube_pod_labels{{{c.KSM_LABEL_KSERVE}!=""}}[{HOUR_RANGE}])'
        f") and on ({BY_POD}) {serving_pods()}"
    )


def hour_queries() -> dict[str, str]:
    """Every query of one serving hour, by answer name."""
    queries = {PRESENCE: presence_query()}
    for figure in c.COUNTERS:
        queries[figure] = counter_query(figure)
    for figure in c.GAUGES:
        queries[figure] = gauge_query(figure)
    queries[KV_MEAN] = gauge_query("kv_cache", "avg", "avg")
    queries[KV_MAX] = gauge_query("kv_cache", "max", "max")
    for figure in c.HISTOGRAMS:
        queries[figure] = histogram_query(figure)
    queries[GPUS] = gpus_query()
    queries[OWNERS] = owners_query()
    queries[REPLICASET_OWNERS] = replicaset_owners_query()
    queries[POD_LABELS] = pod_labels_query()
    return queries
