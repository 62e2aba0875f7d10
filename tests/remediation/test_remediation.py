"""Remediation against the loopback Kubernetes API server: the exact PATCH, dry runs, audit."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.template.loader import render_to_string
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from core.deadlines import Deadline
from notifications.models import Delivery, Receiver, Route
from remediation.apply import MAX_FAILED_ATTEMPTS, reactivate, remediate
from remediation.models import RemediationAction, RemediationPolicy
from tests.kube_api_server import FakeKubeAPI

pytestmark = pytest.mark.django_db

WORKLOAD_PATH = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/train"


def workload_object(name: str = "train") -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
        "spec": {
            "active": True,
            "queueName": "default",
            "podSets": [{"name": "main", "count": 1}],
        },
    }


@pytest.fixture
def kube(make_kube_api):
    api = make_kube_api(load=False)
    api.load("Workload", [workload_object()])
    return api


def policy(world, mode: str = "deactivate", *, dry_run: bool = False, grace_minutes: int = 30):
    return RemediationPolicy.objects.create(
        cluster_queue=world.cluster_queue,
        mode=mode,
        dry_run=dry_run,
        grace_period=timedelta(minutes=grace_minutes),
    )


def critical(make_episode, escalated_minutes_ago: int = 45, **fields):
    now = timezone.now()
    return make_episode(
        severity="critical",
        escalated_at=now - timedelta(minutes=escalated_minutes_ago),
        **fields,
    )


def run(now=None):
    return remediate(now or timezone.now(), Deadline(30, "test deadline"))


def patches(kube: FakeKubeAPI):
    return [w for w in kube.write_log if w.method == "PATCH"]


def test_a_workload_critical_past_the_grace_is_deactivated_with_one_exact_patch(
    kube, world, make_episode
):
    policy(world, grace_minutes=30)
    episode = critical(make_episode, escalated_minutes_ago=45)

    result = run()

    assert result.deactivated == 1
    [write] = patches(kube)
    assert write.path == WORKLOAD_PATH
    assert write.query == {"fieldManager": "gpu-ledger"}
    assert write.content_type == "application/merge-patch+json"
    assert write.json() == {"spec": {"active": False}}
    assert kube.get("Workload", "train", "ml")["spec"]["active"] is False
    action = RemediationAction.objects.get()
    assert (action.kind, action.outcome, action.status_code) == ("deactivate", "done", 200)
    assert action.episode == episode and action.workload == world.workload
    assert (action.mode, action.dry_run, action.requested_by) == ("deactivate", False, None)
    assert action.response["spec.active"] is False
    assert (
        action.response["resourceVersion"]
        == kube.get("Workload", "train", "ml")["metadata"]["resourceVersion"]
    )
    assert action.request["body"] == {"spec": {"active": False}}


def test_never_twice(kube, world, make_episode):
    policy(world)
    critical(make_episode)

    run()
    run()
    run(timezone.now() + timedelta(hours=1))

    assert len(patches(kube)) == 1
    assert RemediationAction.objects.count() == 1


def test_dry_run_records_the_patch_it_would_send_and_sends_nothing(kube, world, make_episode):
    policy(world, dry_run=True)
    critical(make_episode)

    result = run()
    run()

    assert result.dry_runs == 1
    assert patches(kube) == []
    assert kube.get("Workload", "train", "ml")["spec"]["active"] is True
    action = RemediationAction.objects.get()
    assert (action.outcome, action.dry_run, action.status_code) == ("dry_run", True, None)
    assert action.request == {
        "method": "PATCH",
        "resource": "workloads.kueue.x-k8s.io",
        "namespace": "ml",
        "name": "train",
        "fieldManager": "gpu-ledger",
        "contentType": "application/merge-patch+json",
        "body": {"spec": {"active": False}},
    }


def test_nothing_before_the_grace_period_has_passed(kube, world, make_episode):
    policy(world, grace_minutes=30)
    critical(make_episode, escalated_minutes_ago=20)

    assert run().deactivated == 0
    assert patches(kube) == []

    assert run(timezone.now() + timedelta(minutes=11)).deactivated == 1


def test_the_grace_counts_from_the_owners_critical_warning(kube, world, make_episode):
    policy(world, grace_minutes=30)
    episode = critical(make_episode, escalated_minutes_ago=60)
    receiver = Receiver.objects.create(name="mail", kind="email", targets="a@example.test")
    # The critical notification went out only 10 minutes ago (the receiver was down).
    Delivery.objects.create(
        episode=episode,
        receiver=receiver,
        event="fired",
        severity="critical",
        outcome="sent",
        sent_at=timezone.now() - timedelta(minutes=10),
    )

    assert run().deactivated == 0
    assert run(timezone.now() + timedelta(minutes=21)).deactivated == 1


@pytest.mark.parametrize(
    "fields",
    [
        {"exempt": True, "exempt_reason": "namespace ml"},
        {"rule": "telemetry_missing"},
        {"rule": "borrowing_while_idle"},
        {"silenced_until": timezone.now() + timedelta(days=1)},
        {"resolved_at": timezone.now() - timedelta(minutes=1)},
    ],
    ids=["exempt", "telemetry_missing", "borrowing", "silenced", "resolved"],
)
def test_never_for_exempt_silenced_resolved_or_telemetry_episodes(
    kube, world, make_episode, fields
):
    policy(world)
    critical(make_episode, **fields)

    run()

    assert patches(kube) == []
    assert RemediationAction.objects.count() == 0


def test_warnings_and_queues_without_a_policy_are_left_alone(kube, world, make_episode):
    make_episode(severity="critical", escalated_at=timezone.now() - timedelta(hours=5))
    RemediationPolicy.objects.create(cluster_queue=world.cluster_queue, mode="off")
    run()
    RemediationPolicy.objects.update(mode="deactivate", dry_run=False)
    make_episode(severity="warning", rule="ghost_reservation")

    run()

    # Only the critical episode, once the policy says so.
    assert len(patches(kube)) == 1


def test_notify_mode_records_and_tells_the_owners_without_touching_the_workload(
    kube, world, make_episode
):
    policy(world, mode="notify")
    hook = Receiver.objects.create(name="hook", kind="webhook", targets="http://127.0.0.1:9/")
    Route.objects.create(receiver=hook)
    am = Receiver.objects.create(name="am", kind="alertmanager", targets="http://127.0.0.1:9")
    Route.objects.create(receiver=am)
    episode = critical(make_episode)

    result = run()

    assert result.notified == 1
    assert patches(kube) == []
    action = RemediationAction.objects.get()
    assert (action.kind, action.outcome) == ("notify", "done")
    notices = Delivery.objects.filter(episode=episode, event="remediation")
    assert [d.receiver.name for d in notices] == ["hook"]


def test_a_failed_patch_is_recorded_with_the_answer_and_tried_again_a_few_times(
    kube, world, make_episode
):
    policy(world)
    critical(make_episode)
    kube.fail("/workloads/train", 403, method="PATCH", times=10, message="forbidden: no patch")

    for _ in range(MAX_FAILED_ATTEMPTS + 2):
        run()

    actions = list(RemediationAction.objects.order_by("pk"))
    assert len(actions) == MAX_FAILED_ATTEMPTS
    assert {(a.outcome, a.status_code) for a in actions} == {("failed", 403)}
    assert "forbidden: no patch" in actions[0].error
    assert actions[0].response["reason"] == "Forbidden"


def test_a_missing_workload_upstream_is_a_failed_action_not_a_crash(kube, world, make_episode):
    policy(world)
    critical(make_episode)
    kube.delete("Workload", "train", "ml")

    assert run().failed == 1
    assert RemediationAction.objects.get().status_code == 404


def test_staff_reactivate_with_one_click_from_the_episode_page(
    kube, world, make_episode, django_user_model
):
    policy(world)
    episode = critical(make_episode)
    run()
    staff = django_user_model.objects.create_superuser("ops", "ops@example.test", "pw")
    client = Client()
    client.force_login(staff)

    answer = client.post(
        reverse("admin:remediation_remediationaction_reactivate", args=[world.workload.pk]),
        {"episode": episode.pk, "next": f"/alerts/{episode.pk}/"},
    )

    assert answer.status_code == 302
    assert answer["Location"] == f"/alerts/{episode.pk}/"
    last = patches(kube)[-1]
    assert (last.path, last.query, last.content_type) == (
        WORKLOAD_PATH,
        {"fieldManager": "gpu-ledger"},
        "application/merge-patch+json",
    )
    assert last.json() == {"spec": {"active": True}}
    assert kube.get("Workload", "train", "ml")["spec"]["active"] is True
    action = RemediationAction.objects.filter(kind="reactivate").get()
    assert (action.outcome, action.requested_by, action.episode) == ("done", staff, episode)


def test_reactivation_needs_the_permission_and_a_post(kube, world, django_user_model):
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    client = Client()
    client.force_login(viewer)
    url = reverse("admin:remediation_remediationaction_reactivate", args=[world.workload.pk])

    assert client.post(url).status_code == 403
    viewer.is_superuser = True
    viewer.save()
    assert client.get(url).status_code == 405
    assert patches(kube) == []


def test_the_episode_fragment_shows_deliveries_actions_and_the_reactivate_button(
    kube, world, make_episode, django_user_model
):
    policy(world)
    episode = critical(make_episode)
    receiver = Receiver.objects.create(name="oncall-mail", kind="email", targets="a@example.test")
    Delivery.objects.create(
        episode=episode,
        receiver=receiver,
        event="fired",
        severity="critical",
        outcome="sent",
        attempts=1,
        sent_at=timezone.now() - timedelta(minutes=40),
    )
    run()
    staff = django_user_model.objects.create_superuser("ops", "ops@example.test", "pw")
    request = RequestFactory().get(f"/alerts/{episode.pk}/")
    request.user = staff

    html = render_to_string(
        "dashboard/partials/episode_notify.html", {"episode": episode}, request=request
    )

    assert "oncall-mail" in html
    assert "Deactivate (spec.active=false)" in html
    assert 'data-testid="reactivate"' in html
    assert "Re-activate ml/train" in html

    reactivate(world.workload.pk, staff, episode=episode)
    html = render_to_string(
        "dashboard/partials/episode_notify.html", {"episode": episode}, request=request
    )
    assert 'data-testid="reactivate"' not in html
    assert "Re-activate (spec.active=true)" in html


def test_remediation_task_runs_from_beat_settings(settings):
    from config.settings import CELERY_BEAT_SCHEDULE

    assert (
        CELERY_BEAT_SCHEDULE["remediate-workloads"]["task"]
        == "remediation.tasks.remediate_workloads"
    )
    assert (
        CELERY_BEAT_SCHEDULE["send-notifications"]["task"]
        == "notifications.tasks.send_notifications"
    )


def test_the_audit_admin_is_read_only(kube, world, make_episode, django_user_model):
    policy(world)
    critical(make_episode)
    run()
    staff = django_user_model.objects.create_superuser("ops", "ops@example.test", "pw")
    client = Client()
    client.force_login(staff)
    action = RemediationAction.objects.get()

    detail = client.get(reverse("admin:remediation_remediationaction_change", args=[action.pk]))
    workload = client.get(reverse("admin:quotas_workload_change", args=[world.workload.pk]))

    assert detail.status_code == 200 and 'name="_save"' not in detail.content.decode()
    assert workload.status_code == 200
    assert "Deactivate (spec.active=false)" in workload.content.decode()
    assert json.dumps({"spec": {"active": False}})[:10] in json.dumps(action.request)
