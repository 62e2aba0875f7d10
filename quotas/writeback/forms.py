"""The quota edit form: one row per flavor x resource (nominal, borrowing and lending limits as
Kubernetes quantities), the stopPolicy, and the reason; and ``submit_edit``, the one step from a
submitted form to a previewed (or requested) change, shared by the admin's ClusterQueue and
Cohort pages and the dashboard's change page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest

from fleet.choices import QuotaSource
from quotas.choices import STOP_POLICIES
from quotas.models import ClusterQueue, Cohort, QuotaChange
from quotas.writeback import service
from quotas.writeback.edits import LIMITS, Cell, EditError, cell_field
from quotas.writeback.native import mapping_note, target_for
from quotas.writeback.state import cohort_cells, synced_cells


class QuotaEditForm(forms.Form):
    stop_policy = forms.ChoiceField(
        choices=[(p, p) for p in STOP_POLICIES],
        help_text="Hold: admit nothing new. HoldAndDrain: also evict what is admitted.",
    )
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=2000,
        help_text="Required. Kept in the audit trail and shown to whoever decides.",
    )

    def __init__(
        self, *args: Any, cells: list[Cell], stop_policy: str | None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.cells = cells
        # Where a Volcano or KAI queue's values go (``quotas.writeback.native``); "" for Kueue.
        self.source_note = ""
        # A Cohort has no stopPolicy: None leaves the field out.
        self.has_stop_policy = stop_policy is not None
        if stop_policy is None:
            del self.fields["stop_policy"]
        else:
            self.fields["stop_policy"].initial = stop_policy or "None"
        for index, cell in enumerate(cells):
            for name in LIMITS:
                self.fields[f"q{index}_{name}"] = forms.CharField(
                    required=False,
                    initial=getattr(cell, name) or "",
                    max_length=64,
                    widget=forms.TextInput(
                        attrs={
                            "size": 8,
                            "aria-label": f"{cell.flavor} {cell.resource} {name}",
                            "data-cell": cell_field(cell.flavor, cell.resource, name),
                        }
                    ),
                )

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "cell": cell,
                "fields": [self[f"q{index}_{name}"] for name in LIMITS],
            }
            for index, cell in enumerate(self.cells)
        ]

    def changes(self) -> list[dict[str, Any]]:
        """The rows the user edited, as submitted.

        Only those: a row left as shown carries the values of the last sync, and sending it
        would revert whatever changed on the live object since.
        """
        return [
            {
                "flavor": cell.flavor,
                "resource": cell.resource,
                **{name: self.cleaned_data.get(f"q{index}_{name}", "") for name in LIMITS},
            }
            for index, cell in enumerate(self.cells)
            if any(f"q{index}_{name}" in self.changed_data for name in LIMITS)
        ]

    def stop_policy_change(self) -> str | None:
        """The stopPolicy when the user changed it, else None (leave the live one)."""
        if not self.has_stop_policy or "stop_policy" not in self.changed_data:
            return None
        return str(self.cleaned_data["stop_policy"])

    def add_edit_errors(self, error: EditError) -> None:
        """Put the service's errors on the fields they name."""
        by_cell = {
            cell_field(cell.flavor, cell.resource, name): f"q{index}_{name}"
            for index, cell in enumerate(self.cells)
            for name in LIMITS
        }
        for key, messages in error.errors.items():
            target = by_cell.get(key)
            if target is None and key in self.fields:
                target = key
            for message in messages:
                self.add_error(target, f"{key}: {message}" if target is None else message)


def submit_edit(
    request: HttpRequest, target: ClusterQueue | Cohort, *, request_only: bool = False
) -> tuple[QuotaEditForm, QuotaChange | None]:
    """The edit form of ``target`` bound to the request, and the change a valid POST made.

    The form shows the quotas as last synced (a Cohort: its own ``spec.resourceGroups``, and no
    stopPolicy). A valid POST is previewed (``service.preview``; ``request_only``: a team lead's
    request); errors of the edit land on the form's fields and the change is None. The caller
    checks who may edit first and renders the form or redirects to the change.
    """
    data = request.POST or None
    if isinstance(target, Cohort):
        form = QuotaEditForm(data, cells=cohort_cells(target), stop_policy=None)
        targets: dict[str, Any] = {"cohort": target}
    else:
        # Volcano and KAI queues have no stopPolicy GPU Ledger writes (quotas.writeback.native).
        stop_policy = target.stop_policy if target.scheduler in ("", QuotaSource.KUEUE) else None
        form = QuotaEditForm(data, cells=synced_cells(target), stop_policy=stop_policy)
        targets = {"cluster_queue": target}
    try:
        kind = "Cohort" if isinstance(target, Cohort) else "ClusterQueue"
        form.source_note = mapping_note(target_for(target.scheduler, kind))
    except EditError as exc:
        form.source_note = " ".join(m for ms in exc.errors.values() for m in ms)
    if request.method != "POST" or not form.is_valid():
        return form, None
    try:
        change = service.preview(
            **targets,
            changes=form.changes(),
            stop_policy=form.stop_policy_change(),
            reason=form.cleaned_data["reason"],
            user=request.user,
            request_only=request_only,
        )
    except EditError as exc:
        form.add_edit_errors(exc)
        return form, None
    return form, change
