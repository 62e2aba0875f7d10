"""The notification and remediation models moved out of the alerts app without touching a row.

A database at the last migration before the move (alerts 0003) is filled through the historical
alerts models, with a permission on one of them granted to a group; migrated forward, every row
reads back through the new apps' models and the permission answers under the new app label;
migrated back, the rows and the permission are the alerts app's again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE_MOVE = [
    ("alerts", "0003_episode_indexes_for_window_updates"),
    ("notifications", None),
    ("remediation", None),
]
MOVED = {
    "notifications": ["receiver", "route", "alertcontact", "delivery", "deliveryattempt"],
    "remediation": ["remediationpolicy", "remediationaction"],
}
AT = datetime(2026, 3, 2, 10, tzinfo=UTC)


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    # (app, None) unapplies an app; the state is that of the migrations left applied.
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


def _latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def before_move():
    old_apps = _migrate(BEFORE_MOVE)
    # An install from before the move knows these models under the alerts label only.
    models = [model for names in MOVED.values() for model in names]
    # (contenttypes and auth stay migrated: their current models are the right ones.)
    ContentType.objects.exclude(app_label="alerts").filter(model__in=models).delete()
    ContentType.objects.clear_cache()
    yield old_apps
    _migrate(_latest())


def _fill(old):
    cluster = old.get_model("fleet", "Cluster").objects.create(name="east")
    team = old.get_model("quotas", "Team").objects.create(name="vision")
    queue = old.get_model("quotas", "ClusterQueue").objects.create(
        cluster=cluster, name="vision-cq", team=team
    )
    workload = old.get_model("quotas", "Workload").objects.create(
        cluster=cluster, namespace="ml", name="train", cluster_queue=queue
    )
    receiver = old.get_model("alerts", "Receiver").objects.create(
        name="oncall", kind="webhook", targets="http://127.0.0.1:9/hook"
    )
    route = old.get_model("alerts", "Route").objects.create(
        receiver=receiver, rules=["idle_workload"]
    )
    route.teams.add(team)
    old.get_model("alerts", "AlertContact").objects.create(team=team, email="lead@example.test")
    delivery = old.get_model("alerts", "Delivery").objects.create(
        receiver=receiver, event="test", severity="", outcome="sent", attempts=1, sent_at=AT
    )
    old.get_model("alerts", "DeliveryAttempt").objects.create(
        delivery=delivery, number=1, started_at=AT, outcome="sent", status_code=200
    )
    old.get_model("alerts", "RemediationPolicy").objects.create(
        cluster_queue=queue, mode="deactivate", dry_run=False, grace_period=timedelta(minutes=45)
    )
    old.get_model("alerts", "RemediationAction").objects.create(
        cluster=cluster,
        workload=workload,
        namespace="ml",
        workload_name="train",
        kind="deactivate",
        outcome="done",
        status_code=200,
    )
    content_type = ContentType.objects.get_or_create(app_label="alerts", model="delivery")[0]
    permission = Permission.objects.get_or_create(
        content_type=content_type, codename="change_delivery", defaults={"name": "Can change"}
    )[0]
    group = Group.objects.create(name="oncall-admins")
    group.permissions.add(permission)
    return content_type.pk


def _granted(app_label: str) -> bool:
    # Through the permission tables, as ModelBackend reads them for a member of the group.
    return Group.objects.filter(
        name="oncall-admins",
        permissions__codename="change_delivery",
        permissions__content_type__app_label=app_label,
    ).exists()


@pytest.mark.django_db(transaction=True)
def test_an_existing_database_keeps_its_rows_and_permissions_through_the_move(before_move):
    # Given a database from before the move, filled through the alerts app's models
    content_type_id = _fill(before_move)

    # When it migrates forward
    _migrate(_latest())

    # Then the rows read back through the new apps, and the permission follows the new label
    from notifications.models import AlertContact, Delivery, DeliveryAttempt, Receiver, Route
    from remediation.models import RemediationAction, RemediationPolicy

    route = Route.objects.get()
    assert (route.receiver.name, route.rules, [t.name for t in route.teams.all()]) == (
        "oncall",
        ["idle_workload"],
        ["vision"],
    )
    assert AlertContact.objects.get().email == "lead@example.test"
    attempt = DeliveryAttempt.objects.get()
    assert (attempt.delivery.receiver.name, attempt.status_code) == ("oncall", 200)
    assert Delivery.objects.get().sent_at == AT
    assert Receiver.objects.count() == 1
    policy = RemediationPolicy.objects.get()
    assert (policy.cluster_queue.name, policy.grace_period) == ("vision-cq", timedelta(minutes=45))
    action = RemediationAction.objects.get()
    assert (action.workload.name, action.outcome) == ("train", "done")
    ContentType.objects.clear_cache()
    moved = ContentType.objects.get(pk=content_type_id)
    assert (moved.app_label, moved.model_class()) == ("notifications", Delivery)
    assert _granted("notifications") and not _granted("alerts")
    assert (
        Permission.objects.filter(
            content_type__app_label="alerts", codename="change_delivery"
        ).count()
        == 0
    )

    # And back: the alerts app's models and label again, the rows untouched
    old = _migrate(BEFORE_MOVE)
    assert old.get_model("alerts", "DeliveryAttempt").objects.get().status_code == 200
    assert old.get_model("alerts", "RemediationAction").objects.get().workload_name == "train"
    assert list(
        old.get_model("alerts", "Route").objects.get().teams.values_list("name", flat=True)
    ) == ["vision"]
    assert ContentType.objects.get(pk=content_type_id).app_label == "alerts"
    assert _granted("alerts") and not _granted("notifications")
