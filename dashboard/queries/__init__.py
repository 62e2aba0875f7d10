"""The reads behind the dashboard: one module per page, plus what several pages share.

Figures over a time range come from the read layer (``HourlyRollup.objects…covering(range)
.figures()/total()/hourly()/series()``, ``ledger.models``), always over the hours the range
counts (``core.ranges.covered_hours``), as ``ledger.range_figures.Figures`` with their ratios; queue
figures now from ``quotas.now``. Shared here: ``now`` (the newest collected window of each
cluster), ``ranking`` (teams ranked by a figure, with names and links), ``holders`` (who holds a
GPU in a usage row). The page modules (``overview``, ``busy``, ``gpus``, ``teams``, ``cohorts``,
``cluster_queues``, ``workloads``; the fleet map's are in ``dashboard.fleet_map``) return rows
and value objects; views and charts turn them into pages and figures. Every read is bounded by
the page, not by the data.
"""
