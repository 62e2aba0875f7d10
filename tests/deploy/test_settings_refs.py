"""The manifests set only variables the app reads, secrets only by reference, and a
configuration the settings accept."""

from __future__ import annotations

import ast
import os
import re
import secrets
import subprocess
import sys
from typing import Any

from fleet.secrets import validate_secret_env_name
from tests.config.test_settings_source import parse, settings_modules, variables_read
from tests.deploy.rendering import (
    APP_CONTAINERS,
    ROOT,
    containers,
    of_kind,
    one,
    render,
    workloads,
)

# Not settings: the pod's address, which ALLOWED_HOSTS takes in (web.yaml), and the one
# Prometheus secret the manifests offer, which the admin names on a cluster (fleet/secrets.py
# reads GPULEDGER_SECRET_* variables only).
PROMETHEUS_SECRET = "GPULEDGER_SECRET_PROMETHEUS_TOKEN"
HELPER_VARIABLES = {"POD_IP", PROMETHEUS_SECRET}


def settings_read() -> set[str]:
    read: set[str] = set()
    for path in settings_modules():
        read |= variables_read(parse(path))
    return read


def secret_settings() -> set[str]:
    """Variables the settings read with env_secret (they may come from NAME_FILE too)."""
    names = set()
    for path in settings_modules():
        for node in ast.walk(parse(path)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "env_secret"
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
    return names


def settings_map(objects: list[dict[str, Any]]) -> dict[str, str]:
    [config_map] = of_kind(objects, "ConfigMap")
    assert config_map["metadata"]["name"].startswith("gpu-ledger-settings-")
    return config_map["data"]


def env_of(container: dict[str, Any]) -> list[dict[str, Any]]:
    return container.get("env", [])


def test_every_variable_set_is_one_the_settings_read() -> None:
    read = settings_read() | HELPER_VARIABLES
    for overlay in ("read-only", "quota-write"):
        objects = render(overlay)
        set_names = set(settings_map(objects))
        for obj in workloads(objects):
            for container in containers(obj):
                set_names |= {e["name"] for e in env_of(container)}

        assert sorted(set_names - read) == [], "set in the manifests but read by nothing"


def test_secrets_come_only_from_secret_references() -> None:
    secrets = secret_settings() | {PROMETHEUS_SECRET}
    assert {
        "SECRET_KEY",
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "CACHE_URL",
        "GPULEDGER_OIDC_CLIENT_SECRET",
        "GPULEDGER_METRICS_TOKEN",
    } <= secrets
    objects = render("read-only")

    assert sorted(set(settings_map(objects)) & secrets) == [], "a secret in the ConfigMap"
    for obj in workloads(objects):
        for container in containers(obj):
            for entry in env_of(container):
                if entry["name"] in secrets:
                    assert set(entry) == {"name", "valueFrom"}, entry
                    ref = entry["valueFrom"]["secretKeyRef"]
                    assert ref["name"] in {"gpu-ledger-secrets", "gpu-ledger-metrics"}, entry


def secret_refs(container: dict[str, Any]) -> dict[str, tuple[str, str, bool]]:
    return {
        e["name"]: (
            e["valueFrom"]["secretKeyRef"]["name"],
            e["valueFrom"]["secretKeyRef"]["key"],
            e["valueFrom"]["secretKeyRef"].get("optional", False),
        )
        for e in env_of(container)
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def test_web_worker_and_beat_read_the_same_secrets() -> None:
    objects = render("read-only")
    refs = {
        name: secret_refs(
            one(objects, "Deployment", f"gpu-ledger-{name}")["spec"]["template"]["spec"][
                "containers"
            ][0]
        )
        for name in APP_CONTAINERS
    }
    web_only = {"GPULEDGER_OIDC_CLIENT_SECRET", "GPULEDGER_METRICS_TOKEN"}

    assert set(refs["web"]) - set(refs["worker"]) == web_only
    # Beat only publishes tasks: no Prometheus secret (web's live charts and the worker's
    # collection query Prometheus).
    assert set(refs["worker"]) - set(refs["beat"]) == {PROMETHEUS_SECRET}
    assert refs["worker"][PROMETHEUS_SECRET] == ("gpu-ledger-secrets", PROMETHEUS_SECRET, True)
    assert {k: v for k, v in refs["worker"].items() if k != PROMETHEUS_SECRET} == refs["beat"]
    required = {name for name, (_, _, optional) in refs["worker"].items() if not optional}
    assert required == {"SECRET_KEY", "DATABASE_URL", "CACHE_URL", "CELERY_BROKER_URL"}
    validate_secret_env_name(PROMETHEUS_SECRET)  # a name the admin accepts
    # The metrics token is the one the ServiceMonitor sends (Secret gpu-ledger-metrics, key token).
    assert refs["web"]["GPULEDGER_METRICS_TOKEN"] == ("gpu-ledger-metrics", "token", True)
    # Everything else: gpu-ledger-secrets, each key named as its variable.
    for name, (secret, key, _) in refs["web"].items():
        if name != "GPULEDGER_METRICS_TOKEN":
            assert (secret, key) == ("gpu-ledger-secrets", name)


def test_the_readme_says_what_the_secret_must_contain() -> None:
    readme = (ROOT / "README.md").read_text()
    objects = render("read-only")
    needed = set()
    for obj in workloads(objects):
        for container in containers(obj):
            needed |= {
                key for secret, key, optional in secret_refs(container).values() if not optional
            }
    optional = {
        key
        for obj in workloads(objects)
        for container in containers(obj)
        for secret, key, opt in secret_refs(container).values()
        if opt and secret == "gpu-ledger-secrets"
    }
    command = re.search(
        r"kubectl -n gpu-ledger create secret generic gpu-ledger-secrets(.*?)```", readme, re.S
    )
    assert command, "README: no `kubectl -n gpu-ledger create secret generic gpu-ledger-secrets`"

    assert set(re.findall(r"--from-literal=([A-Z_]+)=", command.group(1))) == needed
    for key in optional:
        assert f"`{key}`" in readme, f"README does not mention the optional secret key {key}"


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of an env value (earlier variables only)."""
    return re.sub(
        r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value
    )


def container_environment(
    objects: list[dict[str, Any]], container: dict[str, Any]
) -> dict[str, str]:
    """The variables the kubelet would set, with made-up secrets and pod address."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(settings_map(objects))
        assert (
            source["configMapRef"]["name"] == of_kind(objects, "ConfigMap")[0]["metadata"]["name"]
        )
    fake_secrets = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": "postgres://gpuledger:pw@postgres.gpu-ledger.svc:5432/gpuledger",
        "CACHE_URL": "redis://redis.gpu-ledger.svc:6379/1",
        "CELERY_BROKER_URL": "redis://redis.gpu-ledger.svc:6379/0",
    }
    for entry in env_of(container):
        if "value" in entry:
            env[entry["name"]] = expand(entry["value"], env)
        elif entry["name"] == "POD_IP":
            env["POD_IP"] = "10.42.0.7"
        elif entry["name"] in fake_secrets:
            env[entry["name"]] = fake_secrets[entry["name"]]
    return env


def test_web_allows_the_ingress_host_and_the_pods_own_address() -> None:
    objects = render("read-only")
    web = one(objects, "Deployment", "gpu-ledger-web")
    env = container_environment(objects, web["spec"]["template"]["spec"]["containers"][0])

    # Probes and Prometheus scrapes name the pod's address as the Host.
    assert env["ALLOWED_HOSTS"] == "gpu-ledger.example.com,10.42.0.7"


def run_settings(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "PYTHONPATH"}}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=clean | env | {"DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_settings_accept_what_each_container_is_given() -> None:
    objects = render("quota-write")
    code = (
        "import config.settings as s; "
        "print(s.DEBUG, s.GPULEDGER_KUBE_IN_CLUSTER, s.SECURE_SSL_REDIRECT, "
        "s.SECURE_PROXY_SSL_HEADER is not None, s.DATABASES['default']['ENGINE'])"
    )
    for obj in workloads(objects):
        for container in containers(obj):
            env = container_environment(objects, container)

            result = run_settings(env, code)

            where = f"{obj['metadata']['name']}/{container['name']}"
            assert result.returncode == 0, f"{where}: {result.stderr[-2000:]}"
            assert result.stdout.split() == [
                "False",
                "True",
                "False",
                "True",
                "django.db.backends.postgresql",
            ], where


def test_djangos_deployment_checks_pass_for_web() -> None:
    objects = render("read-only")
    web = one(objects, "Deployment", "gpu-ledger-web")
    env = container_environment(objects, web["spec"]["template"]["spec"]["containers"][0])

    result = run_settings(
        env,
        "import django, sys; django.setup(); from django.core.management import call_command; "
        "call_command('check', '--deploy', '--fail-level', 'WARNING')",
    )

    # SECURE_SSL_REDIRECT is off on purpose: the ingress redirects, probes and scrapes reach the
    # pod over plain HTTP. That is the one warning.
    found = set(re.findall(r"\((security\.W\d+)\)", result.stdout + result.stderr))
    assert found == {"security.W008"}, result.stderr[-2000:]


def test_forwarded_for_is_not_trusted_where_any_pod_can_reach_the_service() -> None:
    # Any pod may reach the Service directly and write X-Forwarded-For itself (127.0.0.1 to
    # /metrics, or a new address per login attempt): only the operator who fenced the web pods
    # off behind the ingress may turn it on.
    data = settings_map(render("read-only"))

    assert data["GPULEDGER_TRUST_X_FORWARDED_FOR"] == "false"
    assert data["GPULEDGER_TRUST_X_FORWARDED_PROTO"] == "true"
