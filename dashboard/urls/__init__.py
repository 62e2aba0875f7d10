"""The dashboard's URL confs: ``fleet`` (overview, map, nodes, GPUs, busy) and ``quotas``
(teams, cohorts, ClusterQueues, workloads), each a namespace of the same name."""
