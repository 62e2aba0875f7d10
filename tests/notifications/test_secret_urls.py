"""Slack URLs and token-bearing receiver URLs live in GPULEDGER_SECRET_ variables: never stored,
never rendered (changelist, form, search, delivery log), and moved out of existing databases."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from core.deadlines import Deadline
from notifications.models import Receiver
from notifications.notify import queue_test
from notifications.send import deliver
from tests.notifications.test_outbound import Listener
from tests.prometheus_server import LOOPBACK

TOKEN = "T0AAAAAAA/B0BBBBBBB/xoxsecretXk29"
VARIABLE = "GPULEDGER_SECRET_SLACK_VISION"


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def root_client(db, django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.test", "pw"))
    return client


@pytest.mark.django_db
def test_a_slack_url_in_the_targets_is_refused_and_a_variable_is_required(monkeypatch):
    in_clear = Receiver(name="chat", kind="slack", targets=f"http://{LOOPBACK}:9/services/{TOKEN}")
    with pytest.raises(ValidationError, match="Slack webhook URL is a secret"):
        in_clear.full_clean()

    named = Receiver(name="chat", kind="slack", url_secret_env=VARIABLE)
    monkeypatch.delenv(VARIABLE, raising=False)
    with pytest.raises(ValidationError, match=f"neither {VARIABLE} nor {VARIABLE}_FILE is set"):
        named.full_clean()
    monkeypatch.setenv(VARIABLE, f"http://{LOOPBACK}:9/services/{TOKEN}")
    named.full_clean()

    with_token = Receiver(name="hook", kind="webhook", targets="http://127.0.0.1:9/h?token=abc")
    with pytest.raises(ValidationError, match="query string"):
        with_token.full_clean()


@pytest.mark.django_db
def test_the_url_is_read_at_send_and_never_rendered(root_client, listener, monkeypatch):
    url = f"http://{LOOPBACK}:{listener.port}/services/{TOKEN}"
    monkeypatch.setenv(VARIABLE, url)
    receiver = Receiver.objects.create(name="vision-chat", kind="slack", url_secret_env=VARIABLE)

    now = timezone.now()
    sent = queue_test(receiver, now, None)
    assert deliver(sent, now, Deadline(10, "test"), []) == "sent"
    assert listener.received[0][0] == f"/services/{TOKEN}"
    listener.status = 404
    failed = queue_test(receiver, now, None)
    deliver(failed, now, Deadline(10, "test"), [])
    failed.refresh_from_db()
    assert failed.outcome == "failed" and "HTTP 404" in failed.error

    pages = [
        reverse("admin:notifications_receiver_changelist"),
        reverse("admin:notifications_receiver_changelist") + "?q=xoxsecret",
        reverse("admin:notifications_receiver_change", args=[receiver.pk]),
        reverse("admin:notifications_delivery_changelist"),
        reverse("admin:notifications_delivery_change", args=[failed.pk]),
    ]
    for page in pages[:1] + pages[2:]:
        body = root_client.get(page).content.decode()
        assert "xoxsecret" not in body, page
    changelist = root_client.get(pages[0]).content.decode()
    assert f"the URL in ${VARIABLE}" in changelist
    # Searching for the token finds nothing: it is not in the database.
    assert pages[2] not in root_client.get(pages[1]).content.decode()
    assert pages[2] in changelist


@pytest.mark.django_db
def test_an_unset_variable_fails_the_delivery_naming_the_variable(monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    receiver = Receiver.objects.create(name="vision-chat", kind="slack", url_secret_env=VARIABLE)
    now = timezone.now()
    delivery = queue_test(receiver, now, None)

    deliver(delivery, now, Deadline(10, "test"), [])

    delivery.refresh_from_db()
    assert delivery.outcome == "failed"
    assert VARIABLE in delivery.error


# --- The migration -------------------------------------------------------------------------------

BEFORE = [("notifications", "0002_content_types_from_alerts")]
MOVED_VARIABLE = "GPULEDGER_SECRET_RECEIVER_VISION_CHAT"
SLACK_URL = f"https://hooks.example.test/services/{TOKEN}"
AM_URL = "https://am.example.test/?token=am-secret"


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def before_migration():
    old = _migrate(BEFORE)
    yield old
    _migrate(_latest())


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_secret_urls_out_only_once_their_variables_are_set(
    before_migration, monkeypatch
):
    old_receiver = before_migration.get_model("notifications", "Receiver")
    chat = old_receiver.objects.create(name="vision chat", kind="slack", targets=SLACK_URL)
    # Errors as the sender wrote them before: the whole URL, or its path alone.
    old_delivery = before_migration.get_model("notifications", "Delivery")
    delivery = old_delivery.objects.create(
        receiver=chat, event="test", severity="", outcome="failed", error=f"POST {SLACK_URL}: 404"
    )
    before_migration.get_model("notifications", "DeliveryAttempt").objects.create(
        delivery=delivery,
        number=1,
        started_at=timezone.now(),
        outcome="failed",
        error=f"cannot connect (Max retries exceeded with url: /services/{TOKEN} (x))",
    )
    old_receiver.objects.create(name="am", kind="alertmanager", targets=AM_URL)
    old_receiver.objects.create(name="plain", kind="webhook", targets="https://h.example.test/x")
    for name in (MOVED_VARIABLE, "GPULEDGER_SECRET_RECEIVER_AM"):
        monkeypatch.delenv(name, raising=False)

    with pytest.raises(RuntimeError) as refused:
        _migrate(_latest())

    message = str(refused.value)
    assert f"{MOVED_VARIABLE}  (receiver 'vision chat', slack; not set)" in message
    assert "GPULEDGER_SECRET_RECEIVER_AM  (receiver 'am', alertmanager; not set)" in message
    assert "plain" not in message and TOKEN not in message
    # Nothing was lost: the URLs are where they were.
    assert sorted(old_receiver.objects.values_list("targets", flat=True)) == sorted(
        [SLACK_URL, AM_URL, "https://h.example.test/x"]
    )

    monkeypatch.setenv(MOVED_VARIABLE, SLACK_URL)
    monkeypatch.setenv("GPULEDGER_SECRET_RECEIVER_AM", "https://am.example.test/?token=other")
    with pytest.raises(RuntimeError, match="GPULEDGER_SECRET_RECEIVER_AM .*set to other URLs"):
        _migrate(_latest())

    monkeypatch.setenv("GPULEDGER_SECRET_RECEIVER_AM", AM_URL)
    _migrate(_latest())

    from notifications.models import Delivery, DeliveryAttempt

    assert Delivery.objects.get().error == "POST https://hooks.example.test: 404"
    assert DeliveryAttempt.objects.get().error == (
        "cannot connect (Max retries exceeded with url: /… (x))"
    )
    rows = {r.name: (r.targets, r.url_secret_env) for r in Receiver.objects.all()}
    assert rows == {
        "vision chat": ("", MOVED_VARIABLE),
        "am": ("", "GPULEDGER_SECRET_RECEIVER_AM"),
        "plain": ("https://h.example.test/x", ""),
    }
