"""The reclaim-time estimate: policy, priorities, victim order, pace and grace."""

from datetime import UTC, datetime

from quotas.reclaim import (
    DEFAULT_TERMINATION_GRACE_SECONDS,
    SCHEDULING_CYCLE_SECONDS,
    Borrower,
    PaceBasis,
    ReclaimInputs,
    ReclaimStatus,
    estimate_reclaim,
    median,
    termination_grace_seconds,
)


def test_nothing_lent_needs_no_time():
    estimate = estimate_reclaim(ReclaimInputs(lent_gpus=0, policy="Any"))

    assert estimate.status == ReclaimStatus.NOTHING_LENT
    assert estimate.seconds == 0


def test_never_policy_cannot_reclaim_whatever_the_borrowers():
    borrowers = [Borrower("team-a/a2", priority=0, gpus=4)]

    estimate = estimate_reclaim(ReclaimInputs(lent_gpus=4, policy="Never", borrowers=borrowers))

    assert estimate.status == ReclaimStatus.CANNOT
    assert estimate.seconds is None
    assert estimate.unreclaimable_gpus == 4


def test_an_empty_policy_is_kueues_default_never():
    borrowers = [Borrower("team-a/a2", priority=0, gpus=4)]

    estimate = estimate_reclaim(ReclaimInputs(lent_gpus=4, policy="", borrowers=borrowers))

    assert estimate.status == ReclaimStatus.CANNOT


def test_lower_priority_skips_borrowers_at_or_above_the_pending_priority():
    low = Borrower("low", priority=100, gpus=2)
    equal = Borrower("equal", priority=500, gpus=2)
    high = Borrower("high", priority=1000, gpus=4)

    estimate = estimate_reclaim(
        ReclaimInputs(
            lent_gpus=6,
            policy="LowerPriority",
            borrowers=[high, equal, low],
            pending_priorities=[500, 300],
        )
    )

    assert estimate.status == ReclaimStatus.PARTIAL
    assert estimate.victims == (low,)
    assert estimate.reclaimable_gpus == 2
    assert estimate.unreclaimable_gpus == 6 - 2
    assert estimate.judged_priority == 500


def test_any_policy_preempts_whatever_the_priority():
    high = Borrower("high", priority=10_000, gpus=4)

    estimate = estimate_reclaim(
        ReclaimInputs(lent_gpus=4, policy="Any", borrowers=[high], pending_priorities=[0])
    )

    assert estimate.status == ReclaimStatus.FULL
    assert estimate.victims == (high,)


def test_victims_go_lowest_priority_first_then_newest_admission_first():
    older = Borrower("older", 100, 2, admitted_at=datetime(2026, 8, 1, tzinfo=UTC))
    newer = Borrower("newer", 100, 2, admitted_at=datetime(2026, 8, 2, tzinfo=UTC))
    higher = Borrower("higher", 200, 2, admitted_at=datetime(2026, 8, 3, tzinfo=UTC))

    estimate = estimate_reclaim(
        ReclaimInputs(lent_gpus=4, policy="Any", borrowers=[higher, older, newer])
    )

    assert [victim.name for victim in estimate.victims] == ["newer", "older"]


def test_observed_admission_pace_is_floored_by_the_longest_victim_grace():
    slow_grace = Borrower("slow", priority=0, gpus=4, grace_seconds=120)

    estimate = estimate_reclaim(
        ReclaimInputs(
            lent_gpus=4,
            policy="Any",
            borrowers=[slow_grace],
            preemption_to_admission_seconds=45,
        )
    )

    assert estimate.basis == PaceBasis.OBSERVED_ADMISSION
    assert estimate.seconds == max(45, 120)


def test_observed_admission_pace_wins_when_longer_than_grace():
    borrower = Borrower("b", priority=0, gpus=4, grace_seconds=30)

    estimate = estimate_reclaim(
        ReclaimInputs(
            lent_gpus=4,
            policy="Any",
            borrowers=[borrower],
            preemption_to_admission_seconds=400,
        )
    )

    assert estimate.seconds == 400


def test_eviction_rate_paces_victims_after_the_first():
    victims = [Borrower(f"b{i}", priority=0, gpus=1, grace_seconds=60) for i in range(3)]

    estimate = estimate_reclaim(
        ReclaimInputs(lent_gpus=3, policy="Any", borrowers=victims, evictions_per_hour=6)
    )

    assert estimate.basis == PaceBasis.OBSERVED_RATE
    assert estimate.seconds == 60 + (3 - 1) * 3600 / 6


def test_without_observations_it_is_grace_plus_one_scheduling_cycle():
    borrower = Borrower("b", priority=0, gpus=8)

    estimate = estimate_reclaim(ReclaimInputs(lent_gpus=4, policy="Any", borrowers=[borrower]))

    assert estimate.basis == PaceBasis.GRACE_ONLY
    assert estimate.seconds == DEFAULT_TERMINATION_GRACE_SECONDS + SCHEDULING_CYCLE_SECONDS
    # One 8-GPU borrower covers the 4 lent GPUs; reclaimable never exceeds what was lent.
    assert estimate.reclaimable_gpus == 4
    assert estimate.status == ReclaimStatus.FULL


def test_no_pending_work_judges_by_the_reference_priority():
    borrower = Borrower("b", priority=100, gpus=4)

    below = estimate_reclaim(
        ReclaimInputs(
            lent_gpus=4, policy="LowerPriority", borrowers=[borrower], reference_priority=50
        )
    )
    above = estimate_reclaim(
        ReclaimInputs(
            lent_gpus=4, policy="LowerPriority", borrowers=[borrower], reference_priority=500
        )
    )

    assert below.status == ReclaimStatus.PARTIAL
    assert below.seconds is None
    assert above.status == ReclaimStatus.FULL


def test_lent_quota_without_known_borrowers_is_unattributed():
    estimate = estimate_reclaim(ReclaimInputs(lent_gpus=4, policy="Any"))

    assert estimate.status == ReclaimStatus.UNATTRIBUTED
    assert estimate.seconds is None


def test_grace_is_read_from_the_pod_template_and_the_longest_wins():
    pod_sets = [
        {"name": "leader", "template": {"spec": {"terminationGracePeriodSeconds": 45}}},
        {"name": "worker", "template": {"spec": {"terminationGracePeriodSeconds": 90}}},
    ]

    assert termination_grace_seconds(pod_sets) == 90


def test_grace_defaults_to_kubernetes_30_seconds():
    assert termination_grace_seconds([{"name": "main", "count": 1}]) == 30
    assert termination_grace_seconds(None) == 30
    assert termination_grace_seconds([{"terminationGracePeriodSeconds": "soon"}]) == 30


def test_median_of_even_and_odd_and_empty_lists():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([]) is None
