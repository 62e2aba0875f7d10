"""Typed readers of Kubernetes object fields: each raises ``Malformed`` instead of letting a
KeyError or TypeError through.

Also here: quantities (cached parsing) and GPU equivalents, object metadata and its identity,
the apiVersion check, and Workload / ClusterQueue conditions.

GPUs are counted as GPU equivalents: ``nvidia.com/gpu`` one each, ``nvidia.com/mig-Ng.*`` N/7.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from core.mig import GPU_RESOURCE, MIG_RESOURCE_PREFIX, mig_slices
from core.quantity import parse_quantity
from quotas import constants as c
from quotas.ingest.rows import ObjectMeta

ZERO = Decimal(0)
# Kinds identified by (namespace, name); the others by name alone.
NAMESPACED_KINDS = frozenset({"LocalQueue", "Workload", "Pod"})


class Malformed(ValueError):
    """An object we cannot read; ``reason`` is the short code counted in ``skip_reasons``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def read_dict(value: object, what: str, *, required: bool = False) -> dict:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise Malformed("wrong_type", f"{what} is not an object")
    return value


def read_list(value: object, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed("wrong_type", f"{what} is not a list")
    return value


def read_str(value: object, what: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise Malformed("wrong_type", f"{what} is not a string")
    return value


def read_int(value: object, what: str, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed("wrong_type", f"{what} is not an integer")
    return value


def read_bool(value: object, what: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise Malformed("wrong_type", f"{what} is not a boolean")
    return value


def read_str_map(value: object, what: str) -> dict[str, str]:
    mapping = read_dict(value, what)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise Malformed("wrong_type", f"{what} has non-string entries")
    return mapping


# The same few quantity strings ("8", "500m", "64Gi") recur across tens of thousands of objects;
# Decimals are immutable, so one parse per distinct string serves them all.
_parse_text = functools.lru_cache(maxsize=4096)(parse_quantity)


def parse_cached(value: object) -> Decimal:
    # Only strings are cached: True == 1 and 1 == 1.0 share a cache entry.
    return _parse_text(value) if type(value) is str else parse_quantity(value)


def read_quantity(value: object, what: str) -> Decimal:
    try:
        return parse_cached(value)
    except ValueError as exc:
        raise Malformed("bad_quantity", f"{what}: {value!r}") from exc


def read_optional_quantity(value: object, what: str) -> Decimal | None:
    return None if value is None else read_quantity(value, what)


def read_time(value: object, what: str) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Malformed("bad_time", f"{what}: {value!r}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise Malformed("bad_time", f"{what}: {value!r}") from exc
    if moment.tzinfo is None:
        raise Malformed("bad_time", f"{what} has no offset: {value!r}")
    return moment.astimezone(UTC)


def read_optional_int(value: object, what: str) -> int | None:
    return None if value is None else read_int(value, what)


def is_gpu_resource(resource: str) -> bool:
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


def gpu_equivalent(resource: str, amount: Decimal) -> Decimal:
    """GPUs an amount of a resource stands for: 1 per ``nvidia.com/gpu``, N/7 per MIG ``Ng``."""
    if resource == GPU_RESOURCE:
        return amount
    if resource.startswith(MIG_RESOURCE_PREFIX):
        slices = mig_slices(resource[len(MIG_RESOURCE_PREFIX) :])
        if slices is None:
            raise Malformed("bad_mig_profile", resource)
        return amount * Decimal(slices) / c.MIG_COMPUTE_SLICES
    return ZERO


def gpu_total(requests: Mapping[str, Decimal]) -> Decimal:
    """GPU equivalents of a request map's GPU resources."""
    return sum((gpu_equivalent(r, v) for r, v in requests.items() if is_gpu_resource(r)), ZERO)


def to_float(value: Decimal) -> float:
    """A Decimal as the float the rows carry, rounded to 6 places."""
    return round(float(value), 6)


def find_condition(conditions: list[dict], kind: str) -> dict | None:
    """The condition of type ``kind``, or None."""
    for cond in conditions:
        if cond.get("type") == kind:
            return cond
    return None


def read_conditions(status: dict) -> list[dict]:
    """``status.conditions``, each checked to be an object with string fields."""
    conditions = read_list(status.get("conditions"), "status.conditions")
    for cond in conditions:
        cond = read_dict(cond, "status.conditions[]", required=True)
        read_str(cond.get("type"), "condition.type")
        read_str(cond.get("status"), "condition.status")
        read_str(cond.get("reason"), "condition.reason")
        read_str(cond.get("message"), "condition.message")
    return conditions


def check_api_version(item: dict, kind: str) -> None:
    """Malformed unless the item's apiVersion is one we read for ``kind``."""
    api_version = item.get("apiVersion")
    if api_version not in c.API_VERSIONS[kind]:
        raise Malformed("unknown_api_version", repr(api_version))
    if item.get("kind") not in (None, kind):
        raise Malformed("unexpected_kind", repr(item.get("kind")))


def read_meta(item: Any, kind: str) -> ObjectMeta:
    """The identity, labels and owners of an object; Malformed without a name."""
    if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
        raise Malformed("missing_metadata")
    metadata = item["metadata"]
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise Malformed("missing_name")
    namespace = metadata.get("namespace")
    if kind in NAMESPACED_KINDS:
        if not isinstance(namespace, str) or not namespace:
            raise Malformed("missing_namespace")
    else:
        namespace = ""
    owners = read_list(metadata.get("ownerReferences"), "metadata.ownerReferences")
    if not all(isinstance(o, dict) for o in owners):
        raise Malformed("wrong_type", "metadata.ownerReferences")
    return ObjectMeta(
        name=name,
        namespace=namespace,
        uid=read_str(metadata.get("uid"), "metadata.uid"),
        resource_version=read_str(metadata.get("resourceVersion"), "metadata.resourceVersion"),
        labels=read_str_map(metadata.get("labels"), "metadata.labels"),
        annotations=read_str_map(metadata.get("annotations"), "metadata.annotations"),
        created_at=read_time(metadata.get("creationTimestamp"), "metadata.creationTimestamp"),
        owner_references=owners,
    )
