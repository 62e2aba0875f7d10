"""core.bulk: the set-based reads and the two write paths, on whichever database runs the tests."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Q
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext

from core import bulk
from core.bulk import sql_moment
from fleet.models import Cluster, Gpu, Node
from quotas.models import Cohort

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def names(cluster: Cluster) -> dict[str, str]:
    return dict(Node.objects.filter(cluster=cluster).values_list("name", "gpu_product"))


# --- Reads ---------------------------------------------------------------------------------------


def test_filter_in_covers_every_value_in_batches_off_postgresql(cluster):
    Node.objects.bulk_create(Node(cluster=cluster, name=f"n{i:02d}") for i in range(25))
    wanted = [f"n{i:02d}" for i in range(0, 25, 2)] + ["missing"]

    queries = list(bulk.filter_in(Node.objects.all(), "name", wanted, batch_size=5))

    found = sorted(name for query in queries for name in query.values_list("name", flat=True))
    assert found == wanted[:-1]
    assert len(queries) == (1 if connection.vendor == "postgresql" else 3)
    assert list(bulk.filter_in(Node.objects.all(), "name", [], batch_size=5)) == []


def test_fetch_rows_returns_the_values_list_tuples(cluster):
    Gpu.objects.create(cluster=cluster, host="h", uuid="GPU-1", last_seen_at=NOW)

    rows = bulk.fetch_rows(Gpu.objects.all(), "uuid", "gi_id", "last_seen_at")

    assert [tuple(row) for row in rows] == [("GPU-1", "", NOW)]


def test_fetch_rows_decodes_json_fields_as_django_does(cluster):
    labels = {"team": "red", "nested": {"gpus": 8, "ok": True}, "list": [1.5, None]}
    Node.objects.create(cluster=cluster, name="n1", labels=labels)
    Node.objects.create(cluster=cluster, name="n2", labels={})

    rows = bulk.fetch_rows(Node.objects.order_by("name"), "name", "labels", "pk")

    assert [tuple(row[:2]) for row in rows] == [("n1", labels), ("n2", {})]
    assert [row[2] for row in rows] == list(
        Node.objects.order_by("name").values_list("pk", flat=True)
    )


def test_fetch_instances_builds_what_the_orm_builds(cluster):
    labels = {"team": "red", "nested": {"gpus": 8}}
    Node.objects.create(cluster=cluster, name="n1", labels=labels, gpu_capacity=8)
    Node.objects.create(cluster=cluster, name="n2")
    seen: list[object] = []

    def record(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(record, sender=Node)
    try:
        built = bulk.fetch_instances(Node.objects.order_by("name"))
    finally:
        post_init.disconnect(record, sender=Node)

    expected = list(Node.objects.order_by("name"))
    attnames = [field.attname for field in Node._meta.concrete_fields]
    assert [[getattr(node, name) for name in attnames] for node in built] == [
        [getattr(node, name) for name in attnames] for node in expected
    ]
    assert built[0].labels == labels
    assert all(not node._state.adding and node._state.db == "default" for node in built)
    assert seen == built
    # The instances behave as the ORM's: a foreign key resolves, a save updates in place.
    assert built[0].cluster == cluster
    built[1].gpu_capacity = 4
    built[1].save(update_fields=["gpu_capacity"])
    assert Node.objects.get(name="n2").gpu_capacity == 4
    assert Node.objects.count() == 2


@pytest.mark.parametrize("batch_size", [2, 100])
def test_read_keys_matches_composite_keys_exactly(cluster, batch_size):
    for ns in ("a", "b"):
        for name in ("x", "y"):
            Cohort.objects.create(cluster=cluster, name=f"{ns}-{name}", parent_name=ns)
    # (parent_name, name): "a"/"b-x" is in the cross product of the values, not a key.
    keys = [("a", "a-x"), ("b", "b-y"), ("a", "b-x")]

    found = bulk.read_keys(
        Cohort.objects.filter(cluster=cluster), ("parent_name", "name"), keys, ("id",), batch_size
    )

    assert sorted(found) == [("a", "a-x"), ("b", "b-y")]
    assert found[("a", "a-x")]["id"] == Cohort.objects.get(name="a-x").pk


def test_update_in_updates_only_the_rows_picked_and_counts_them(cluster):
    nodes = Node.objects.bulk_create(Node(cluster=cluster, name=f"n{i}") for i in range(6))
    ids = [node.pk for node in nodes[:4]]

    updated = bulk.update_in(
        Node.objects.filter(name__in=["n0", "n1", "n5"]), "id", ids, 2, gpu_product="H100"
    )

    assert updated == 2
    assert names(cluster) == {f"n{i}": ("H100" if i < 2 else "") for i in range(6)}


# --- Tuple rows ----------------------------------------------------------------------------------


def test_insert_rows_fills_defaults_and_ignores_or_updates_conflicts(cluster):
    bulk.insert_rows(
        Node,
        ("cluster_id", "name", "gpu_product"),
        [(cluster.pk, "a", "H100"), (cluster.pk, "b", "")],
    )
    node = Node.objects.get(name="a")
    assert (node.flavor, node.gpu_capacity, node.mig_allocatable) == ("", 0, {})
    assert node.created_at is not None

    # Without update_fields a conflict is ignored...
    bulk.insert_rows(
        Node,
        ("cluster_id", "name", "gpu_product"),
        [(cluster.pk, "a", "A100"), (cluster.pk, "c", "A100")],
        unique_fields=["cluster", "name"],
    )
    assert names(cluster) == {"a": "H100", "b": "", "c": "A100"}
    # ...with them the row is updated, and ids come back where the database returns them.
    returned = bulk.insert_rows(
        Node,
        ("cluster_id", "name", "gpu_product"),
        [(cluster.pk, "b", "L4")],
        unique_fields=["cluster", "name"],
        update_fields=["gpu_product"],
        returning=True,
    )
    assert names(cluster) == {"a": "H100", "b": "L4", "c": "A100"}
    if connection.vendor == "postgresql":
        assert returned == {(cluster.pk, "b"): Node.objects.get(name="b").pk}
    else:
        assert returned == {}


def test_insert_rows_takes_a_constant_number_of_statements(cluster):
    def statements(count: int) -> int:
        Node.objects.all().delete()
        rows = [(cluster.pk, f"n{i}") for i in range(count)]
        with CaptureQueriesContext(connection) as queries:
            bulk.insert_rows(Node, ("cluster_id", "name"), rows, unique_fields=["cluster", "name"])
        assert Node.objects.count() == count
        return len(queries)

    assert statements(3) == statements(300)


# --- Field values --------------------------------------------------------------------------------


def upsert(cluster, rows, **options):
    return bulk.upsert(
        Cohort,
        Q(cluster=cluster),
        ("name",),
        rows,
        parent={"cluster": cluster},
        batch_size=2,
        lookup_batch_size=10,
        deleted_at=NOW,
        **options,
    )


def test_upsert_writes_new_and_changed_rows_only(cluster):
    rows = {("a",): {"parent_name": "root", "deleted_at": None}, ("b",): {"parent_name": ""}}

    first = upsert(cluster, rows)
    again = upsert(cluster, rows)
    changed = upsert(cluster, {**rows, ("b",): {"parent_name": "root"}})

    assert (first.created, first.updated) == (2, 0)
    assert (again.created, again.updated) == (0, 0)
    assert (changed.created, changed.updated) == (0, 1)
    assert first.ids == {key: Cohort.objects.get(name=key[0]).pk for key in rows}
    assert dict(Cohort.objects.values_list("name", "parent_name")) == {"a": "root", "b": "root"}


def test_upsert_soft_deletes_rows_missing_from_a_complete_list_and_revives_them(cluster):
    upsert(cluster, {(name,): {"deleted_at": None} for name in "abc"})

    gone = upsert(cluster, {("a",): {"deleted_at": None}}, seen={("a",), ("b",)})
    back = upsert(cluster, {("c",): {"deleted_at": None}}, selective=True)

    assert [Cohort.objects.get(pk=pk).name for pk in gone.deleted] == ["c"]
    assert (back.updated, back.ids) == (1, {("c",): Cohort.objects.get(name="c").pk})
    assert dict(Cohort.objects.values_list("name", "deleted_at")) == {
        "a": None,
        "b": None,
        "c": None,
    }


def test_upsert_keep_existing_and_stamp(cluster):
    upsert(cluster, {("a",): {"parent_name": "root"}})

    kept = upsert(cluster, {("a",): {"parent_name": "other"}}, keep_existing=True)
    stamped = upsert(cluster, {("a",): {"parent_name": "new"}}, stamp={"observed_at": NOW})

    assert (kept.created, kept.updated) == (0, 0)
    assert stamped.updated == 1
    row = Cohort.objects.get(name="a")
    assert (row.parent_name, row.observed_at) == ("new", NOW)


def test_upsert_compares_decimals_at_their_columns_places_and_cuts_long_strings(cluster):
    upsert(cluster, {("a",): {"fair_weight": Decimal("0.5"), "parent_name": "p" * 300}})

    # fair_weight has 4 decimal places: 0.50001 is stored, and compares, as 0.5000.
    again = upsert(cluster, {("a",): {"fair_weight": Decimal("0.50001"), "parent_name": "p" * 253}})

    assert again.updated == 0
    row = Cohort.objects.get(name="a")
    assert (row.fair_weight, len(row.parent_name)) == (Decimal("0.5000"), 253)


@pytest.mark.parametrize(
    "raw",
    [
        "2026-01-05 12:00:00",  # SQLite's text, naive UTC
        "2026-01-05T13:00:00+01:00",
        datetime(2026, 1, 5, 12, 0),  # noqa: DTZ001 (a naive value from SQLite: UTC)
        datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
    ],
)
def test_a_raw_sql_timestamp_reads_as_the_aware_utc_moment(raw):
    moment = sql_moment(raw)
    assert moment == datetime(2026, 1, 5, 12, 0, tzinfo=UTC) and moment.tzinfo is not None


@pytest.mark.parametrize("raw", ["yesterday", "", None, 1767614400, b"2026-01-05"])
def test_anything_else_is_a_value_error_not_a_wrong_moment(raw):
    with pytest.raises(ValueError, match="not a timestamp"):
        sql_moment(raw)
