"""Create (or reset) the demo logins and print them: an admin, a team lead and a finance user."""

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand

from quotas.models import Team

FINANCE_USERNAME = "finance"


class Command(BaseCommand):
    help = "Create or reset the demo admin, a team lead and a finance user, and print their logins."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--password",
            help="Use this password, suffixed per user (-admin, -lead, -finance), instead of "
            "random ones.",
        )
        parser.add_argument(
            "--url",
            default="http://127.0.0.1:8000/",
            help="The address the demo is served at, as printed (make demo passes HOST and PORT).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        base = options["password"]

        def password_for(role: str) -> str:
            # Distinct passwords: a login shown for one role never opens another.
            return f"{base}-{role}" if base else secrets.token_urlsafe(9)

        admin_password = password_for("admin")
        admin, _ = user_model.objects.get_or_create(
            username="admin",
            defaults={"email": "admin@example.com"},
        )
        admin.is_staff = True
        admin.is_superuser = True
        admin.set_password(admin_password)
        admin.save()
        lines = [("admin", admin_password, "staff: sees everything, edits in /admin/")]

        team = Team.objects.order_by("name").first()
        if team is not None:
            lead_password = password_for("lead")
            lead, _ = user_model.objects.get_or_create(
                username=f"lead-{team.name}",
                defaults={"email": f"lead-{team.name}@example.com"},
            )
            lead.is_staff = False
            lead.set_password(lead_password)
            lead.save()
            team.leads.add(lead)
            lines.append(
                (
                    lead.username,
                    lead_password,
                    f"team lead of {team.name}: fleet aggregates + own team detail",
                )
            )

        finance_password = password_for("finance")
        finance, _ = user_model.objects.get_or_create(
            username=FINANCE_USERNAME,
            defaults={"email": "finance@example.com"},
        )
        finance.is_staff = False
        finance.is_superuser = False
        finance.set_password(finance_password)
        finance.save()
        group, _ = Group.objects.get_or_create(name=settings.GPULEDGER_FINANCE_GROUP)
        finance.groups.add(group)
        lines.append(
            (
                finance.username,
                finance_password,
                f"member of the {group.name} group: every team's chargeback, no admin",
            )
        )

        width = max(len(name) for name, _, _ in lines)
        secret_width = max(len(secret) for _, secret, _ in lines)
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"GPU Ledger demo is ready at {options['url']}"))
        self.stdout.write("Log in with:")
        for name, password, role in lines:
            self.stdout.write(f"  {name:<{width}} / {password:<{secret_width}}   ({role})")
        self.stdout.write("")
