"""The login lockout's handler: django-axes' database handler with a per-username ceiling.

Axes locks a username and address pair after ``GPULEDGER_LOGIN_FAILURES`` wrong passwords.
Someone guessing one user's password from many addresses never reaches that per pair, so the
username is also locked, from every address, once its failures across all addresses within the
lockout period reach ``GPULEDGER_LOGIN_USERNAME_FAILURES``. Staff unlock it as any lockout (the
admin's *Access attempts*, or ``manage.py axes_reset_username``); see README "Deploy".
"""

from __future__ import annotations

from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.utils import timezone


class UsernameCeilingHandler(AxesDatabaseHandler):
    """Counts a pair's failures as axes does, and as the limit once the username's failures
    across every address reach the ceiling."""

    def get_failures(self, request: Any, credentials: dict | None = None) -> int:
        failures = int(super().get_failures(request, credentials))
        username = get_client_username(request, credentials)
        if not username:
            return failures
        attempts = AccessAttempt.objects.filter(username=username)
        cool_off = get_cool_off(request)
        if cool_off is not None:
            attempts = attempts.filter(attempt_time__gte=timezone.now() - cool_off)
        total = attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
        if total >= settings.GPULEDGER_LOGIN_USERNAME_FAILURES:
            return max(failures, int(get_failure_limit(request, credentials)))
        return failures
