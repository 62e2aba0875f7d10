"""The product's own metrics for Prometheus: ``/metrics`` (README "Metrics").

Everything is read from the database (and the broker) when Prometheus scrapes, so any web
process answers the same; no worker keeps counters in memory.

- ``access``: who may read ``/metrics`` (loopback, signed-in staff, a bearer token, allowlisted
  networks).
- ``health``: collection lag, runs and their failures, sync relists, rollup lag, the last prune,
  open alert episodes, notification failures.
- ``broker``: the Celery queue lengths, read from Redis with a short timeout.
- ``figures``: GPUs allocated and idle now and active GPU-hours of the last complete hour, per
  cluster, team and ClusterQueue, through the read layer, with bounded labels.
- ``exposition``: the ``prometheus_client`` collector that puts them together.
- ``views``: the ``/metrics`` view.
"""
