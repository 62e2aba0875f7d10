"""Inferred lending balances borrowing: every GPU a member borrows beyond the cohort's own quota
is lent by exactly one other member, also when a lender has taken its quota back and the
borrower still runs (the research cohort of the demo, 26 Nov 17:45)."""

from __future__ import annotations

from decimal import Decimal

from quotas.ingest.rows import QueueSampleRow
from quotas.ingest.samples import attribute_lending, place_borrowing

D = Decimal


def sample(name: str, nominal: int, used: int, lending_limit: int | None = None) -> QueueSampleRow:
    return QueueSampleRow(
        cluster_queue_name=name,
        flavor_name="h100",
        resource="nvidia.com/gpu",
        total=D(used),
        reserved=D(used),
        borrowed=D(max(0, used - nominal)),
        lent=D(0),
        nominal=D(nominal),
        borrowing_limit=None,
        lending_limit=None if lending_limit is None else D(lending_limit),
        pending_demand=D(0),
        pending_workloads=0,
        admitted_workloads=0,
    )


COHORT = {"vision": "research", "nlp": "research", "speech": "research"}


def test_borrowing_on_quota_a_lender_took_back_is_lent_by_that_lender():
    # nlp borrows 16 (56 used of 40). speech has 16 unused but lends at most 8; vision uses
    # all of its 24 again, yet 8 of them are lendable: the other 8 stand on vision's quota.
    vision, nlp, speech = (
        sample("vision", 24, 24, 8),
        sample("nlp", 40, 56, 16),
        sample("speech", 16, 0, 8),
    )

    attribute_lending([vision, nlp, speech], COHORT, {})

    assert (speech.lent, vision.lent, nlp.lent) == (D(8), D(8), D(0))
    assert speech.lent + vision.lent == nlp.borrowed


def test_unused_quota_is_lent_first_in_proportion():
    # 6 borrowed; a has 10 unused, b 5: they lend 4 and 2, and nothing of the taken-back kind.
    a, b, borrower = sample("a", 10, 0), sample("b", 10, 5), sample("c", 4, 10)

    attribute_lending([a, b, borrower], {"a": "x", "b": "x", "c": "x"}, {})

    assert (a.lent, b.lent, borrower.lent) == (D(4), D(2), D(0))


def test_the_cohorts_own_quota_lends_first():
    a, borrower = sample("a", 10, 0), sample("c", 4, 10)

    attribute_lending([a, borrower], {"a": "x", "c": "x"}, {("x", "h100"): D(4)})

    assert a.lent == D(2)  # 6 borrowed, 4 of them from the cohort's own quota


def test_rounded_shares_add_up_to_what_was_placed():
    # 1 GPU over three equal lenders: 0.333333 each rounds to 0.999999; the rest goes to one.
    shares = place_borrowing(D(1), [(D(5), D(5))] * 3)

    assert sum(shares) == D(1)
    assert sorted(shares) == [D("0.333333"), D("0.333333"), D("0.333334")]


def test_borrowing_beyond_every_lendable_quota_stays_unattributed():
    shares = place_borrowing(D(20), [(D(0), D(8)), (D(4), D(4))])

    assert shares == [D(8), D(4)]
