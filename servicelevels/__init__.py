"""Queue service levels: how long work waits for quota, per queue and team, over time.

One ``AdmissionRecord`` per admission of a Kueue Workload (the first, and each one after an
eviction and requeue), built from what the Kueue sync sees; the figures (waits, running delay,
evictions, preemptions) are read from these records, and ``QueueSLO`` holds an admin's target
per ClusterQueue. See docs/architecture.md, "Queue service levels".
"""
