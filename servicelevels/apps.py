from django.apps import AppConfig


class ServiceLevelsConfig(AppConfig):
    name = "servicelevels"
    verbose_name = "Queue service levels: admissions, waits, evictions, objectives"

    def ready(self) -> None:
        # Live: the admission records follow every write of the Kueue sync (after its commit).
        from quotas.store.signals import workloads_written
        from servicelevels.build import on_workloads_written

        workloads_written.connect(on_workloads_written, dispatch_uid="servicelevels.build")
