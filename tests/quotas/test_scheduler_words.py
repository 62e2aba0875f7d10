"""What each scheduler calls the product's concepts, and a quota as each writes it
(``quotas.words``): pure, no database."""

from __future__ import annotations

import pytest

from quotas.words import KUEUE, list_words, quota_text, words_for


@pytest.mark.parametrize(
    ("scheduler", "queue_kind", "workload", "nominal"),
    [
        ("kueue", "Kueue ClusterQueue", "Workload", "nominal"),
        ("volcano", "Volcano Queue", "PodGroup", "deserved"),
        ("kai", "KAI Queue", "PodGroup", "quota"),
        ("resourcequota", "namespace ResourceQuota", "Workload", "hard"),
    ],
)
def test_each_scheduler_names_its_queue_workload_and_quota(
    scheduler, queue_kind, workload, nominal
):
    words = words_for(scheduler)
    assert (words.queue_kind, words.workload, words.nominal) == (queue_kind, workload, nominal)


def test_an_unknown_or_missing_scheduler_reads_as_kueue():
    assert words_for("") is KUEUE and words_for(None) is KUEUE and words_for("slurm") is KUEUE


def test_a_quota_in_each_schedulers_fields():
    # Kueue: flavor, nominal / borrowing limit.
    assert quota_text(words_for("kueue"), "h100", "8", "16", "24") == "h100 8 / 16"
    # Volcano: deserved and capability (= nominal + borrowing limit); none set: no capability.
    assert quota_text(words_for("volcano"), "default-flavor", "40", "16", "56") == (
        "deserved 40 · capability 56"
    )
    assert quota_text(words_for("volcano"), "default-flavor", "48", "unlimited", "") == (
        "deserved 48 · no capability"
    )
    assert quota_text(words_for("kai"), "default-flavor", "16", "8", "24") == "quota 16 · limit 24"
    # A ResourceQuota has a hard limit only.
    assert quota_text(words_for("resourcequota"), "default-flavor", "8", "0", "8") == "hard 8"


# A Kueue list page's title, queue word, cohort heading, Kueue-only columns and kinds.
KUEUE_PAGE = (
    "ClusterQueues",
    "ClusterQueue",
    "Cohort",
    True,
    "Kueue ClusterQueues",
    "Kueue Cohorts",
)


@pytest.mark.parametrize(
    ("schedulers", "title", "queue", "cohort", "kueue_only", "queue_kinds", "cohort_kinds"),
    [
        # Empty page or Kueue alone (an unknown scheduler reads as Kueue): Kueue's words.
        ([], *KUEUE_PAGE),
        (["kueue", None, "slurm"], *KUEUE_PAGE),
        # One other scheduler: its own words, not Kueue's.
        (
            ["volcano", "volcano"],
            "Queues",
            "Queue",
            "Parent queue",
            False,
            "Volcano Queues",
            "Volcano parent queues",
        ),
        (
            ["resourcequota"],
            "ResourceQuotas",
            "ResourceQuota",
            "Cohort",
            False,
            "namespace ResourceQuotas",
            "Kueue Cohorts",
        ),
        # Several: neutral headings, every kind present named once.
        (
            ["volcano", "kueue", "kai", "resourcequota"],
            "Queues",
            "queue",
            "Cohort / parent queue",
            False,
            "KAI Queues, Kueue ClusterQueues, Volcano Queues and namespace ResourceQuotas",
            "KAI parent queues, Kueue Cohorts and Volcano parent queues",
        ),
    ],
)
def test_a_list_page_speaks_its_one_scheduler_or_neutral_words_when_mixed(
    schedulers, title, queue, cohort, kueue_only, queue_kinds, cohort_kinds
):
    words = list_words(schedulers)
    # Several schedulers in the last case only.
    assert words.mixed is (schedulers == ["volcano", "kueue", "kai", "resourcequota"])
    assert (words.queues_title, words.queue, words.cohort_heading) == (title, queue, cohort)
    assert words.kueue_only is kueue_only
    assert (words.queue_kinds, words.cohort_kinds) == (queue_kinds, cohort_kinds)


@pytest.mark.parametrize(
    ("schedulers", "admitted", "nominal"),
    [
        (["kueue"], "Kueue quota admitted to workloads", "Kueue nominal"),
        (["volcano"], "Volcano quota admitted to PodGroups", "Volcano deserved"),
        (["kai"], "KAI quota admitted to PodGroups", "KAI quota"),
        (["resourcequota"], "ResourceQuota admitted to workloads", "ResourceQuota hard"),
        (["kueue", "kai"], "quota admitted to workloads", "nominal"),
    ],
)
def test_what_admitted_and_nominal_quota_are_in_each_schedulers_words(
    schedulers, admitted, nominal
):
    words = list_words(schedulers)
    assert (words.admitted, words.nominal) == (admitted, nominal)
