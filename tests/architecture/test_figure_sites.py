"""Where figures are computed (docs/architecture.md "Figures").

Every aggregate in every app (a Django ``Sum`` / ``Avg`` / ``Count`` / ``Max`` / ``Min`` /
``.aggregate(…)``, or SQL text with ``SELECT`` and ``SUM(`` / ``AVG(`` / ``COUNT(`` / ``MAX(`` /
``MIN(``) sits in a module listed below with the reason it is there. Usage figures come from
the registry's rules (``ledger/figures.py``), range figures from the read layer
(``ledger/read.py``), figures "now" from ``ledger/now.py`` and ``quotas/now.py``, prices from
``ledger/chargeback/pricing.py``. A new aggregate over usage, rollups, workloads or queue samples
elsewhere fails here until it moves there or is listed with its reason; a listed module that no
longer aggregates fails too, so the list stays true.
"""

from __future__ import annotations

import ast
import re

from tests.architecture.test_layers import LAYERS as APPS
from tests.architecture.test_layers import ROOT
from tests.python_source import parse_source

AGGREGATES = frozenset({"Sum", "Avg", "Count", "Max", "Min", "StdDev", "Variance"})
SQL_AGGREGATE = re.compile(r"\b(SUM|AVG|COUNT|MAX|MIN)\s*\(", re.IGNORECASE)
UPPER_AGGREGATE = re.compile(r"\b(SUM|AVG|COUNT|MAX|MIN)\(")


def _is_sql_aggregate(text: str) -> bool:
    """SQL text that aggregates: an upper-case ``SUM(`` (``FILTER`` pieces, templates) or any
    aggregate in a ``SELECT``."""
    return bool(UPPER_AGGREGATE.search(text)) or (
        "SELECT" in text.upper() and bool(SQL_AGGREGATE.search(text))
    )


# module → why it aggregates.
ALLOWED = {
    # Bookkeeping, not figures.
    "demo/follow.py": "the newest window the demo wrote (Max over IngestRun), where to go on from",
    "ledger/window_detail.py": "where per-window rows start (Max of hours, Min of windows)",
    # The figure sites themselves.
    "ledger/figures.py": "the registry: each usage figure's SUM … FILTER as SQL",
    "ledger/now.py": "figures now: the registry's rules summed over the newest windows",
    "ledger/read.py": "the read layer: rollup figures over a range",
    "ledger/rollup/portable.py": "rollups (ORM path): the registry's sums per window and hour",
    "ledger/rollup/postgres.py": "rollups (PostgreSQL path): the registry's sums as SQL",
    "ledger/rollup/quota.py": "rollups: quota GPU-hours from ClusterQueue samples",
    "ledger/rollup/groups.py": "rollups: the carried foreign keys (MAX) of a group",
    "ledger/rollup/verify.py": "the rollup check: the registry's sums recomputed from usage",
    "ledger/rollup/prune.py": "retention: counts of what it deletes",
    "quotas/now.py": "queue figures now: newest samples, admitted, pending and nominal now",
    "servicelevels/figures.py": "queue service levels: admissions per queue (the levels figure)",
    "serving/dcgm.py": "serving hours: the registry's active and telemetry sums per serving pod",
    # Reads that are not figures of the pages' cards and tables.
    "fleet/api/views.py": "COUNT(*) of a correlated list for the API's pagination",
    "notifications/admin.py": "admin list: routes per receiver",
    "quotas/store/samples.py": "write path: counts of rows written and marked stale",
    "quotas/writeback/state.py": "quota preview: the highest pending priority",
    "ledger/store/legacy.py": "migration of the legacy usage table: its row count",
    "remediation/apply.py": "remediation: when the first notice was sent, how many were",
    "alerts/reading.py": "alert evaluation: per-GPU idle per window, with per-rule thresholds",
    "observability/health.py": "/metrics: counts and durations of runs, episodes, deliveries",
    # Page reads: each sums a read-layer or "now" figure for its own grouping.
    "dashboard/charts/alerts.py": "an episode's evidence: mean SM activity per GPU",
    "dashboard/fleet_map.py": "the map: mean SM activity per GPU over the range",
    "dashboard/queries/busy.py": "busy page: GPUs busy now (ledger.now rows) summed",
    "dashboard/queries/cluster_queues.py": "queue pages: last requeue and evictions per kind",
    "dashboard/queries/cohorts.py": "cohort pages: pending and holding per member queue",
    "dashboard/queries/gpus.py": "GPU page: windows and GPUs held per pod on one GPU",
    "dashboard/queries/my_teams.py": "My teams: held per team, admitted per team and flavor",
    "dashboard/queries/overview.py": "overview: pending demand per queue and flavor",
    "dashboard/queries/workloads.py": "workload page: pods and GPU-hours of one workload",
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def aggregate_sites(source: str) -> int:
    """How many aggregates a module's source holds (calls and SQL text; docstrings left out)."""
    tree = parse_source(source)
    docs = _docstrings(tree)
    # The literal parts of an f-string are read with it, not again on their own.
    docs |= {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else None
            if name in AGGREGATES or (isinstance(func, ast.Attribute) and func.attr == "aggregate"):
                count += 1
            elif name == "Func" and any(
                keyword.arg == "function"
                and isinstance(keyword.value, ast.Constant)
                and str(keyword.value.value).upper() in {a.upper() for a in AGGREGATES}
                for keyword in node.keywords
            ):
                count += 1
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and _is_sql_aggregate(node.value)
        ):
            count += 1
        elif isinstance(node, ast.JoinedStr):
            text = "".join(
                part.value
                for part in node.values
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            )
            if _is_sql_aggregate(text):
                count += 1
    return count


def modules() -> dict[str, int]:
    found = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            count = aggregate_sites(path.read_text(encoding="utf-8"))
            if count:
                found[str(path.relative_to(ROOT))] = count
    return found


def test_every_aggregate_sits_in_a_module_listed_with_its_reason():
    unlisted = sorted(set(modules()) - set(ALLOWED))
    assert unlisted == [], (
        'aggregates outside the figure sites (docs/architecture.md "Figures"): read the figure '
        "from ledger/figures.py, ledger/read.py, ledger/now.py or quotas/now.py, or list the "
        f"module in ALLOWED with why: {unlisted}"
    )


def test_every_listed_module_still_aggregates():
    assert sorted(set(ALLOWED) - set(modules())) == []


def test_the_scan_finds_calls_and_sql_but_not_prose():
    assert aggregate_sites("from django.db.models import Sum\nx = Sum('gpus')\n") == 1
    assert aggregate_sites("q.aggregate(total=F('a'))\n") == 1
    assert aggregate_sites("sql = 'SELECT SUM(gpus) FROM t'\n") == 1
    assert aggregate_sites("t = 'x'\nsql = f'SELECT MAX({t}) FROM u'\n") == 1
    assert aggregate_sites("n = Func('pk', function='COUNT')\n") == 1
    assert aggregate_sites('"""Sums: SELECT SUM(x) is what we avoid."""\nx = max(1, 2)\n') == 0
