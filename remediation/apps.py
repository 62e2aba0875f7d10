from django.apps import AppConfig


class RemediationConfig(AppConfig):
    name = "remediation"
    verbose_name = "Remediation: policies and the audit of what was done to workloads"

    def ready(self) -> None:
        # The sender describes remediation deliveries through this app, which it never imports.
        from notifications.choices import DeliveryEvent
        from notifications.details import register
        from remediation import messages

        register(DeliveryEvent.REMEDIATION, messages.details)
