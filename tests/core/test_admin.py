"""core.admin: rows nobody edits by hand are read-only in the admin; audit trails keep every row."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import RequestFactory

from fleet.models import Gpu
from quotas.models import QuotaChange

pytestmark = pytest.mark.django_db


def request_by(superuser: bool):
    request = RequestFactory().get("/admin/")
    request.user = User.objects.create(username="a", is_staff=True, is_superuser=superuser)
    return request


def test_collector_rows_can_be_viewed_but_not_added_or_changed():
    gpus = admin.site._registry[Gpu]
    request = request_by(superuser=True)

    assert gpus.has_view_permission(request)
    assert not gpus.has_add_permission(request)
    assert not gpus.has_change_permission(request)


def test_a_superuser_may_delete_collector_rows_and_staff_may_not():
    gpus = admin.site._registry[Gpu]

    assert gpus.has_delete_permission(request_by(superuser=True))
    User.objects.all().delete()
    assert not gpus.has_delete_permission(request_by(superuser=False))


def test_nobody_deletes_from_the_quota_change_audit_trail():
    changes = admin.site._registry[QuotaChange]
    request = request_by(superuser=True)

    assert changes.has_view_permission(request)
    assert not changes.has_add_permission(request)
    assert not changes.has_change_permission(request)
    assert not changes.has_delete_permission(request)


def test_rows_under_a_parent_are_shown_read_only_and_never_added_or_deleted():
    from quotas.models import ClusterQueue

    request = request_by(superuser=True)
    inlines = admin.site._registry[ClusterQueue].get_inline_instances(request)

    assert inlines
    for inline in inlines:
        assert list(inline.get_readonly_fields(request)) == list(inline.fields)
        assert not inline.has_add_permission(request, None)
        assert not inline.has_delete_permission(request, None)
