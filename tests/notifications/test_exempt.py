"""Exempting from an episode: its workload, or its ClusterQueue for a queue episode."""

from __future__ import annotations

from alerts.actions import exempt_workload
from alerts.choices import ExemptionKind
from alerts.models import Episode


def test_a_workload_episode_exempts_the_workload_and_marks_its_open_episodes(world, make_episode):
    episode = make_episode()
    other_open = make_episode()
    elsewhere = make_episode(workload=None, subject_key="queue:east/vision-cq")

    exemption = exempt_workload(episode, world.lead, "a demo")

    assert exemption is not None
    assert (exemption.kind, exemption.workload_id) == (ExemptionKind.WORKLOAD, world.workload.pk)
    assert exemption.cluster_queue_id is None
    marked = set(Episode.objects.filter(exempt=True).values_list("pk", flat=True))
    assert marked == {episode.pk, other_open.pk}
    assert elsewhere.pk not in marked
    episode.refresh_from_db()
    assert episode.exempt_reason.endswith("(a demo)")


def test_a_queue_episode_exempts_the_queue(world, make_episode):
    episode = make_episode(workload=None, subject_key="queue:east/vision-cq")

    exemption = exempt_workload(episode, world.lead, "")

    assert exemption is not None
    assert exemption.kind == ExemptionKind.CLUSTER_QUEUE
    assert exemption.cluster_queue_id == world.cluster_queue.pk
    assert exemption.workload_id is None
    assert Episode.objects.get(pk=episode.pk).exempt


def test_an_episode_without_workload_or_queue_exempts_nothing(world, make_episode):
    episode = make_episode(workload=None, cluster_queue=None, subject_key="namespace:east/ml")

    assert exempt_workload(episode, world.lead, "") is None
    assert not Episode.objects.filter(exempt=True).exists()
