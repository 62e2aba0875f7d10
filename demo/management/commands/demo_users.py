"""Create (or reset) the demo logins and print them: an admin and a team lead."""

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from quotas.models import Team


class Command(BaseCommand):
    help = "Create or reset the demo admin and a demo team lead, and print their logins."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--password", help="Use this password instead of a random one.")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        password = options["password"] or secrets.token_urlsafe(9)

        admin, _ = user_model.objects.get_or_create(
            username="admin",
            defaults={"email": "admin@example.com"},
        )
        admin.is_staff = True
        admin.is_superuser = True
        admin.set_password(password)
        admin.save()

        lines = [f"  admin     / {password}   (staff: sees everything, edits in /admin/)"]
        team = Team.objects.order_by("name").first()
        if team is not None:
            lead, _ = user_model.objects.get_or_create(
                username=f"lead-{team.name}",
                defaults={"email": f"lead-{team.name}@example.com"},
            )
            lead.is_staff = False
            lead.set_password(password)
            lead.save()
            team.leads.add(lead)
            lines.append(
                f"  {lead.username} / {password}   (team lead of {team.name}: "
                "fleet aggregates + own team detail)"
            )

        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS("GPU Ledger demo is ready at http://127.0.0.1:8000/"))
        self.stdout.write("Log in with:")
        for line in lines:
            self.stdout.write(line)
        self.stdout.write("")
