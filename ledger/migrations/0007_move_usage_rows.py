"""Moves the wide table's usage rows into holdings and facts when there are few enough.

Separate from the schema change and reversible. Installs with more than
``ledger.store.legacy.MIGRATION_ROW_LIMIT`` rows are left to ``manage.py move_usage``, which moves
them in resumable batches of one transaction each: a migration runs in one transaction, and a
big install's rows would hold it for hours.
"""

import logging

from django.db import migrations

logger = logging.getLogger(__name__)


def move(apps, schema_editor):
    from ledger.store import legacy

    legacy.forget()
    count = legacy.remaining()
    if count > legacy.MIGRATION_ROW_LIMIT:
        logger.warning(
            "%d usage rows to move into the compact layout: run `manage.py move_usage` "
            "(resumable) before the collectors start",
            count,
        )
        return
    for _batch in legacy.move_batches():
        pass


def move_back(apps, schema_editor):
    from ledger.store import legacy

    legacy.move_back()


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0006_compact_usage"),
    ]

    operations = [
        migrations.RunPython(move, move_back),
    ]
