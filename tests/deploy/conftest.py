"""What the deploy tests share: an admin allowed to apply quota changes (the RBAC tests'
write-backs)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission


@pytest.fixture
def quota_admin(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user(username="quota-admin", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="apply_quota_change"))
    return django_user_model.objects.get(pk=user.pk)
