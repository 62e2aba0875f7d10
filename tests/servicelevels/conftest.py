"""The notification tests' loopback webhook server, for the ``queue_slo_breached`` route test."""

from tests.notifications.conftest import loopback_receivers, webhook_server

__all__ = ["loopback_receivers", "webhook_server"]
