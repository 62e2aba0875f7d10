"""The notification fixtures (a world with an episode maker, the servers receivers talk to):
remediation warns owners and announces what it did through the same receivers."""

from tests.notifications.conftest import (  # noqa: F401
    World,
    alertmanager,
    loopback_receivers,
    make_episode,
    smtp_server,
    webhook_server,
    world,
)
