from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from accounts.choices import TEAM_ROLES, Role
from quotas.models import Team


class GroupRoleMapping(models.Model):
    """A group of the identity provider's groups claim, mapped to a role in GPU Ledger.

    A user signed in through the provider holds exactly the roles their groups map to, read
    again at every sign-in and every ``GPULEDGER_OIDC_ROLE_TTL`` seconds of an open session.
    """

    group = models.CharField(
        max_length=255,
        help_text="A value of the provider's groups claim, exactly as the provider sends it.",
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    team = models.ForeignKey(
        Team,
        related_name="group_role_mappings",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        help_text="The team a lead or member role is for; empty for finance and admin.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["group", "role", "team__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["group", "role", "team"],
                name="accounts_grouprolemapping_group_role_team",
            ),
            models.UniqueConstraint(
                fields=["group", "role"],
                condition=models.Q(team__isnull=True),
                name="accounts_grouprolemapping_group_role_no_team",
            ),
        ]

    def __str__(self) -> str:
        if self.team_id:
            return f"{self.group} → {self.role} of {self.team}"
        return f"{self.group} → {self.role}"

    def clean(self) -> None:
        if self.role in TEAM_ROLES and self.team_id is None:
            raise ValidationError({"team": "A lead or member role names its team."})
        if self.role not in TEAM_ROLES and self.team_id is not None:
            raise ValidationError({"team": "Finance and admin roles are for every team: no team."})


class OidcIdentity(models.Model):
    """Which subject of which provider a user is: the account a sign-in lands on.

    Users are matched on (issuer, subject), never on e-mail: a provider account whose address
    equals a local account's (a break-glass admin's) does not take that account over.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        related_name="oidc_identity",
        on_delete=models.CASCADE,
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(
        default=list,
        blank=True,
        help_text="The groups claim as last read from the provider.",
    )
    synced_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the roles were last set from the provider's groups.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["issuer", "subject"]
        verbose_name = "OIDC identity"
        verbose_name_plural = "OIDC identities"
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"],
                name="accounts_oidcidentity_issuer_subject",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
