from django.contrib import admin

from accounts.models import GroupRoleMapping, OidcIdentity


@admin.register(GroupRoleMapping)
class GroupRoleMappingAdmin(admin.ModelAdmin):
    list_display = ["group", "role", "team", "updated_at"]
    list_filter = ["role", "team"]
    search_fields = ["group", "team__name"]


@admin.register(OidcIdentity)
class OidcIdentityAdmin(admin.ModelAdmin):
    list_display = ["user", "issuer", "subject", "synced_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "groups", "synced_at", "created_at"]

    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        # Identities are made by sign-ins, not by hand.
        return False
