"""Choices of the remediation models (``remediation.models``)."""

from django.db import models


class RemediationMode(models.TextChoices):
    OFF = "off", "Off"
    NOTIFY = "notify", "Notify only"
    DEACTIVATE = "deactivate", "Deactivate the workload"


class RemediationKind(models.TextChoices):
    DEACTIVATE = "deactivate", "Deactivate (spec.active=false)"
    REACTIVATE = "reactivate", "Re-activate (spec.active=true)"
    NOTIFY = "notify", "Owners told the workload qualifies"


class RemediationOutcome(models.TextChoices):
    PENDING = "pending", "Under way"
    DONE = "done", "Done"
    DRY_RUN = "dry_run", "Dry run: recorded only"
    FAILED = "failed", "Failed"
