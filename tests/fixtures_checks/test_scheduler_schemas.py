"""The Volcano, KAI and ResourceQuota fixtures are objects the API server could hold: each Queue
and PodGroup validates against the openAPIV3Schema of its CRD in the fixture's ``crds/`` (unknown
fields refused, as structural pruning would drop them), and each Pod and ResourceQuota uses only
Kubernetes v1 fields (it survives a round trip through the client's typed models)."""

from __future__ import annotations

import copy
import hashlib
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes.client import ApiClient

from tests.scheduler_fixtures import FIXTURES, KAI_GROUP, SOURCES, VOLCANO_GROUP, list_response

CRDS = {
    (VOLCANO_GROUP, "Queue"): ("volcano", "scheduling.volcano.sh_queues.yaml"),
    (VOLCANO_GROUP, "PodGroup"): ("volcano", "scheduling.volcano.sh_podgroups.yaml"),
    (KAI_GROUP, "Queue"): ("kai", "scheduling.run.ai_queues.yaml"),
    (KAI_GROUP, "PodGroup"): ("kai", "scheduling.run.ai_podgroups.yaml"),
}
CUSTOM_KINDS = [
    (source, kind) for source, kinds in SOURCES.items() for kind in kinds if "." in kind
]
CORE_KINDS = [
    (source, kind) for source, kinds in SOURCES.items() for kind in kinds if "." not in kind
]
OBJECT_META = "V1ObjectMeta"


def closed(schema: Any) -> Any:
    """The schema with unknown fields refused wherever the CRD lists the properties."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: closed(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_version(group: str, kind: str, version: str) -> dict[str, Any]:
    source, name = CRDS[(group, kind)]
    crd = yaml.safe_load((FIXTURES / source / "crds" / name).read_text())
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == kind
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            assert entry["served"] is True
            return entry
    raise AssertionError(f"{kind}.{group} has no version {version}")


def validator(group: str, kind: str, version: str) -> jsonschema.Draft4Validator:
    schema = closed(crd_version(group, kind, version)["schema"]["openAPIV3Schema"])
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


def errors(group: str, kind: str, version: str, obj: dict[str, Any]) -> list[str]:
    found = validator(group, kind, version).iter_errors(obj)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


def model_errors(model: str, obj: Any, path: str = "") -> list[str]:
    """Fields of ``obj`` that the client's typed model ``model`` does not know, recursively."""
    client = ApiClient()
    typed = client._ApiClient__deserialize(copy.deepcopy(obj), model)  # type: ignore[attr-defined]
    back = client.sanitize_for_serialization(typed)
    return _missing(obj, back, path)


def _missing(original: Any, back: Any, path: str) -> list[str]:
    if isinstance(original, dict):
        if not isinstance(back, dict):
            return [path or "/"]
        out = []
        for key, value in original.items():
            if key not in back:
                if value is not None:
                    out.append(f"{path}/{key}")
                continue
            out.extend(_missing(value, back[key], f"{path}/{key}"))
        return out
    if isinstance(original, list):
        if not isinstance(back, list) or len(back) != len(original):
            return [path]
        return [
            m
            for i, (a, b) in enumerate(zip(original, back, strict=True))
            for m in _missing(a, b, f"{path}[{i}]")
        ]
    return []


@pytest.mark.parametrize(("source", "kind"), CUSTOM_KINDS)
def test_every_custom_object_validates_against_its_crd(source: str, kind: str) -> None:
    doc = list_response(source, kind)
    plain_kind, group = kind.split(".", 1)
    assert doc["kind"] == f"{plain_kind}List"
    group_name, version = doc["apiVersion"].split("/")
    assert group_name == group
    assert doc["items"]
    for item in doc["items"]:
        assert item["apiVersion"] == doc["apiVersion"] and item["kind"] == plain_kind
        assert errors(group, plain_kind, version, item) == [], item["metadata"]["name"]
        assert model_errors(OBJECT_META, item["metadata"]) == [], item["metadata"]["name"]


@pytest.mark.parametrize(("source", "kind"), CORE_KINDS)
def test_every_core_object_uses_only_kubernetes_v1_fields(source: str, kind: str) -> None:
    doc = list_response(source, kind)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", f"{kind}List")
    assert doc["items"]
    for item in doc["items"]:
        assert model_errors(f"V1{kind}", {"apiVersion": "v1", "kind": kind, **item}) == []


def test_the_schema_check_refuses_an_unknown_field_and_a_bad_value() -> None:
    queue = copy.deepcopy(list_response("volcano", f"Queue.{VOLCANO_GROUP}")["items"][0])
    queue["spec"]["deservd"] = {"nvidia.com/gpu": "8"}
    queue["status"]["state"] = "Draining"
    found = errors(VOLCANO_GROUP, "Queue", "v1beta1", queue)
    assert any("deservd" in e for e in found) and any("Draining" in e for e in found)
    kai = copy.deepcopy(list_response("kai", f"Queue.{KAI_GROUP}")["items"][0])
    kai["spec"]["resources"]["gpu"]["quota"] = "16"
    assert errors(KAI_GROUP, "Queue", "v2", kai) != []
    group = copy.deepcopy(list_response("kai", f"PodGroup.{KAI_GROUP}")["items"][0])
    group["spec"]["minMember"] = 0
    assert errors(KAI_GROUP, "PodGroup", "v2alpha2", group) != []


def test_the_model_check_refuses_a_field_pods_do_not_have() -> None:
    pod = copy.deepcopy(list_response("resourcequota", "Pod")["items"][0])
    pod["spec"]["queueName"] = "vision"
    pod["status"]["conditions"][0]["severity"] = "high"
    assert model_errors("V1Pod", pod) == ["/spec/queueName", "/status/conditions[0]/severity"]


@pytest.mark.parametrize("source", ["volcano", "kai"])
def test_the_crds_are_the_copies_the_readme_names(source: str) -> None:
    readme = (FIXTURES / source / "README.md").read_text()
    listed = dict(re.findall(r"^\| (\S+\.yaml) \| ([0-9a-f]{64}) \|$", readme, re.MULTILINE))
    on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in _crd_files(source)}
    assert listed == on_disk


def _crd_files(source: str) -> list[Path]:
    return sorted((FIXTURES / source / "crds").glob("*.yaml"))
