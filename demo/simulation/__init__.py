"""A simulated GPU fleet that speaks the real upstream formats (for the demo and tests).

The simulator plays a small Kueue: workloads arrive, are admitted against their ClusterQueue's
nominal quota plus what the cohort can lend, run on concrete GPUs, finish, and one of them is
preempted by a reclaiming queue and re-admitted later. At any moment it can render

* what Prometheus would answer for a collection window (DCGM ``avg_over_time`` / ``count_over_time``
  vectors, kube-state-metrics GPU requests of Running pods, ``kube_pod_labels``), and
* what the Kubernetes API server would LIST (v1beta2 Kueue objects, Pods, Nodes),

so the ``simulate`` command can hand them to the same pure ingest functions the collectors use.
Everything is deterministic for a seed and an end time. Nothing here touches the database.

By concept:

- ``scenario``: teams, queues, flavors, nodes and GPUs, the scripted cases and the random
  workload mix, and the fleet's state (``SimFleet``);
- ``scheduler``: the small Kueue scheduler (admission, borrowing, preemption);
- ``prometheus``: the DCGM and kube-state-metrics answers of one window;
- ``kubernetes``: the Kueue, Pod and Node LIST payloads of one moment;
- ``simulator``: ``FleetSimulator``, the fleet with those three behind one object.
"""

from demo.simulation.prometheus import SCRAPE_SECONDS
from demo.simulation.simulator import FleetSimulator

__all__ = ["SCRAPE_SECONDS", "FleetSimulator"]
