"""Move the usage rows of the wide table into the compact layout, in resumable batches.

    manage.py move_usage            # every row; stop it any time, run it again to go on

Migration ``ledger.0007`` moves small installs by itself; bigger ones run this after
``migrate`` and before the collectors and beat start. Each batch of whole windows is one
transaction (``ledger.store.legacy``). Rollups are not touched: they already hold these
windows' figures, and an hour whose rows are not all moved yet is never rolled up again.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from ledger.store import legacy


class Command(BaseCommand):
    help = "Move usage rows of the wide table into holdings and facts, in resumable batches."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--batch-rows",
            type=int,
            default=legacy.BATCH_ROWS,
            help=f"Rows per transaction (default {legacy.BATCH_ROWS}).",
        )

    def handle(self, *args: object, **options: object) -> None:
        batch_rows = options["batch_rows"]
        if not isinstance(batch_rows, int) or batch_rows < 1:
            raise CommandError("--batch-rows must be a positive number")
        total = legacy.remaining()
        if not total:
            self.stdout.write("No usage rows to move.")
        moved = windows = 0
        with tqdm(total=total, unit="row", disable=not total, file=self.stderr) as progress:
            for batch in legacy.move_batches(batch_rows):
                moved += batch.rows
                windows += batch.windows
                progress.update(batch.rows)
        if total:
            self.stdout.write(f"Moved {moved} rows of {windows} windows ({total} read).")
