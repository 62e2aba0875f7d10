from django.db import models


class Role(models.TextChoices):
    LEAD = "lead", "Lead of a team"
    MEMBER = "member", "Member of a team"
    FINANCE = "finance", "Finance (every team's figures and chargeback)"
    ADMIN = "admin", "Admin (staff, may apply quota changes)"


# Roles that name a team, and those that must not.
TEAM_ROLES = frozenset({Role.LEAD, Role.MEMBER})
