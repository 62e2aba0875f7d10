"""Chargeback figures from hourly rollups: GPU-hours, real use and cost per group and period.

All figures come from the rollup read layer (``HourlyRollup.objects.covering(…).figures(…)``,
docs/architecture.md "Figures"); one aggregated query per request, grouped by (cluster, key, flavor,
GPU model[, period][, price segment]), then priced and summed here. The rules (README "Chargeback
API" has the worked example):

- A window is ``[start, end)`` on whole UTC hours, the rollup resolution; a rollup row belongs
  to the window when its ``hour`` starts inside it and the hour has ended
  (``core.ranges.covered_hours``): the hour in progress is not counted until it ends.
- Steps split the window at UTC hour, day or month boundaries. ``period_start`` is the
  boundary itself, so the first and last periods may be partial (only the window's hours count).
- ``no_telemetry = allocated − telemetry``; ``utilization = active / telemetry`` (null without
  telemetry); ``telemetry_coverage = telemetry / allocated`` (null without allocation). Ratios
  of totals are recomputed from the summed hours, never summed.
- Prices (``ledger.RateCard``, only cards in ``GPULEDGER_CURRENCY``): each hour uses the card
  in force when it starts: the (flavor) card first, else the (GPU model) card, else the default
  card; no card means no charge (logged). ``GPULEDGER_CHARGEBACK_MODEL``:
  ``usage`` (default): allocated GPU-hours × allocated price;
  ``quota``: nominal GPU-hours × allocated price + borrowed GPU-hours × borrowing price (the
  allocated price when no borrowing card) − lent GPU-hours × lending credit (0 when no card).
- Money is ``Decimal`` throughout and rounded to cents (half up) once, at output, per row and
  component; a row's total is the sum of its rounded components and the totals the sum of the
  rounded rows, so every printed figure adds up exactly.
- Groups that existed in the window (teams; ClusterQueues, LocalQueues, cohorts, nodes, flavors
  not deleted before it and not created after it; clusters) appear with zeros when they have no
  rollups. So do the workloads that lived in it (created before its end, not finished or deleted
  before its start: each waited or held quota there) and their namespaces, with their
  ``pending_gpu_hours``. Standalone ClusterQueues are the cohort group ``(no cohort)``.

The package: ``base`` (parameters, periods, money, ``Charge``), ``pricing`` (``Pricer``),
``query`` (the aggregate query, who sees what), ``groups`` (the groups that existed),
``report`` (``build_report`` and its JSON and CSV forms), ``cache`` (built reports kept under
their parameters and data version: what the page and the API call).
"""

from __future__ import annotations

from ledger.chargeback.base import (
    AGGREGATE_GROUPS,
    CAPACITY_GROUPS,
    CENT,
    CHARGEBACK_FIGURES,
    CHARGEBACK_INDEX,
    COST_COLUMNS,
    GROUP_SCOPES,
    HOUR_COLUMNS,
    HOURS_DIGITS,
    MAX_PADDED_ROWS,
    MODELS,
    STEPS,
    UNATTRIBUTED,
    Charge,
    ChargebackError,
    ceil_hour,
    cents,
    chargeback_model,
    is_whole_hour,
    next_period,
    period_floor,
    period_starts,
    to_decimal,
    utc_text,
)
from ledger.chargeback.cache import cached_report, cached_report_page, data_version
from ledger.chargeback.groups import KnownGroup, known_groups, waiting_or_holding
from ledger.chargeback.pricing import Pricer
from ledger.chargeback.query import (
    Piece,
    aggregate_pieces,
    pairs_q,
    period_expression,
    restriction,
    visible_namespaces,
)
from ledger.chargeback.report import (
    Report,
    ReportInputs,
    Row,
    build_report,
    check_request,
    check_window,
    csv_columns,
    csv_records,
    parse_instant,
    parse_iso,
    read_inputs,
    resolve_cluster,
    row_dict,
    totals_dict,
)
from ledger.rollup.groups import NO_COHORT

__all__ = [
    "AGGREGATE_GROUPS",
    "CAPACITY_GROUPS",
    "CENT",
    "CHARGEBACK_FIGURES",
    "CHARGEBACK_INDEX",
    "COST_COLUMNS",
    "GROUP_SCOPES",
    "HOUR_COLUMNS",
    "HOURS_DIGITS",
    "MAX_PADDED_ROWS",
    "MODELS",
    "NO_COHORT",
    "STEPS",
    "UNATTRIBUTED",
    "Charge",
    "ChargebackError",
    "KnownGroup",
    "Piece",
    "Pricer",
    "Report",
    "ReportInputs",
    "Row",
    "aggregate_pieces",
    "build_report",
    "cached_report",
    "cached_report_page",
    "ceil_hour",
    "cents",
    "chargeback_model",
    "check_request",
    "check_window",
    "csv_columns",
    "csv_records",
    "data_version",
    "is_whole_hour",
    "known_groups",
    "next_period",
    "pairs_q",
    "parse_instant",
    "parse_iso",
    "period_expression",
    "period_floor",
    "period_starts",
    "read_inputs",
    "resolve_cluster",
    "restriction",
    "row_dict",
    "to_decimal",
    "totals_dict",
    "utc_text",
    "visible_namespaces",
    "waiting_or_holding",
]
