"""One bad delivery fails alone, with its reason; the rest of the batch goes out."""

from __future__ import annotations

import pytest
from django.utils import timezone

from core.deadlines import Deadline
from notifications.models import Delivery, Receiver, Route
from notifications.notify import run_notifications

pytestmark = pytest.mark.django_db


def test_an_email_with_a_bad_header_fails_alone_and_the_batch_goes_on(
    smtp_server, make_episode, world
):
    mail = Receiver.objects.create(name="mail", kind="email", targets="oncall@example.test")
    Route.objects.create(receiver=mail)
    # A subject with a line break (the namespace is the subject of an episode with no workload,
    # queue or node): Django refuses to send it (BadHeaderError).
    broken = make_episode(
        workload=None,
        cluster_queue=None,
        local_queue=None,
        namespace="ml\nBcc: someone@example.test",
    )
    fine = make_episode()

    result = run_notifications(timezone.now(), Deadline(30, "test deadline"))

    bad = Delivery.objects.get(episode=broken)
    good = Delivery.objects.get(episode=fine)
    assert bad.outcome == "failed"
    assert "header" in bad.error
    assert bad.next_attempt_at is None
    assert bad.attempt_log.get().outcome == "failed"
    assert good.outcome == "sent"
    assert len(smtp_server.messages) == 1
    assert "someone@example.test" not in str(smtp_server.messages[0][1])
    assert result.send.failed == 1 and result.send.sent == 1
