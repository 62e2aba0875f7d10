"""Deep backfill: hours older than the per-window retention go straight into hourly rollups from
per-window PromQL answers over the hour, never as per-window usage rows (docs/architecture.md
"Deep backfill").

- ``queries``: the PromQL (per-window presence and metric averages per GPU series, range queries
  over the hour) and the shards by GPU UUID;
- ``presence``: those answers, compacted as they arrive -> per pod series each figure summed
  over the hour's windows, per GPU its windows, per window each pod's GPUs and the hosts;
- ``grain``: the answers -> GPU-hours per pod series, GPU and pod without series, and the GPUs
  each pod held in each window;
- ``rows``: the grain -> every scope's usage rows (owners resolved as for a window);
- ``backfill``: fetching in parallel, writing an hour in one transaction, resuming.
"""

from ledger.deep.backfill import DeepBackfill, DeepResult, hours_between, shards_for

__all__ = ["DeepBackfill", "DeepResult", "hours_between", "shards_for"]
