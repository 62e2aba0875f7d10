"""The apps depend one way (docs/architecture.md "Layers").

core ← fleet ← quotas ← ledger ← servicelevels ← serving ← alerts ← notifications ← remediation
← observability ← accounts ← dashboard ← demo: a module may import its own app and the apps to its
left, never one to its right. Lazy imports inside functions count too.
``config`` wires everything and is outside the order.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.db.migrations.loader import MigrationLoader

from tests.python_source import parse_file

ROOT = Path(__file__).resolve().parents[2]
LAYERS = (
    "core",
    "fleet",
    "quotas",
    "ledger",
    "servicelevels",
    "serving",
    "alerts",
    "notifications",
    "remediation",
    "observability",
    "accounts",
    "dashboard",
    "demo",
)
RANK = {app: rank for rank, app in enumerate(LAYERS)}
# Written before the join had an app of its own: fleet's Allocation, GpuUsage and HourlyRollup
# then pointed at quotas. Databases recorded them, so they stay; they create tables only, and
# every migration since (the move included) follows the order.
HISTORICAL_MIGRATIONS = {
    ("fleet", "0002_initial"),
    ("fleet", "0003_alter_gpuusage_cluster_alter_gpuusage_cluster_queue_and_more"),
    # The hand-over of the notification and remediation models to their own apps: alerts drops
    # them from its state only once the new apps have taken them (state only, tables stay).
    ("alerts", "0004_move_notifications_and_remediation_out"),
}


def _modules(app: str) -> list[Path]:
    return sorted(
        path
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts and "__pycache__" not in path.parts
    )


def _imported_apps(path: Path) -> set[tuple[str, int]]:
    """(app, line) of every import of a GPU Ledger app in the file, at any depth."""
    found = set()
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in RANK:
                found.add((top, node.lineno))
    return found


@pytest.mark.parametrize("app", LAYERS)
def test_an_app_imports_only_itself_and_the_apps_below_it(app):
    upward = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in _modules(app)
        for target, line in sorted(_imported_apps(path))
        if RANK[target] > RANK[app]
    ]
    assert upward == []


def test_the_layer_walk_sees_every_app_module():
    # A walk that found nothing would pass the test above vacuously.
    assert all(len(_modules(app)) >= 3 for app in LAYERS)
    assert any(target == "fleet" for target, _ in _imported_apps(ROOT / "quotas" / "models.py"))


def test_core_imports_no_app():
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in _modules("core")
        for target, line in sorted(_imported_apps(path))
        if target != "core"
    ]
    assert offenders == []


def test_migrations_depend_one_way_and_form_no_cycle():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    graph = loader.graph
    graph.ensure_not_cyclic()
    upward = [
        f"{key[0]}.{key[1]} depends on {parent[0]}.{parent[1]}"
        for key, migration in loader.disk_migrations.items()
        if key[0] in RANK and key not in HISTORICAL_MIGRATIONS
        for parent in migration.dependencies
        if parent[0] in RANK and RANK[parent[0]] > RANK[key[0]]
    ]
    assert upward == []
    # The exemption names real migrations, so it cannot hide a new one by a typo.
    assert HISTORICAL_MIGRATIONS <= set(loader.disk_migrations)


def test_every_project_app_has_a_layer():
    # An app missing from LAYERS would import anything unchecked.
    from django.conf import settings

    project = {
        name.split(".")[0]
        for name in settings.INSTALLED_APPS
        if (ROOT / name.split(".")[0] / "apps.py").exists()
    }
    assert project - set(LAYERS) == set()
