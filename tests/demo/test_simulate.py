"""The simulated fleet: deterministic, and its Kueue metrics agree with its Kueue objects. What it
writes through the real ingest path is read by ``test_demo_world.py``."""

from datetime import datetime

import pytest
from django.core.management import CommandError, call_command

from demo.simulation import FleetSimulator

END = datetime.fromisoformat("2026-06-15T12:00:00+00:00")


def _play(seed: int) -> list[dict]:
    sim = FleetSimulator(seed=seed, end=END, days=1, step_seconds=3600)
    answers: list[dict] = []
    for window in sim.windows():
        sim.advance(window.start)
        answers.append(sim.prometheus_window(window))
    answers.append(sim.kube_lists(sim.end))
    return answers


def test_the_same_seed_gives_the_same_fleet():
    assert _play(7) == _play(7)


def test_another_seed_gives_another_fleet():
    assert _play(7) != _play(8)


def test_it_rejects_a_naive_end(db):
    with pytest.raises(CommandError, match="offset"):
        call_command("simulate", "--days", "1", "--end", "2026-06-15T12:00:00")


def test_the_simulators_kueue_metrics_match_its_clusterqueue_status():
    from quotas.ingest import build_gpu_queue_samples, build_snapshot, snapshot_from_lists
    from quotas.ingest.metrics import build_metric_samples

    sim = FleetSimulator(seed=5, end=END, days=1, step_seconds=3600)
    compared = 0
    for window in sim.windows():
        sim.advance(window.start)
        batch = build_snapshot(snapshot_from_lists(window.end, **sim.kube_lists(window.end)), [])
        order = {
            cq.meta.name: [
                q.flavor_name
                for q in sorted(cq.quotas, key=lambda q: q.position)
                if q.resource == "nvidia.com/gpu"
            ]
            for cq in batch.cluster_queues
        }

        def figures(rows):
            return {
                (r.cluster_queue_name, r.flavor_name, r.resource): (
                    r.total,
                    r.borrowed,
                    r.lent,
                    r.nominal,
                )
                for r in rows
            }

        api = figures(build_gpu_queue_samples(batch))
        metric = figures(build_metric_samples(sim.kueue_window(window), flavor_order=order).samples)
        assert metric == {key: api[key] for key in metric}, window.end
        assert any(key[2].startswith("nvidia.com/mig-") for key in metric)
        compared += len(metric)
    assert compared > 0
