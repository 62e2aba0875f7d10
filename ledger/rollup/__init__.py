"""Hourly rollups of per-window usage and ClusterQueue samples, and pruning of raw rows.

``roll_up_hour`` recomputes every ``HourlyRollup`` row of one cluster-hour from the ``GpuUsage``
rows whose ``window_end`` lies in ``(hour, hour + 1h]`` and the ``ClusterQueueSample`` rows whose
``sampled_at`` lies in the same range (docs/architecture.md "Time model and storage": a window
``(start, end]`` belongs to the hour that contains its start). In one transaction it deletes the
cluster-hour's rows and bulk inserts the new ones, so a late or re-collected window re-rolls its
hour and a re-run changes nothing. Figures come from aggregated queries (GROUP BY), never a query
per group, on one of two paths that compute the same figures (a test compares them on random hours).

By concept:

- ``row_figures``: what each figure of a row means, and the per-window sums both paths build
  them from;
- ``groups``: the nine scopes, how a usage row or queue sample maps to a group of each, and the
  foreign keys a row carries;
- ``portable``: the usage figures through the ORM (SQLite, and the reference);
- ``postgres``: the usage figures from one read of the hour (PostgreSQL), and COPY;
- ``quota``: the quota figures of the hour's ClusterQueue samples;
- ``hour``: one cluster-hour end to end (``roll_up_hour``, ``roll_up_range``, ``hours_touched``);
- ``completeness``: which hours' rollups include every window written to them (``RollupHour``);
- ``sweep``: rolling up every hour that is due (dirty or unsettled), after each collection and
  from beat;
- ``verify``: rollups checked against sums taken straight from the usage rows, and rebuilds
  (``manage.py rollup``);
- ``prune``: retention of usage, samples and rollups.
"""

from ledger.rollup.groups import NO_COHORT, UNATTRIBUTED
from ledger.rollup.hour import hours_touched, roll_up_hour, roll_up_range
from ledger.rollup.prune import prune_rollups, prune_usage

__all__ = [
    "NO_COHORT",
    "UNATTRIBUTED",
    "hours_touched",
    "prune_rollups",
    "prune_usage",
    "roll_up_hour",
    "roll_up_range",
]
