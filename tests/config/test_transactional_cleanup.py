"""What a transactional test leaves for the next: ``tests.databases.empty_written_tables``
deletes the rows written since the last flush and must leave what Django's flush (with its
``post_migrate``) leaves."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection

from fleet.models import Cluster, Node
from tests.databases import (
    REFILLED_AFTER_FLUSH,
    empty_written_tables,
    flushed,
    tables_with_rows,
)

pytestmark = pytest.mark.django_db(transaction=True)


def flush() -> None:
    call_command("flush", verbosity=0, interactive=False, reset_sequences=False)
    flushed(connection.alias)


def refilled_rows() -> tuple[list[Any], list[Any]]:
    types = sorted(ContentType.objects.values_list("pk", "app_label", "model"))
    permissions = sorted(Permission.objects.values_list("pk", "content_type_id", "codename"))
    return types, permissions


def write_rows() -> None:
    """Rows in tables tied by a foreign key, the parent's name sorting first."""
    cluster = Cluster.objects.create(name="cleanup")
    Node.objects.create(cluster=cluster, name="node-1")
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("cleanup", password="x")


def test_written_rows_deleted_content_types_and_permissions_kept() -> None:
    flush()
    as_flushed = refilled_rows()
    write_rows()
    assert {"fleet_cluster", "fleet_node"} <= set(tables_with_rows(connection))

    assert empty_written_tables(connection.alias)

    assert set(tables_with_rows(connection)) == set(REFILLED_AFTER_FLUSH)
    assert refilled_rows() == as_flushed


def test_leaves_what_a_flush_leaves() -> None:
    flush()
    write_rows()
    assert empty_written_tables(connection.alias)
    after_cleanup = set(tables_with_rows(connection))
    types, permissions = refilled_rows()

    flush()

    assert set(tables_with_rows(connection)) == after_cleanup
    flushed_types, flushed_permissions = refilled_rows()
    assert [row[1:] for row in flushed_types] == [row[1:] for row in types]
    assert sorted(row[2] for row in flushed_permissions) == sorted(row[2] for row in permissions)


@pytest.mark.parametrize("change", ["permission added", "content type deleted"])
def test_changed_permissions_leave_it_to_the_flush(change: str) -> None:
    flush()
    Cluster.objects.create(name="kept")
    if change == "permission added":
        Permission.objects.create(
            name="x", codename="x", content_type=ContentType.objects.get_for_model(Cluster)
        )
    else:
        ContentType.objects.get_for_model(Node).delete()

    assert not empty_written_tables(connection.alias)

    assert Cluster.objects.filter(name="kept").exists()


def test_a_test_that_commits_rows() -> None:
    Cluster.objects.create(name="left-behind")


def test_the_next_test_finds_none() -> None:
    """The teardown after the test above (run just before, in this file's order) deleted them."""
    assert not Cluster.objects.exists()
    assert set(tables_with_rows(connection)) == set(REFILLED_AFTER_FLUSH)
