"""The admin's "send test" says in a sentence why a test was not sent: no exception class
names, no errno numbers, no secret URL paths."""

from __future__ import annotations

import socket

import pytest
from django.test import Client
from django.urls import reverse

from notifications.models import Delivery, Receiver


@pytest.fixture
def admin_client_(db, django_user_model) -> Client:
    user = django_user_model.objects.create_superuser("root", "root@example.test", "pw")
    client = Client()
    client.force_login(user)
    return client


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _send_test(client: Client, receiver: Receiver) -> str:
    """The admin's messages after "send test" (the changelist itself lists the targets)."""
    answer = client.post(
        reverse("admin:notifications_receiver_changelist"),
        {"action": "send_test", "_selected_action": [receiver.pk]},
        follow=True,
    )
    assert answer.status_code == 200
    return answer.content.decode().split('class="messagelist"', 1)[1].split("</ul>", 1)[0]


def test_an_unreachable_mail_server_is_a_sentence(admin_client_, settings) -> None:
    port = _closed_port()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    receiver = Receiver.objects.create(name="ops mail", kind="email", targets="ops@example.test")

    html = _send_test(admin_client_, receiver)

    assert (
        f"Ops mail: the test is not sent yet, the mail server 127.0.0.1:{port} refused the "
        "connection: check that it runs and its host and port; it will be retried." in html
    )
    assert "Error" not in html
    assert "Errno" not in html
    assert Delivery.objects.get().outcome == "retrying"


def test_an_unreachable_webhook_names_only_its_host(admin_client_, monkeypatch) -> None:
    port = _closed_port()
    secret_path = "/services/T000/B000/very-secret-token"
    monkeypatch.setenv("GPULEDGER_SECRET_HOOK_URL", f"http://127.0.0.1:{port}{secret_path}")
    receiver = Receiver.objects.create(
        name="hook", kind="slack", url_secret_env="GPULEDGER_SECRET_HOOK_URL"
    )

    html = _send_test(admin_client_, receiver)

    assert f"Hook: the test is not sent yet, 127.0.0.1:{port} refused the connection" in html
    assert secret_path not in html
    assert "Errno" not in html
