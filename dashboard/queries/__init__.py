"""The reads behind the dashboard: one module per page, plus what several pages share.

``rollups``: GPU-hour sums over a time range (hourly rollups). ``now``: the newest collected
window of each cluster and the newest sample of each ClusterQueue. ``holders``: who holds a GPU
in a usage row. The page modules (``overview``, ``busy``, ``gpus``, ``teams``, ``cohorts``,
``cluster_queues``, ``workloads``; the fleet map's are in ``dashboard.fleet_map``) return rows
and value objects; views and charts turn them into pages and figures. Every read is bounded by
the page, not by the data.
"""
