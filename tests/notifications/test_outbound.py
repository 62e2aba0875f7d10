"""Receivers cannot reach internal addresses: checked when saved and when sent, connected to the
address that was checked, and nothing of an answer but its status line is kept.

The servers are real loopback listeners; the resolver stand-in plays DNS for names under
``.test`` (reserved: the system resolver never answers them), so a send that resolved the name
again instead of connecting to the checked address could not reach the listener at all.
"""

from __future__ import annotations

import http.server
import ssl
import subprocess
from dataclasses import dataclass, field

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from core.deadlines import Deadline
from notifications import outbound
from notifications.models import Delivery, Receiver
from notifications.notify import queue_test
from notifications.send import deliver
from tests.http_serving import serving_thread
from tests.prometheus_server import LOOPBACK

pytestmark = pytest.mark.django_db

BODY_MARK = "internal-metadata-iam-credentials"
PUBLIC = "93.184.216.34"


@dataclass
class Listener:
    """A loopback HTTP server: answers every POST with ``status``, ``body`` and ``headers``."""

    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    received: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.received.append((self.path, dict(self.headers.items())))
                self.send_response(outer.status)
                for name, value in outer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: object) -> None:
                return

        self.server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        serving_thread(self.server).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def no_internal(settings):
    """No network allowed: the production default."""
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = []


class Resolver:
    """DNS for ``.test`` names: each name answers its list of addresses in turn (the last one
    for ever after); every lookup is counted."""

    def __init__(self, monkeypatch, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []
        real = outbound.resolve_host

        def resolve(host: str, port: int) -> list[str]:
            if host not in self.answers:
                return real(host, port)
            self.lookups.append(host)
            queue = self.answers[host]
            return queue.pop(0) if len(queue) > 1 else queue[0]

        monkeypatch.setattr(outbound, "resolve_host", resolve)


def send_test(receiver: Receiver) -> Delivery:
    now = timezone.now()
    delivery = queue_test(receiver, now, None)
    deliver(delivery, now, Deadline(10, "test deadline"), [])
    delivery.refresh_from_db()
    return delivery


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9093/",
        "http://localhost/hook",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://2852039166/latest/meta-data/",
        "http://0x7f000001/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://100.64.0.1/hook",
        "http://224.0.0.1/hook",
        "http://0.0.0.0/hook",
        "http://user:pass@hooks.example.test/hook",
        "https://token@hooks.example.test/hook",
        "ftp://files.example.test/hook",
    ],
)
@pytest.mark.parametrize("kind", ["webhook", "alertmanager"])
def test_a_receiver_pointing_inside_is_refused_when_saved(url, kind, no_internal, monkeypatch):
    Resolver(monkeypatch, {"hooks.example.test": [[PUBLIC]], "files.example.test": [[PUBLIC]]})
    receiver = Receiver(name="r", kind=kind, targets=url)
    with pytest.raises(ValidationError) as caught:
        receiver.full_clean()
    assert "targets" in caught.value.message_dict


def test_a_public_receiver_is_accepted_and_the_allowlist_opens_an_internal_network(
    settings, monkeypatch
):
    Resolver(monkeypatch, {"hooks.example.test": [[PUBLIC]], "chat.corp.test": [["10.20.0.7"]]})
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = []
    Receiver(name="public", kind="webhook", targets="https://hooks.example.test/x").full_clean()
    inside = Receiver(name="inside", kind="webhook", targets="https://chat.corp.test/hook")
    with pytest.raises(ValidationError, match="10.20.0.7, a private address"):
        inside.full_clean()
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = ["10.20.0.0/16"]
    inside.full_clean()
    # The metadata service stays refused even inside an allowed network.
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = ["169.254.0.0/16"]
    with pytest.raises(ValidationError, match="metadata"):
        Receiver(name="m", kind="webhook", targets="http://169.254.169.254/").full_clean()


def test_a_name_with_one_internal_answer_among_public_ones_is_refused(no_internal, monkeypatch):
    Resolver(monkeypatch, {"mixed.example.test": [[PUBLIC, "127.0.0.1"]]})
    with pytest.raises(ValidationError, match="127.0.0.1, a loopback address"):
        Receiver(name="m", kind="webhook", targets="http://mixed.example.test/").full_clean()


def test_a_receiver_saved_before_the_rule_is_refused_at_send(listener, no_internal):
    receiver = Receiver.objects.create(
        name="old", kind="webhook", targets=f"http://{LOOPBACK}:{listener.port}/hook"
    )

    delivery = send_test(receiver)

    assert delivery.outcome == "failed"
    assert "refused" in delivery.error and "loopback" in delivery.error
    assert listener.received == []


