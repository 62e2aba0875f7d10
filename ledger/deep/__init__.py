"""Deep backfill: hours older than the per-window retention go straight into hourly rollups from
hour-step PromQL, never as per-window usage rows (docs/architecture.md "Deep backfill").

- ``queries``: the PromQL (hour-step subqueries per GPU series, per-window answers per pod and
  host) and the shards by GPU UUID;
- ``grain``: the answers -> GPU-hours per pod series, GPU and pod without series, and the GPUs
  each pod held in each window;
- ``rows``: the grain -> every scope's usage rows (owners resolved as for a window);
- ``backfill``: fetching in parallel, writing an hour in one transaction, resuming.
"""

from ledger.deep.backfill import DeepBackfill, DeepResult, hours_between, shards_for

__all__ = ["DeepBackfill", "DeepResult", "hours_between", "shards_for"]
