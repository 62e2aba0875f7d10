"""Team, cohort, ClusterQueue and workload pages and the JSON views behind their charts."""

from django.urls import path

from dashboard import charts, views

urlpatterns = [
    path("my-teams/", views.my_teams, name="my-teams"),
    path("teams/", views.team_list, name="team-list"),
    path("teams/<slug:name>/", views.team_detail, name="team-detail"),
    path(
        "teams/<slug:name>/charts/allocation.json",
        charts.team_allocation_chart,
        name="team-chart-allocation",
    ),
    path(
        "teams/<slug:name>/charts/queues.json",
        charts.team_queues_chart,
        name="team-chart-queues",
    ),
    path("cohorts/", views.cohort_list, name="cohort-list"),
    path("cohorts/<slug:cluster>/<str:name>/", views.cohort_detail, name="cohort-detail"),
    path(
        "cohorts/<slug:cluster>/<str:name>/charts/usage.json",
        charts.cohort_usage_chart,
        name="cohort-chart-usage",
    ),
    path(
        "cohorts/<slug:cluster>/<str:name>/charts/borrowing.json",
        charts.cohort_borrowing_chart,
        name="cohort-chart-borrowing",
    ),
    path("queues/", views.cluster_queue_list, name="cluster-queue-list"),
    path(
        "queues/<slug:cluster>/<str:name>/",
        views.cluster_queue_detail,
        name="cluster-queue-detail",
    ),
    path(
        "queues/<slug:cluster>/<str:name>/charts/usage.json",
        charts.cluster_queue_usage_chart,
        name="cluster-queue-chart-usage",
    ),
    path(
        "queues/<slug:cluster>/<str:name>/charts/evictions.json",
        charts.cluster_queue_evictions_chart,
        name="cluster-queue-chart-evictions",
    ),
    path(
        "queues/<slug:cluster>/<str:name>/quota/",
        views.quota_change_new,
        name="quota-change-new",
    ),
    path("quota-changes/", views.quota_change_list, name="quota-change-list"),
    path("quota-changes/<int:pk>/", views.quota_change_detail, name="quota-change-detail"),
    path("quota-changes/<int:pk>/apply/", views.quota_change_apply, name="quota-change-apply"),
    path("quota-changes/<int:pk>/patch.yaml", views.quota_change_patch, name="quota-change-patch"),
    path(
        "queues/<slug:cluster>/<str:name>/charts/waits.json",
        charts.cluster_queue_waits_chart,
        name="cluster-queue-chart-waits",
    ),
    path("queue-levels/", views.queue_levels, name="queue-levels"),
    path(
        "queue-levels/charts/waits.json",
        charts.queue_levels_waits_chart,
        name="queue-levels-chart-waits",
    ),
    path(
        "queue-levels/charts/evictions.json",
        charts.queue_levels_evictions_chart,
        name="queue-levels-chart-evictions",
    ),
    path(
        "queue-levels/charts/preemptions.json",
        charts.queue_levels_preemptions_chart,
        name="queue-levels-chart-preemptions",
    ),
    path(
        "teams/<slug:name>/charts/waits.json",
        charts.team_waits_chart,
        name="team-chart-waits",
    ),
    path("workloads/", views.workload_list, name="workload-list"),
    path("search/", views.search, name="search"),
    path("chargeback/", views.chargeback_page, name="chargeback"),
    path("workloads/<int:pk>/", views.workload_detail, name="workload-detail"),
    path(
        "workloads/<int:pk>/charts/timeline.json",
        charts.workload_timeline_chart,
        name="workload-chart-timeline",
    ),
    path(
        "workloads/<int:pk>/charts/activity.json",
        charts.workload_activity_chart,
        name="workload-chart-activity",
    ),
]
