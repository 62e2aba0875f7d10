"""``Tally``: what one sync counts and reports, and the ``IngestRun`` it leaves."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from fleet.models import IngestRun
from quotas.ingest import KueueBatch
from quotas.kueue import KubeError

# The note a sync keeps per kind it relisted during its WATCH after ``410 Gone`` (the product's
# /metrics counts them as relists caused by "gone").
RELISTED_AFTER_GONE = "relisted after 410 Gone"


@dataclass
class Tally:
    """Counters and errors of one sync, shared by its steps and written to its ``IngestRun``."""

    errors: list[str] = field(default_factory=list)
    # The LIST failures behind ``errors``: whether retrying can help.
    failures: list[KubeError] = field(default_factory=list)
    skip_reasons: Counter[str] = field(default_factory=Counter)
    # Facts worth showing with the skip reasons that are not skips ("Cohort: not served").
    notes: Counter[str] = field(default_factory=Counter)
    records_read: int = 0
    rows_written: int = 0
    skipped: int = 0
    events_applied: int = 0

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.skip_reasons[reason] += 1

    def count_build(self, batch: KueueBatch) -> None:
        """Count what a full build of the lists read and skipped."""
        self.records_read += batch.stats.records_read
        self.skipped += batch.stats.skipped
        self.skip_reasons.update(batch.stats.skip_reasons)

    def finish(
        self,
        run: IngestRun,
        status: str,
        window: tuple[datetime, datetime] | None = None,
        error: str = "",
    ) -> IngestRun:
        """Save the run with its status, counters, errors and the windows it sampled."""
        run.status = status
        run.finished_at = timezone.now()
        run.records_read = self.records_read + self.events_applied
        run.rows_written = self.rows_written
        run.skipped = self.skipped
        run.skip_reasons = {**dict(self.skip_reasons), **dict(self.notes)}
        run.error = error or "\n".join(self.errors)
        if window is not None:
            run.window_start, run.window_end = window
        run.save()
        return run
