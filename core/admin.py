"""Admin building blocks shared by the apps."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class CollectorOwnedAdmin(admin.ModelAdmin):
    """Read-only admin for rows the collectors own: edits would be overwritten on the next sync."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)
