"""Admin building blocks shared by the apps."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows nobody edits by hand: no add, no change; viewing needs the view permission.

    Rows the collectors own would be overwritten on the next sync; logs and audit trails record
    what happened. A superuser may delete rows unless ``superuser_may_delete`` is off (an audit
    trail keeps every row).
    """

    superuser_may_delete = True

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.superuser_may_delete and bool(request.user.is_superuser)


class ReadOnlyInline(admin.TabularInline):
    """Rows shown under their parent as they are: every field read-only, none added or deleted."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.get_fields(request, obj)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
