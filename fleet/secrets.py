"""Secrets a cluster's collector sends upstream, read from the server's environment.

The admin names a secret by an environment variable (``Cluster.prometheus_secret_env``), never
by its value, so secrets stay out of the database. Only variables that start with
:data:`SECRET_ENV_PREFIX` may be named: otherwise a staff user who may edit clusters could have
the collector send any server variable (``SECRET_KEY``, ``DATABASE_URL``) to a URL they control.
The operator provides ``GPULEDGER_SECRET_<NAME>`` or ``GPULEDGER_SECRET_<NAME>_FILE`` (a file, as
Docker and Kubernetes mount secrets).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from django.core.exceptions import ValidationError

SECRET_ENV_PREFIX = "GPULEDGER_SECRET_"
_NAME = re.compile(rf"^{SECRET_ENV_PREFIX}[A-Z0-9_]+$")


class SecretError(ValueError):
    """A secret that may not be read, or is not there."""


def validate_secret_env_name(name: str) -> None:
    """Model and form validation: empty (no secret) or a ``GPULEDGER_SECRET_…`` variable name."""
    if name and not _NAME.match(name):
        raise ValidationError(
            f"Name an environment variable that starts with {SECRET_ENV_PREFIX} "
            "(capital letters, digits and underscores), e.g. GPULEDGER_SECRET_PROMETHEUS_TOKEN.",
            code="secret_env_prefix",
        )


def read_secret(env_name: str) -> str:
    """The secret in ``$NAME``, or in the file ``$NAME_FILE`` names (Docker/Kubernetes secrets).

    Refuses any name outside the ``GPULEDGER_SECRET_`` prefix, also for rows saved before the
    rule existed.
    """
    if not _NAME.match(env_name):
        raise SecretError(
            f"secret variable {env_name!r} does not start with {SECRET_ENV_PREFIX}: rename it "
            "in the server's environment and in the cluster's settings"
        )
    path = os.environ.get(f"{env_name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise SecretError(f"{env_name}_FILE={path!r} cannot be read: {exc}") from exc
    value = os.environ.get(env_name, "")
    if not value:
        raise SecretError(f"neither {env_name} nor {env_name}_FILE is set in the environment")
    return value
