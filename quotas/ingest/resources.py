"""A pod's effective resource requests, by the Kubernetes rule (pod specs and pod set templates)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from quotas.ingest.fields import (
    ZERO,
    Malformed,
    parse_cached,
    read_dict,
    read_list,
    read_quantity,
)


def _container_requests(container: object, what: str) -> dict[str, Decimal]:
    container = read_dict(container, what, required=True)
    resources = read_dict(container.get("resources"), f"{what}.resources")
    requests = read_dict(resources.get("requests"), f"{what}.resources.requests")
    limits = read_dict(resources.get("limits"), f"{what}.resources.limits")
    # Kubernetes defaults a missing request to its limit (always so for extended resources).
    merged = {**limits, **requests}
    result = {}
    for name, value in merged.items():
        try:
            result[name] = parse_cached(value)
        except ValueError as exc:  # the message is built only when needed: this is a hot loop
            raise Malformed("bad_quantity", f"{what} {name}: {value!r}") from exc
    return result


def add_requests(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """Two request maps added per resource (a new map)."""
    result = dict(total)
    for name, value in more.items():
        result[name] = result.get(name, ZERO) + value
    return result


def _max(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> dict[str, Decimal]:
    # max(x, y) per resource, a missing one counting as 0; written out because it runs for every
    # pod and pod set (builtin max keeps x on a tie, and so does this).
    result = {}
    for name, value in a.items():
        other = b.get(name, ZERO)
        result[name] = other if other > value else value
    for name, other in b.items():
        if name not in a:
            result[name] = other if other > ZERO else ZERO
    return result


def pod_requests(spec: dict) -> dict[str, Decimal]:
    """Effective pod requests by the Kubernetes rule.

    max(Σ app containers + Σ sidecars, max over init containers of (its request + the sidecars
    started before it)), plus ``spec.overhead``. Sidecars are init containers with
    ``restartPolicy: Always``.
    """
    containers: dict[str, Decimal] = {}
    for index, container in enumerate(read_list(spec.get("containers"), "spec.containers")):
        containers = add_requests(
            containers, _container_requests(container, f"containers[{index}]")
        )
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for index, container in enumerate(read_list(spec.get("initContainers"), "spec.initContainers")):
        requests = _container_requests(container, f"initContainers[{index}]")
        if container.get("restartPolicy") == "Always":
            sidecars = add_requests(sidecars, requests)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, add_requests(sidecars, requests))
    effective = _max(add_requests(containers, sidecars), init_peak)
    overhead = read_dict(spec.get("overhead"), "spec.overhead")
    return add_requests(
        effective, {k: read_quantity(v, f"overhead {k}") for k, v in overhead.items()}
    )
