from django.apps import AppConfig


class ServiceLevelsConfig(AppConfig):
    name = "servicelevels"
    verbose_name = "Queue service levels: admissions, waits, evictions, objectives"
