"""core.pgsettings: planner settings for one transaction, in one statement."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from core.pgsettings import local_settings

pytestmark = pytest.mark.postgresql(reason="planner settings exist on PostgreSQL only")


def current() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('jit'), current_setting('work_mem')")
        return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_settings_last_until_the_transaction_ends_and_take_one_statement():
    before = current()
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            with local_settings("default", {"jit": "off", "work_mem": "48MB"}):
                pass
        assert [q["sql"] for q in queries.captured_queries if "set_config" in q["sql"]] != []
        assert len(queries.captured_queries) == 1
        assert current() == ("off", "48MB")
    assert current() == before


@pytest.mark.django_db
def test_the_product_s_connections_run_without_jit():
    assert current()[0] == "off"


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_it_opens_one_for_the_block():
    before = current()
    with local_settings("default", {"work_mem": "48MB"}):
        assert connection.in_atomic_block
        assert current()[1] == "48MB"
    assert current() == before


@pytest.mark.django_db
def test_restore_gives_back_the_values_of_the_surrounding_transaction():
    with transaction.atomic():
        with local_settings("default", {"work_mem": "40MB"}):
            with local_settings("default", {"work_mem": "48MB", "jit": "off"}, restore=True):
                assert current() == ("off", "48MB")
            assert current()[1] == "40MB"
