"""Admin of the alerts app."""

# Receivers, routes, contacts, the delivery log and remediation register themselves there.
from alerts import notify_admin, remediation_admin  # noqa: F401
