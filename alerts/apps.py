from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = "Alerts: hoarding episodes, thresholds, exemptions"

    def ready(self) -> None:
        # Evaluate after every collected window, live or backfilled: the collector sends
        # ledger.signals.windows_collected and never imports this app.
        from alerts import hooks

        hooks.connect()