def test_dns_rebinding_after_the_save_is_refused_at_send(listener, no_internal, monkeypatch):
    resolver = Resolver(monkeypatch, {"rebind.example.test": [[PUBLIC], [LOOPBACK]]})
    receiver = Receiver(
        name="rebind", kind="webhook", targets=f"http://rebind.example.test:{listener.port}/hook"
    )
    receiver.full_clean()  # public when saved
    receiver.save()

    delivery = send_test(receiver)

    assert delivery.outcome == "failed"
    assert f"resolves to {LOOPBACK}, a loopback address" in delivery.error
    assert listener.received == []
    assert resolver.lookups == ["rebind.example.test", "rebind.example.test"]


def test_the_request_goes_to_the_address_that_was_checked(listener, settings, monkeypatch):
    """Allowed: the send connects to the checked address. The name is not in any real DNS, so
    reaching the listener proves nothing resolved it again; the Host header keeps the name."""
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    resolver = Resolver(monkeypatch, {"chat.corp.test": [[LOOPBACK], ["10.9.9.9"]]})
    receiver = Receiver.objects.create(
        name="chat", kind="webhook", targets=f"http://chat.corp.test:{listener.port}/hooks/x"
    )

    delivery = send_test(receiver)

    assert delivery.outcome == "sent", delivery.error
    assert resolver.lookups == ["chat.corp.test"]
    assert len(listener.received) == 1
    path, headers = listener.received[0]
    assert path == "/hooks/x"
    assert headers["Host"] == f"chat.corp.test:{listener.port}"


def test_an_answer_body_is_never_kept_only_the_status_line(listener, settings):
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    listener.status = 403
    listener.body = f'{{"AccessKeyId": "{BODY_MARK}"}}'.encode()
    receiver = Receiver.objects.create(
        name="hook", kind="webhook", targets=f"http://{LOOPBACK}:{listener.port}/p/tok-4c1d"
    )

    delivery = send_test(receiver)

    assert delivery.outcome == "failed"
    assert delivery.error == f"POST http://{LOOPBACK}:{listener.port}: HTTP 403 Forbidden"
    attempt = delivery.attempt_log.get()
    assert BODY_MARK not in attempt.error and "tok-4c1d" not in attempt.error


def test_a_redirect_is_not_followed(listener, settings):
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    listener.status = 307
    listener.headers = {"Location": "http://169.254.169.254/latest/meta-data/"}
    listener.body = BODY_MARK.encode()
    receiver = Receiver.objects.create(
        name="hook", kind="webhook", targets=f"http://{LOOPBACK}:{listener.port}/hook"
    )

    delivery = send_test(receiver)

    assert delivery.outcome == "failed"
    assert "HTTP 307" in delivery.error and "redirects are not followed" in delivery.error
    assert "169.254" not in delivery.error and BODY_MARK not in delivery.error
    assert len(listener.received) == 1


def test_the_admin_send_test_shows_the_status_line_and_no_body(admin_client, listener, settings):
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    listener.status = 500
    listener.body = BODY_MARK.encode()
    receiver = Receiver.objects.create(
        name="hook", kind="webhook", targets=f"http://{LOOPBACK}:{listener.port}/hook"
    )

    response = admin_client.post(
        "/admin/notifications/receiver/",
        {"action": "send_test", "_selected_action": [receiver.pk]},
        follow=True,
    )

    page = response.content.decode()
    assert "HTTP 500 Internal Server Error" in page
    assert BODY_MARK not in page


@pytest.fixture
def tls_listener(tmp_path):
    """A loopback HTTPS listener whose certificate names only ``chat.corp.test``."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=chat.corp.test",
            "-addext",
            "subjectAltName=DNS:chat.corp.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    server = Listener()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.server.socket = context.wrap_socket(server.server.socket, server_side=True)
    yield server, cert
    server.close()


def test_https_to_the_checked_address_verifies_the_certificate_for_the_name(
    tls_listener, settings, monkeypatch
):
    """The socket goes to 127.0.0.1 while TLS asks for, and checks, the name: the certificate
    names chat.corp.test only, so a check against the address would fail."""
    server, cert = tls_listener
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    Resolver(monkeypatch, {"chat.corp.test": [[LOOPBACK]]})
    receiver = Receiver.objects.create(
        name="chat", kind="webhook", targets=f"https://chat.corp.test:{server.port}/hooks/x"
    )

    delivery = send_test(receiver)

    assert delivery.outcome == "sent", delivery.error
    assert server.received[0][1]["Host"] == f"chat.corp.test:{server.port}"
